"""Figures with provenance: PNG + PDF + a JSON sidecar, the numbers plotted, the runs behind them.

:func:`save_figure` writes a figure and its sidecar (parameters, seed, run config hashes, the
environment and git stamp of :mod:`lab.repro`, dataset checksums) and commits the runs
behind it as records (:mod:`lab.evidence.records`); :func:`write_figure_index` regenerates the
citation index ``figures/README.md``. Kept apart from :mod:`~lab.repro` so that the records
(which need its paths) and the figures (which need the records) import in one direction only.
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from fedlab import __version__, data_root
from lab.repro import (CITABLE_PROFILES, FIGURES_DIR, RENAMED_NOTEBOOKS, REPO_ROOT, SCRATCH_DIR, environment, git_commit,
                       in_scratch, notebook_now, package_versions)

if TYPE_CHECKING:
    from collections.abc import Callable

    import pandas as pd
    from matplotlib.figure import Figure

    from fedlab.results import RunResult

__all__ = ["ALLOW_DIRTY_ENV", "DirtyTreeError", "changelog_entry", "dataset_checksums", "figure_metadata",
           "save_curves", "save_figure", "write_figure_index"]

ALLOW_DIRTY_ENV = "FEDLAB_ALLOW_DIRTY_FIGURES"
"""Set to ``1`` to let :func:`save_figure` write into ``figures/`` from uncommitted code (development
only: the sidecar and the files' metadata then say ``+dirty``, which no one can check out)."""
CHANGELOG = REPO_ROOT / "CHANGELOG.md"


class DirtyTreeError(RuntimeError):
    """A citable figure would be stamped with a commit that does not hold the code that made it."""


def changelog_entry(version: str = __version__, changelog: Path = CHANGELOG) -> str | None:
    """``CHANGELOG.md#<anchor>`` of the ``## <version>`` heading (``## [0.4.0] — …`` or ``## 0.4.0 …``),
    or None when there is no changelog or no entry for ``version``. The anchor is the heading's slug as
    GitHub and MyST write it (lower case, punctuation dropped, spaces → ``-``)."""
    if not changelog.exists():
        return None
    for line in changelog.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^## \[?v?(\S+?)\]?(\s.*)?$", line)
        if m and m.group(1) == version:
            slug = re.sub(r"[^\w\- ]", "", line[3:].strip().lower()).replace(" ", "-")
            return f"{changelog.name}#{slug}"
    return None


def figure_metadata(name: str, caption: str, commit: str, version: str = __version__) -> dict[str, dict[str, object]]:
    """What :func:`save_figure` embeds in the image files, by format (matplotlib's ``metadata=``).

    PNG text chunks: ``Title`` (the figure name), ``Description`` (the caption), ``Software`` (fedlab
    and its version), ``Source`` (the git commit). PDF Info dictionary: ``Title``, ``Subject`` (the
    caption), ``Creator`` (fedlab and its version), ``Keywords`` (``git commit <sha>``); no creation
    date and no producer (matplotlib's version), so the bytes depend only on the figure and its stamp.
    """
    software = f"fedlab {version}"
    return {"png": {"Title": name, "Description": caption, "Software": software, "Source": f"git commit {commit}"},
            "pdf": {"Title": name, "Subject": caption, "Creator": software, "Keywords": f"git commit {commit}",
                    "CreationDate": None, "Producer": None}}


def _check_clean(commit: str, out: Path) -> None:
    """Refuse to write a figure into the committed ``figures/`` (any folder of it but ``_scratch/``, e.g.
    ``figures/regime/``) when the code is not a commit."""
    root, where = FIGURES_DIR.resolve(), out.resolve()
    committed = (where == root or root in where.parents) and not in_scratch(where)
    if not committed or not (commit.endswith("+dirty") or commit == "unknown"):
        return
    if os.environ.get(ALLOW_DIRTY_ENV) == "1":
        return
    why = ("tracked files outside figures/ have uncommitted changes" if commit.endswith("+dirty") else
           "the git commit cannot be read (not a git checkout, or git is missing)")
    raise DirtyTreeError(
        f"refusing to write a citable figure into {FIGURES_DIR}: {why}, so its stamp ({commit}) would name "
        f"no commit anyone can check out. Commit (or stash) the changes and run again; `git status` lists "
        f"them. For development only, {ALLOW_DIRTY_ENV}=1 allows it (the figure then says +dirty); the ci "
        "profile writes to figures/_scratch/ and is never refused")


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


FIGURE_KINDS = ("results", "tuning", "analysis", "claims")
SMOKE_TEST_MARK = "smoke test: ci size, not a result"
"""Written across every figure of a profile that is not citable (``ci``): its numbers only show the code runs, and a
reader skimming a notebook's outputs must see that in the figure itself, not only in the prose beside it."""


def mark_smoke_test(fig: Figure) -> None:
    """Write :data:`SMOKE_TEST_MARK` across ``fig`` (a light diagonal watermark; once, however often it is saved)."""
    if any(t.get_text() == SMOKE_TEST_MARK for t in fig.texts):
        return
    fig.text(0.5, 0.5, SMOKE_TEST_MARK, transform=fig.transFigure, ha="center", va="center", rotation=20,
             fontsize=22, color="0.5", alpha=0.35, zorder=1000)
"""What a figure shows (its sidecar's ``kind``): test-set results, tuning runs, analysis without training, or the
claims table's reading of committed records (the forest plot: it trains nothing and reads the records of many
figures, which it names in ``records`` without writing them)."""


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
    kind: str = "results",
    command: str | None = None,
    read_records: "list[str] | None" = None,
) -> dict[str, Path]:
    """Write ``name.png`` (150 dpi), ``name.pdf`` (no creation date) and ``name.json`` (provenance).

    Figures of the citable profiles (``cpu``, ``paper``) go to ``figures/`` and are indexed in
    ``figures/README.md``; ``ci``-profile figures go to ``figures/_scratch/`` (not committed), so a
    quick check never overwrites a citable figure, and carry :data:`SMOKE_TEST_MARK` across them.

    ``data`` — the numbers the figure plots (a DataFrame, or one per panel) — is written as
    ``name.csv``; the sidecar and the CSV get their lines in ``out_dir``'s evidence manifest
    (:mod:`lab.evidence.integrity`), replacing the previous version's. ``runs`` — the runs behind the figure — are committed as records
    (:mod:`lab.evidence.records`, in ``<out_dir>/records/``) and named in the sidecar together with their
    full configs, so the figure can be re-plotted and every number checked without training. The
    sidecar also holds the environment (python, OS, CPU, threads), the dataset files' checksums, the
    fedlab version (``version``) with its ``CHANGELOG.md`` entry (``changelog``), the commit and the
    command line of the process. The PNG and the PDF carry the name, the caption, the version and the
    commit in their own metadata (:func:`figure_metadata`), so a copy that lost its sidecar still
    says where it came from.

    Writing into the committed ``figures/`` from a tree with uncommitted changes outside ``figures/``
    or its sub-folders (or outside a git checkout) raises :class:`DirtyTreeError` before anything is written, unless
    ``$FEDLAB_ALLOW_DIRTY_FIGURES`` is ``1``; other folders (``figures/_scratch/`` of the ``ci``
    profile, a test's folder) are never refused. ``kind`` says what the figure
    shows: ``"results"`` (test-set runs), ``"tuning"`` (validation-set selection runs: one seed by
    protocol), ``"analysis"`` (toy problems, partition statistics: no federated training) or ``"claims"`` (the
    claims' reading of committed records). ``read_records``: the keys of committed records the figure reads
    without training or writing them (a figure of ``kind="claims"``, or a study's figure); they are named in the
    sidecar's ``records`` as ``runs``' would be, so its evidence line counts them, and a figure saved outside
    ``figures/`` itself names where they are (``records_dir``, relative to the sidecar).
    ``command``: for a figure made by a lab command rather than a notebook, the command that remakes it;
    ``notebook`` is then stored as given (the module that draws it), not as a notebook path.
    """
    import datetime
    import json

    if kind not in FIGURE_KINDS:
        raise ValueError(f"kind={kind!r} is invalid; allowed: {', '.join(FIGURE_KINDS)}")
    if not re.fullmatch(r"[a-z0-9][a-z0-9_\-]*", name):
        raise ValueError(f"figure name {name!r} must be lower-case letters, digits, '_' or '-'")
    if out_dir is None:
        out_dir = FIGURES_DIR if profile in CITABLE_PROFILES else SCRATCH_DIR
    out = Path(out_dir)
    commit = git_commit()
    _check_clean(commit, out)  # before anything is written, records included
    out.mkdir(parents=True, exist_ok=True)
    if profile not in CITABLE_PROFILES:
        mark_smoke_test(fig)
    paths = {"png": out / f"{name}.png", "pdf": out / f"{name}.pdf", "json": out / f"{name}.json"}
    table = _frames(data) if data is not None else None
    embedded = figure_metadata(name, caption, commit)
    fig.savefig(paths["png"], dpi=150, bbox_inches="tight", metadata=embedded["png"])
    fig.savefig(paths["pdf"], bbox_inches="tight", metadata=embedded["pdf"])
    nb = Path(notebook).stem
    params_file = f"notebooks/params/{nb}.{profile}.yaml"
    if command is None:
        command = (f"papermill notebooks/{nb}.ipynb runs/figures/{nb}.ipynb -k python3 --cwd notebooks"
                   + (f" -f {params_file}" if profile in CITABLE_PROFILES else ""))
        source = f"notebooks/{nb}.ipynb"
    else:
        source = str(notebook)
    meta = {
        "figure": name,
        "caption": caption,
        "notebook": source,
        "profile": profile,
        "kind": kind,
        "parameters": parameters or {},
        "seed": (parameters or {}).get("seed"),
        "config_hashes": config_hashes or [],
        "git_commit": commit,
        "version": __version__,
        "changelog": changelog_entry(),
        "packages": package_versions(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command,
        "argv": list(__import__("sys").argv),
        "environment": environment(),
    }
    if runs:
        from lab.evidence.records import write_records

        meta["records"] = write_records(runs, out / "records")
        meta["configs"] = {key: {**r.config.to_dict(), "runs_dir": None, "config_hash": r.key,
                                 "status": r.status} for key, r in zip(meta["records"], _unique(runs))}
        meta["dataset_checksums"] = {ds: dataset_checksums(ds) for ds in sorted({r.config.dataset for r in runs})}
        if not config_hashes:
            meta["config_hashes"] = [r.key for r in _unique(runs)]
        meta["collapsed"] = [k for k, r in zip(meta["records"], _unique(runs)) if r.status == "collapsed"]
    elif read_records:
        meta["records"] = sorted(set(read_records))
        if out.resolve() != FIGURES_DIR.resolve():  # committed records live in figures/records, named from here
            meta["records_dir"] = os.path.relpath(FIGURES_DIR / "records", out)
    if table is not None:
        paths["csv"] = out / f"{name}.csv"
        table.to_csv(paths["csv"], index=False, float_format="%.6g")
        meta["data"] = f"{name}.csv"
    paths["json"].write_text(json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")
    # The sidecar decides which records a claim reads and the CSV is what a table claim computes from: both
    # are evidence (lab.evidence.integrity), recorded here as they are written, so a figure remade on any
    # branch keeps its manifest right. Remaking a figure is the explicit act that replaces their lines.
    from lab.evidence.integrity import rerecord

    if not in_scratch(out):
        rerecord([paths["json"], *([paths["csv"]] if "csv" in paths else [])], out)
    if out.resolve() == FIGURES_DIR.resolve():
        write_figure_index(FIGURES_DIR)
    return paths


def _unique(runs: "list[RunResult]") -> "list[RunResult]":
    """Each run once, in order, by its id: a run and its record are one (as :func:`write_records` keys them)."""
    first: dict[str | None, RunResult] = {}
    for r in runs:
        first.setdefault(r.run_id, r)
    return list(first.values())


def write_figure_index(figures_dir: Path = FIGURES_DIR) -> Path:
    """Regenerate ``figures/README.md`` from the JSON sidecars: the claims table first (generated from the
    committed data, :func:`lab.evidence.findings.claims_block`: paired, with the findings and the forest plot), then every figure with its data
    file, the evidence behind it (run records, seeds) and the command that remakes it."""
    import json

    from lab.evidence.claims import BLOCK_END, BLOCK_START
    from lab.evidence.findings import claims_block
    from lab.evidence.report import figure_from_sidecar

    figures_dir = Path(figures_dir)
    entries = []
    for sidecar in sorted(figures_dir.glob("*.json")):
        try:
            meta = json.loads(sidecar.read_text())
        except json.JSONDecodeError:
            continue
        if "figure" in meta:
            entries.append((meta, figure_from_sidecar(sidecar, meta)))
    entries.sort(key=lambda e: (notebook_now(e[0]["notebook"]), e[0]["figure"]))
    claims_file = figures_dir / "claims.yaml"
    claims = claims_block(figures_dir, figures_dir) if claims_file.exists() else "(no claims.yaml)"
    lines = [
        "# Figures",
        "",
        "## The papers' claims on the cpu profile",
        "",
        BLOCK_START,
        claims,
        BLOCK_END,
        "",
        "## Every figure",
        "",
        "Every figure here was made by a notebook through `lab.tools.figures.save_figure`, which writes a PNG,",
        "a PDF, the data it plots (CSV) and a JSON sidecar with the provenance (parameters, seeds, full",
        "configs, the committed run records behind it, git commit, package versions, machine, command).",
        "Rebuild all of them with `make figures`, or one with its command below. To cite a figure, cite",
        "the repository (`CITATION.cff`) and give the figure name and the git commit from its sidecar.",
        "",
        "| figure | data | evidence | caption | notebook | profile | command |",
        "|---|---|---|---|---|---|---|",
    ]
    for m, fig in entries:
        name = m["figure"]
        caption = str(m.get("caption", "")).replace("|", "\\|").replace("\n", " ")
        data = f"[csv]({name}.csv)" if (figures_dir / f"{name}.csv").exists() else "—"
        made_by, command = f"`{m['notebook']}`", m["command"]
        old = Path(m["notebook"]).stem
        if old in RENAMED_NOTEBOOKS:  # the sidecar keeps the name it was made under; the index says today's
            made_by = f"`{m['notebook'].replace(old, RENAMED_NOTEBOOKS[old])}` (made as `{old}`)"
            command = command.replace(old, RENAMED_NOTEBOOKS[old])
        lines.append(f"| [{name}]({name}.png) ([pdf]({name}.pdf), [json]({name}.json)) | {data} | {fig.evidence()}"
                     f" | {caption} | {made_by} | {m['profile']} | `{command}` |")
    path = figures_dir / "README.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def save_curves(runs: "dict[str, list[RunResult]]", panels: "dict[str, tuple[str, str]]", name: str, *,
                notebook: str, profile: str, caption: str, parameters: dict | None = None,
                suptitle: str | None = None, log_y: bool = False, legend: str = "lower center",
                decorate: "Callable[..., None] | None" = None,
                small_multiples: bool | None = None, reference: str | None = None) -> "Figure":
    """One curve figure in one call: every method of ``runs`` as its mean over the finished seeds (thick)
    with each seed as a thin line and each collapsed or diverged seed on its own
    (:func:`lab.tools.plots.draw_seeds`), one legend; then :func:`save_figure` with the plotted numbers
    (:func:`~lab.tools.plots.curves_table` per metric), every run as evidence, and the caption completed
    by :func:`~lab.tools.plots.status_note`. ``panels``: metric → (title, y label).

    An accuracy is drawn in % (:func:`~lab.tools.plots.metric_scale`, the y label says so) and the round
    axis is ticked at evaluated rounds (:func:`~lab.tools.plots.round_ticks`). With more than three
    methods (or ``small_multiples=True``) each metric gets one panel per method, shared axes, the
    ``reference`` method (default FedAvg) as a grey line in each
    (:func:`~lab.tools.plots.draw_small_multiples`): eight methods' seeds in one panel hide each other.
    ``decorate`` draws extras on the axes before the figure is saved: ``decorate({metric: axes})``, and
    with small multiples ``decorate({metric: axes}, key)`` once per method (``key`` of ``runs``), so that
    an extra that belongs to one method is drawn in its panels only. Returns the figure."""
    import math

    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.lines import Line2D

    from lab.tools.plots import (
        SEED_LINEWIDTH, all_runs, curve_data, curves_table, draw_runs, draw_small_multiples, metric_scale, round_ticks, status_note)

    multiples = len(runs) > 3 if small_multiples is None else small_multiples
    n = len(panels)
    if multiples:
        ncols = min(4, len(runs))
        rows_per = math.ceil(len(runs) / ncols)
        fig, grid = plt.subplots(n * rows_per, ncols, figsize=(3.3 * ncols + 1.0, 2.6 * n * rows_per + 1.0),
                                 layout="constrained", squeeze=False, sharex=True)
        blocks = {m: grid[k * rows_per:(k + 1) * rows_per].ravel() for k, m in enumerate(panels)}
        for m, block in blocks.items():  # the y axis shared within a metric's block, not across metrics
            for ax in block[1:]:
                ax.sharey(block[0])
    else:
        fig, grid = plt.subplots(1, n, figsize=(8, 4.8) if n == 1 else (5.5 * n, 4.6), layout="constrained",
                                 squeeze=False)
        blocks = {m: [ax] for m, ax in zip(panels, grid[0])}
    # with a shared round axis the ticks must be evaluated rounds of every metric (their common grid)
    grids = {m: {int(r) for r in curve_data(all_runs(runs), m)["round"]} for m in panels}
    common = set.intersection(*grids.values())
    for metric, (title, ylabel) in panels.items():
        scale = metric_scale(metric)
        ylabel = f"{ylabel} (%)" if scale == 100.0 and "%" not in ylabel else ylabel
        block = blocks[metric]
        if multiples:
            draw_small_multiples(block, runs, metric, reference=reference, scale=scale)
            for j, ax in enumerate(block[:len(runs)]):
                ax.set_title(f"{title}: {ax.get_title()}" if j == 0 else ax.get_title(), fontsize=9)
                if j % grid.shape[1] == 0:
                    ax.set_ylabel(ylabel)
        else:
            draw_runs(block[0], runs, metric, scale=scale)
            block[0].set(title=title, ylabel=ylabel)
        evaluated = common if multiples and len(common) >= 2 else grids[metric]
        for ax in block:
            if log_y:
                ax.set_yscale("log")
            round_ticks(ax, evaluated)
    for ax in grid[-1]:
        ax.set_xlabel("round")
    if multiples:  # a panel above a hidden one (fewer methods than the last row has panels) is a bottom panel
        for i, j in np.ndindex(grid.shape[0] - 1, grid.shape[1]):
            if grid[i, j].get_visible() and not grid[i + 1, j].get_visible():
                grid[i, j].tick_params(labelbottom=True)
                grid[i, j].set_xlabel("round")
    if not multiples:
        for ax in grid[0]:
            ax.set_xlabel("round")
    if decorate is not None:
        if multiples:
            for j, key in enumerate(runs):
                decorate({m: blocks[m][j] for m in panels}, key)
        else:
            decorate({m: blocks[m][0] for m in panels})
    handles: dict[str, object] = {}
    for ax in grid.ravel():
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    handles["one seed (thin line)"] = Line2D([], [], color="#555555", linewidth=SEED_LINEWIDTH)
    where = {"lower center": dict(loc="outside lower center", ncol=min(6, len(handles))),
             "right": dict(loc="outside right center")}[legend]
    fig.legend(list(handles.values()), list(handles), **where)
    if suptitle:
        fig.suptitle(suptitle)
    table = {k: v for metric in panels for k, v in curves_table(runs, metric, metric_scale(metric)).items()}
    note = status_note(all_runs(runs))
    save_figure(fig, name, notebook=notebook, profile=profile, caption=f"{caption} {note}".strip(),
                parameters=parameters, data=table, runs=all_runs(runs))
    return fig
