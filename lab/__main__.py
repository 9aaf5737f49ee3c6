"""``python -m lab``: the repository's commands (:mod:`lab.cli`), with the lab's environment set first
(the repository's ``runs/`` and the allocator policy: :func:`lab.tools.repro.lab_environment`)."""
from lab.cli import main
from lab.tools.repro import lab_environment

if __name__ == "__main__":
    lab_environment()
    raise SystemExit(main())
