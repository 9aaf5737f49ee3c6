"""``python -m fedlab.evidence``: check the evidence manifest, add new evidence, or re-record a change.

A module of its own (not ``python -m fedlab.evidence.integrity``) because ``import fedlab`` already
imports :mod:`fedlab.evidence.integrity`, and runpy warns when the module it runs is already loaded.
"""
from fedlab.evidence.integrity import main

if __name__ == "__main__":
    raise SystemExit(main())
