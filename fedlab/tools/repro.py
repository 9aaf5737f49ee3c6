"""Reproducibility helpers: repository paths, derived random generators, the environment and git stamp.

Every random choice in fedlab draws from its own generator, derived from the experiment seed and a
*purpose* tuple such as ``("batches", round, client)``. The derivation goes through SHA-256 of the
textual key, so it is independent of ``PYTHONHASHSEED``, dict order and the global RNG state, and a
resumed run re-creates exactly the generators an uninterrupted run would have used.

Saving a figure with its provenance is :mod:`fedlab.tools.figures`; it uses the stamp helpers here.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import torch

REPO_ROOT: Path = Path(__file__).resolve().parents[2]  # this file is <repo>/fedlab/tools/repro.py
"""The repository root (notebooks resolve every path from here, never from the cwd)."""


def data_root() -> Path:
    """Where datasets live: ``$FEDLAB_DATA`` if set, else ``<repo>/data``."""
    env = os.environ.get("FEDLAB_DATA")
    return Path(env).expanduser().resolve() if env else REPO_ROOT / "data"


def derive_seed(seed: int, *purpose: object) -> int:
    """A 63-bit seed derived from ``seed`` and a purpose tuple (stable across processes)."""
    key = repr((int(seed),) + tuple(str(p) for p in purpose)).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "little") >> 1


def torch_generator(seed: int, *purpose: object, device: str | torch.device = "cpu") -> torch.Generator:
    """A fresh ``torch.Generator`` on ``device`` for one purpose."""
    gen = torch.Generator(device=device)
    gen.manual_seed(derive_seed(seed, *purpose))
    return gen


def numpy_generator(seed: int, *purpose: object) -> np.random.Generator:
    """A fresh ``numpy.random.Generator`` (PCG64) for one purpose."""
    return np.random.default_rng(derive_seed(seed, *purpose))


# --- where figures go, and the stamp of where they were made -------------------------------------
FIGURES_DIR: Path = REPO_ROOT / "figures"
CITABLE_PROFILES = ("cpu", "paper")
"""Profiles whose figures are citable: saved to ``figures/`` (others to ``figures/_scratch/``)."""


def git_commit(root: Path | None = None) -> str:
    """The HEAD commit of the checkout at ``root`` (default: this repository), ``+dirty`` when tracked
    files outside ``figures/`` have uncommitted changes; ``unknown`` outside a git checkout.

    ``figures/`` is left out of the check because a figure run rewrites ``figures/README.md`` (and
    earlier figures) itself: without the exclusion every figure after the first of a ``make figures``
    run would be stamped dirty although the code that made it is exactly HEAD.
    """
    import subprocess

    root = REPO_ROOT if root is None else Path(root)
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":(exclude)figures"], cwd=root, capture_output=True, text=True,
                               timeout=10).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "") if out.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def package_versions() -> dict[str, str]:
    import matplotlib
    import pandas

    from fedlab._version import __version__

    return {"fedlab": __version__, "torch": torch.__version__, "numpy": np.__version__,
            "pandas": pandas.__version__, "matplotlib": matplotlib.__version__}


def environment() -> dict[str, object]:
    """Where a figure was made: python, OS, CPU, core and thread counts."""
    import platform
    import sys

    return {"python": sys.version.split()[0], "implementation": platform.python_implementation(),
            "os": platform.platform(), "machine": platform.machine(), "cpu": _cpu_name(),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}


def _cpu_name() -> str:
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
