"""The repository's paths and stamps: where this checkout keeps its figures and runs, the git commit
and the environment a figure was made in (:mod:`lab.tools.figures` writes them into each sidecar).

The seed derivation every run uses is the library's (:func:`fedlab.derive_seed`,
:func:`fedlab.torch_generator`, :func:`fedlab.numpy_generator`); only what belongs to this repository is here.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

REPO_ROOT: Path = Path(__file__).resolve().parents[1]  # this file is <repo>/lab/repro.py
"""The repository root (notebooks resolve every path from here, never from the cwd)."""
RUNS_DIR: Path = REPO_ROOT / "runs"
"""The repository's run store: the lab points ``$FEDLAB_RUNS`` here (:func:`lab_environment`)."""


def lab_environment() -> None:
    """What every entry point of the lab sets before it trains (the Makefile sets the same):
    ``$FEDLAB_RUNS`` = the repository's ``runs/`` unless already set, so a notebook executed with
    ``--cwd notebooks`` still writes to ``<repo>/runs``; and the fixed allocator thresholds of
    :func:`fedlab.engine.malloc.stable_malloc` (timing only, never numbers)."""
    from fedlab.engine.malloc import stable_malloc

    os.environ.setdefault("FEDLAB_RUNS", str(RUNS_DIR))
    stable_malloc()


# --- notebooks renamed after they made committed figures ----------------------------------------
RENAMED_NOTEBOOKS: dict[str, str] = {"11_global_perturbation": "09b_global_perturbation"}
"""Old notebook stem → today's, for notebooks renumbered so that the course reads in order (the successors
of 09b now come before the benchmark 10 that judges them). A committed figure keeps its name, the name a
citation uses, and its sidecar keeps the notebook and the command that made it; :func:`notebook_now` reads
them as today's notebook. ``CHANGELOG.md`` lists each rename and the book redirects each old page."""


def notebook_now(notebook: str | os.PathLike) -> str:
    """Today's stem of the notebook that a sidecar, a claim or a record names (a path or a stem)."""
    stem = Path(notebook).stem
    return RENAMED_NOTEBOOKS.get(stem, stem)


# --- where figures go, and the stamp of where they were made -------------------------------------
FIGURES_DIR: Path = REPO_ROOT / "figures"
SCRATCH_DIR: Path = FIGURES_DIR / "_scratch"
"""Where the ``ci`` profile's figures go: ignored by git, so nothing in it is evidence."""
CITABLE_PROFILES = ("cpu", "paper")
"""Profiles whose figures are citable: saved to ``figures/`` (others to ``figures/_scratch/``)."""


def in_scratch(path: str | os.PathLike) -> bool:
    """Whether ``path`` is :data:`SCRATCH_DIR` or inside it: nothing there is evidence, so no manifest lists it
    and no check reads it. Reads the module attribute at call time (tests point it at a temporary folder)."""
    scratch, where = Path(SCRATCH_DIR).resolve(), Path(path).resolve()
    return where == scratch or scratch in where.parents


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

    from fedlab import __version__

    return {"fedlab": __version__, "torch": torch.__version__, "numpy": np.__version__,
            "pandas": pandas.__version__, "matplotlib": matplotlib.__version__}


def environment() -> dict[str, object]:
    """Where a figure was made: python, OS, CPU, core and thread counts."""
    import platform
    import sys

    return {"python": sys.version.split()[0], "implementation": platform.python_implementation(),
            "os": platform.platform(), "machine": platform.machine(), "cpu": cpu_name(),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}


def cpu_name() -> str:
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
