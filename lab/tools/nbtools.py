"""Notebook maintenance: pair, execute (``ci`` size) and normalise the tutorial notebooks.

``python -m lab.tools.nbtools build [NN ...]`` turns each ``notebooks/NN_slug.py`` (jupytext
py:percent, the reviewable source) into ``NN_slug.ipynb``, executes it in place with papermill at its
default parameters and strips volatile metadata, keeping outputs and execution counts (nbval needs
both); ``pair`` only pairs, without executing (outputs dropped); ``sync`` carries a prose change into the
.ipynb, outputs kept. That every pair is in sync is a test
(``tests/test_notebooks_meta.py::test_paired_script_in_sync``).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from lab.repro import REPO_ROOT

NB_DIR = REPO_ROOT / "notebooks"
STRIP_FLAGS = ["--keep-output", "--keep-count", "--extra-keys", "metadata.papermill cell.metadata.papermill"]


def notebooks(selection: list[str] | None = None) -> list[Path]:
    scripts = sorted(NB_DIR.glob("[0-9][0-9]*_*.py"))
    if selection:
        # "01" names notebook 01 only, not 01b: a selection is a whole prefix (up to the first _) or a stem start
        scripts = [s for s in scripts if any(s.name.split("_")[0] == sel or ("_" in sel and s.name.startswith(sel))
                                             for sel in selection)]
    return scripts


def _run(cmd: list[str]) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=REPO_ROOT)


def build(script: Path, execute: bool = True) -> Path:
    ipynb = script.with_suffix(".ipynb")
    py = sys.executable
    _run([py, "-m", "jupytext", "--to", "ipynb", "--set-kernel", "python3", str(script), "-o", str(ipynb)])
    if execute:
        _run([py, "-m", "papermill", str(ipynb), str(ipynb), "-k", "python3", "--cwd", str(NB_DIR),
              "--execution-timeout", "1200", "--no-progress-bar", "--log-level", "WARNING"])
    _run([py, "-m", "nbstripout", *STRIP_FLAGS, str(ipynb)])
    return ipynb


def sync(script: Path) -> Path:
    """Carry a change of the .py's text into its .ipynb without executing: ``jupytext --update`` keeps every
    output and cell id, so use it only where no output changes (prose, a comment); a code change needs
    :func:`build`."""
    ipynb = script.with_suffix(".ipynb")
    _run([sys.executable, "-m", "jupytext", "--update", "--to", "ipynb", str(script), "-o", str(ipynb)])
    _run([sys.executable, "-m", "nbstripout", *STRIP_FLAGS, str(ipynb)])
    return ipynb


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in ("build", "pair", "sync"):
        print(__doc__)
        return 2
    for script in notebooks(args[1:]):
        if args[0] == "sync":
            sync(script)
        else:
            build(script, execute=args[0] == "build")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
