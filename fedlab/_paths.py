"""Where fedlab looks for datasets on disk (the one path the library itself resolves)."""
from __future__ import annotations

import os
from pathlib import Path

_CHECKOUT: Path = Path(__file__).resolve().parents[1]  # this file is <checkout>/fedlab/_paths.py
REPO_ROOT = _CHECKOUT  # the default runs_dir of a checkout (fedlab.engine.loop, fedlab.sweep.backends)


def data_root() -> Path:
    """Where datasets live: ``$FEDLAB_DATA`` if set, else ``data/`` beside the ``fedlab`` package (the
    repository's ``data/`` in a checkout; set ``FEDLAB_DATA`` for an installed fedlab)."""
    env = os.environ.get("FEDLAB_DATA")
    return Path(env).expanduser().resolve() if env else _CHECKOUT / "data"
