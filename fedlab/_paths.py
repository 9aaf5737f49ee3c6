"""Where fedlab keeps runs and looks for datasets when the caller does not say.

Neither default lies inside the installed package: runs go to ``$FEDLAB_RUNS`` or ``./runs`` of the
working directory; datasets are read from ``$FEDLAB_DATA``, else the repository's ``data/`` in a
checkout, else (an installed fedlab) the user's cache folder, named on stderr the first time it is made.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

_CHECKOUT: Path = Path(__file__).resolve().parents[1]  # this file is <checkout>/fedlab/_paths.py


def default_runs_dir() -> Path:
    """Where run directories live when ``Config.runs_dir`` is None: ``$FEDLAB_RUNS`` if set, else
    ``runs/`` of the current working directory (read at each call, so a process may change either)."""
    env = os.environ.get("FEDLAB_RUNS")
    return Path(env).expanduser() if env else Path.cwd() / "runs"


def data_root() -> Path:
    """Where datasets live: ``$FEDLAB_DATA``; else the repository's ``data/`` in a checkout (``pyproject.toml``
    beside the package); else ``$XDG_CACHE_HOME/fedlab-sam/data`` (``~/.cache``), never site-packages, where an
    uninstall would delete the data and other users could not write. Named on stderr when first made."""
    if os.environ.get("FEDLAB_DATA"):
        return Path(os.environ["FEDLAB_DATA"]).expanduser().resolve()
    if (_CHECKOUT / "pyproject.toml").is_file():
        return _CHECKOUT / "data"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "fedlab-sam" / "data"
    if not cache.exists():
        cache.mkdir(parents=True)
        print(f"fedlab: datasets are kept in {cache} (set FEDLAB_DATA to choose another folder)", file=sys.stderr)
    return cache
