"""Where fedlab keeps runs and looks for datasets when the caller does not say.

Neither default lies inside the installed package: runs go to ``$FEDLAB_RUNS`` or ``./runs`` of the
working directory; datasets are read from ``$FEDLAB_DATA`` or ``data/`` beside the ``fedlab`` folder
(the repository's ``data/`` in a checkout).
"""
from __future__ import annotations

import os
from pathlib import Path

_CHECKOUT: Path = Path(__file__).resolve().parents[1]  # this file is <checkout>/fedlab/_paths.py


def default_runs_dir() -> Path:
    """Where run directories live when ``Config.runs_dir`` is None: ``$FEDLAB_RUNS`` if set, else
    ``runs/`` of the current working directory (read at each call, so a process may change either)."""
    env = os.environ.get("FEDLAB_RUNS")
    return Path(env).expanduser() if env else Path.cwd() / "runs"


def data_root() -> Path:
    """Where datasets live: ``$FEDLAB_DATA`` if set, else ``data/`` beside the ``fedlab`` package (the
    repository's ``data/`` in a checkout; set ``FEDLAB_DATA`` for an installed fedlab)."""
    env = os.environ.get("FEDLAB_DATA")
    return Path(env).expanduser().resolve() if env else _CHECKOUT / "data"
