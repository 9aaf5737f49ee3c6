"""``python -m lab``: the repository's commands (:mod:`lab.cli`); importing :mod:`lab` has already set
the lab's environment (the repository's ``runs/``, the allocator policy)."""
from lab.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
