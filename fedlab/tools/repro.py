"""Reproducibility helpers: repository paths, derived random generators, figure provenance.

Every random choice in fedlab draws from its own generator, derived from the experiment seed and a
*purpose* tuple such as ``("batches", round, client)``. The derivation goes through SHA-256 of the
textual key, so it is independent of ``PYTHONHASHSEED``, dict order and the global RNG state, and a
resumed run re-creates exactly the generators an uninterrupted run would have used.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from fedlab.results import RunResult

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


# --- figures with provenance -------------------------------------------------------------------
FIGURES_DIR: Path = REPO_ROOT / "figures"
CITABLE_PROFILES = ("cpu", "paper")


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


_CHECKSUMS: dict[str, dict[str, str]] = {}


def dataset_checksums(name: str) -> dict[str, str]:
    """SHA-256 of the files a dataset is read from (``{}`` for generated data; cached per process)."""
    if name not in _CHECKSUMS:
        root = data_root()
        if name == "fmnist":
            files = sorted((root / "FashionMNIST" / "raw").glob("*-ubyte"))
        elif name == "cifar10":
            files = sorted((root / "cifar-10-batches-py").glob("*"))
        elif name == "cifar100":
            files = sorted((root / "cifar-100-python").glob("*"))
        elif name == "digits":
            import sklearn.datasets

            files = sorted((Path(sklearn.datasets.__file__).parent / "data").glob("digits.csv*"))
        else:  # synthetic: generated from the seed
            files = []
        sums = {}
        for f in files:
            digest = hashlib.sha256()
            with open(f, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(chunk)
            sums[f.name] = digest.hexdigest()
        _CHECKSUMS[name] = sums
    return _CHECKSUMS[name]


def _frames(data: "pd.DataFrame | dict[str, pd.DataFrame]") -> "pd.DataFrame":
    import pandas as pd

    if isinstance(data, pd.DataFrame):
        return data
    if isinstance(data, dict) and all(isinstance(v, pd.DataFrame) for v in data.values()):
        return pd.concat([v.assign(panel=k) for k, v in data.items()], ignore_index=True)
    raise TypeError("save_figure(data=...) takes a DataFrame or a dict of panel name → DataFrame, "
                    f"got {type(data).__name__}")


def save_figure(
    fig: Figure,
    name: str,
    *,
    notebook: str,
    profile: str,
    caption: str,
    parameters: dict | None = None,
    config_hashes: list[str] | None = None,
    out_dir: str | Path | None = None,
    data: "pd.DataFrame | dict[str, pd.DataFrame] | None" = None,
    runs: "list[RunResult] | None" = None,
) -> dict[str, Path]:
    """Write ``name.png`` (150 dpi), ``name.pdf`` (no creation date) and ``name.json`` (provenance).

    Figures of the citable profiles (``cpu``, ``paper``) go to ``figures/`` and are indexed in
    ``figures/README.md``; ``ci``-profile figures go to ``figures/_scratch/`` (not committed), so a
    quick check never overwrites a citable figure.

    ``data`` — the numbers the figure plots (a DataFrame, or one per panel) — is written as
    ``name.csv``. ``runs`` — the runs behind the figure — are committed as records
    (:mod:`fedlab.evidence.records`, in ``<out_dir>/records/``) and named in the sidecar together with their
    full configs, so the figure can be re-plotted and every number checked without training. The
    sidecar also holds the environment (python, OS, CPU, threads), the dataset files' checksums, the
    fedlab version, the commit and the command line of the process.
    """
    import datetime
    import json
    import re

    if not re.fullmatch(r"[a-z0-9][a-z0-9_\-]*", name):
        raise ValueError(f"figure name {name!r} must be lower-case letters, digits, '_' or '-'")
    if out_dir is None:
        out_dir = FIGURES_DIR if profile in CITABLE_PROFILES else FIGURES_DIR / "_scratch"
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"png": out / f"{name}.png", "pdf": out / f"{name}.pdf", "json": out / f"{name}.json"}
    table = _frames(data) if data is not None else None
    fig.savefig(paths["png"], dpi=150, bbox_inches="tight", metadata={"Software": None})
    fig.savefig(paths["pdf"], bbox_inches="tight", metadata={"CreationDate": None, "Creator": None,
                                                             "Producer": None})
    nb = Path(notebook).stem
    params_file = f"notebooks/params/{nb}.{profile}.yaml"
    command = (f"papermill notebooks/{nb}.ipynb runs/figures/{nb}.ipynb -k python3 --cwd notebooks"
               + (f" -f {params_file}" if profile in CITABLE_PROFILES else ""))
    meta = {
        "figure": name,
        "caption": caption,
        "notebook": f"notebooks/{nb}.ipynb",
        "profile": profile,
        "parameters": parameters or {},
        "seed": (parameters or {}).get("seed"),
        "config_hashes": config_hashes or [],
        "git_commit": git_commit(),
        "packages": package_versions(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command,
        "argv": list(__import__("sys").argv),
        "environment": environment(),
    }
    if runs:
        from fedlab.evidence.records import write_records

        meta["records"] = write_records(runs, out / "records")
        meta["configs"] = {key: {**r.config.to_dict(), "runs_dir": None, "config_hash": r.summary.get("config_hash"),
                                 "status": r.status} for key, r in zip(meta["records"], _unique(runs))}
        meta["dataset_checksums"] = {ds: dataset_checksums(ds) for ds in sorted({r.config.dataset for r in runs})}
        if not config_hashes:
            meta["config_hashes"] = [r.summary.get("config_hash") for r in _unique(runs)]
        meta["collapsed"] = [k for k, r in zip(meta["records"], _unique(runs)) if r.status == "collapsed"]
    if table is not None:
        paths["csv"] = out / f"{name}.csv"
        table.to_csv(paths["csv"], index=False, float_format="%.6g")
        meta["data"] = f"{name}.csv"
    paths["json"].write_text(json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")
    if out.resolve() == FIGURES_DIR.resolve():
        write_figure_index(FIGURES_DIR)
    return paths


def _unique(runs: "list[RunResult]") -> "list[RunResult]":
    seen: set[str] = set()
    out = []
    for r in runs:
        key = Path(r.run_dir).name
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def write_figure_index(figures_dir: Path = FIGURES_DIR) -> Path:
    """Regenerate ``figures/README.md`` (the citation index) from the JSON sidecars."""
    import json

    entries = []
    for sidecar in sorted(Path(figures_dir).glob("*.json")):
        try:
            meta = json.loads(sidecar.read_text())
        except json.JSONDecodeError:
            continue
        if "figure" in meta:
            entries.append(meta)
    entries.sort(key=lambda m: (m["notebook"], m["figure"]))
    lines = [
        "# Figures",
        "",
        "Every figure here was made by a notebook through `fedlab.tools.repro.save_figure`, which writes a PNG,",
        "a PDF and a JSON sidecar with the provenance (parameters, seed, run config hashes, git commit,",
        "package versions, date). Rebuild all of them with `make figures`, or one with its command below.",
        "To cite a figure, cite the repository (`CITATION.cff`) and give the figure name and git commit",
        "from its sidecar.",
        "",
        "| figure | caption | notebook | profile | command |",
        "|---|---|---|---|---|",
    ]
    for m in entries:
        caption = str(m.get("caption", "")).replace("|", "\\|").replace("\n", " ")
        lines.append(f"| [{m['figure']}]({m['figure']}.png) ([pdf]({m['figure']}.pdf), [json]({m['figure']}.json))"
                     f" | {caption} | `{m['notebook']}` | {m['profile']} | `{m['command']}` |")
    path = Path(figures_dir) / "README.md"
    path.write_text("\n".join(lines) + "\n")
    return path
