""""What the cpu run shows": each notebook's closing section, generated from committed data only.

:func:`cpu_report` gathers, for one notebook, its committed cpu-profile figures (the sidecars in
``figures/`` whose ``notebook`` is it), how much evidence stands behind each (committed run records,
seeds; whether it meets the protocol of :mod:`lab.evidence.protocol`), and the rows of the claims
table (:mod:`lab.evidence.claims`) that the notebook tests, with the table's paired verdict and numbers. Nothing in it
is typed by hand except the claims' wording and, per claim, the likely reason shown *if* the verdict
is fails or inconclusive (``reasons`` in ``figures/claims.yaml``): the verdicts and the numbers come
from the records, so the section changes when the evidence does.

In a notebook::

    from lab.evidence.report import cpu_report
    report = cpu_report("04_sam_baselines")
    report.show_figures()   # the committed cpu figures, embedded
    print(report.text())    # NBVAL_CHECK_OUTPUT: the claims rows and the evidence, as plain text
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.evidence.claims import PairedVerdict, evaluate_claims_paired, leaning, load_claims
from lab.evidence.map_table import map_reading
from lab.evidence.validity import UNTESTED
from lab.evidence.paired import MIN_SEEDS_TO_DECIDE
from lab.repro import FIGURES_DIR, notebook_now

__all__ = ["CpuFigure", "CpuReport", "committed_final_accuracy", "committed_parameters", "committed_table", "cpu_figures",
           "cpu_report",
           "figure_from_sidecar", "sidecar_partition_rule"]


@dataclass(frozen=True)
class CpuFigure:
    name: str
    caption: str
    records: int  # committed run records behind it
    seeds: int  # seeds per comparison it states
    png: Path
    trains: bool = True  # federated runs behind it (False: partition statistics, toy problems)
    kind: str = "results"  # save_figure's kind: results | tuning | analysis | claims

    def evidence(self) -> str:
        """One line on what stands behind the figure. The seed count it is held against is
        :data:`~lab.evidence.paired.MIN_SEEDS_TO_DECIDE`, the paired seeds a verdict needs (the rerun protocol's
        seeds): a figure on fewer seeds describes, it decides nothing."""
        if self.kind == "tuning":
            return "tuning runs on held-out validation data (one seed by protocol)"
        if self.kind == "claims":  # the claims' reading of committed records: it trains nothing, it reads runs
            return (f"the claims table's paired comparisons, read from the committed records of {self.records} runs "
                    f"over {self.seeds} seed(s)")
        if not self.trains:
            return "no federated training (a toy problem or partition statistics)"
        if self.records == 0:
            return "made before the evidence protocol: no committed records (an illustration)"
        extra = "" if self.protocol else f"; {_too_few()}"
        return f"{self.records} run records, {self.seeds} seed(s){extra}"

    @property
    def protocol(self) -> bool:
        """Backed by committed records over at least the paired seeds a verdict needs (or tuning data)."""
        return self.kind == "tuning" or (self.records > 0 and self.seeds >= MIN_SEEDS_TO_DECIDE)


def _too_few() -> str:
    """What a figure on fewer than :data:`~lab.evidence.paired.MIN_SEEDS_TO_DECIDE` seeds is, in words."""
    return f"fewer than the {MIN_SEEDS_TO_DECIDE} paired seeds a verdict needs"


@dataclass
class CpuReport:
    notebook: str
    figures: list[CpuFigure] = field(default_factory=list)
    verdicts: list[PairedVerdict] = field(default_factory=list)  # the paired reading, as the claims table
    setting: str = "no committed cpu run behind its figures"  # the federation of the evidence (evidence_setting)
    figures_dir: Path = FIGURES_DIR

    def text(self) -> str:
        """The evidence and the claims rows as plain text (deterministic: from committed files only)."""
        lines = [f"cpu-profile figures of {self.notebook}: {len(self.figures)}"]
        for f in self.figures:
            if f.kind in ("tuning", "claims") or not f.trains:
                lines.append(f"  {f.name}: {f.evidence()}")
                continue
            state = ("under the protocol" if f.protocol else
                     "made before the evidence protocol (no committed records; read it as an illustration)"
                     if f.records == 0 else f"{f.seeds} seed(s), {_too_few()}")
            lines.append(f"  {f.name}: {f.records} run record(s), {f.seeds} seed(s); {state}")
        if not self.verdicts:
            lines.append("claims tested here: none (this notebook illustrates; it makes no comparative claim)")
            return "\n".join(lines)
        counts = {v: sum(_word(x) == v for x in self.verdicts) for v in ("holds", "fails", "inconclusive", *UNTESTED,
                                                                           "not run", "no data", "too few seeds")}
        lines.append(f"claims tested here: {len(self.verdicts)} (" + ", ".join(f"{n} {v}" for v, n in counts.items()
                                                                           if n) + ")")
        lines.append(f"  setting: {self.setting}")
        for v in self.verdicts:
            c = v.claim
            lines.append(f"- {c.claim} [{c.paper}; {c.where}]")
            numbers = v.differences()
            lines.append(f"    verdict: {v.verdict}" + (f"; paired difference {numbers}" if numbers else "")
                         + (f" ({v.note})" if v.note else ""))
            lean = _lean(v)
            if lean:
                lines.append(f"    {lean}")
            if c.map_arm:
                lines.append(f"    {map_reading(c.map_arm)}")
            if _word(v) in c.reasons:  # a hypothesis of claims.yaml says so itself; an old `reasons` text is labelled
                text = c.reasons[_word(v)]
                lines.append(f"    {text}" if text.startswith("hypothesis") else f"    likely reason: {text}")
        for verdict, words in (("holds", "hold on Fashion-MNIST here"), ("fails", "do not hold here"),
                               ("inconclusive", "cannot be decided from these seeds")):
            named = [v.claim.claim for v in self.verdicts if _word(v) == verdict]
            if named:
                lines.append(f"in short, the claims that {words}: " + "; ".join(named))
        return "\n".join(lines)

    def _sidecar(self, name: str) -> dict[str, Any] | None:
        """The sidecar of this notebook's cpu figure ``name`` as it is now (a cpu-profile run of the notebook may
        have rewritten it since the report was made); None when no such figure is committed."""
        sidecar = self.figures_dir / f"{name}.json"
        meta = json.loads(sidecar.read_text()) if sidecar.is_file() else {}
        return meta if _is_cpu_figure_of(meta, self.notebook) else None

    def figure_line(self, name: str) -> str:
        """What stands behind the committed cpu figure ``name`` in one line: its evidence and the federation its
        own records were trained in (from its sidecar, not the parameter files), or that none is committed."""
        meta = self._sidecar(name)
        if meta is None:
            return f"{name}: no committed cpu figure yet (make figures writes it)"
        fig = figure_from_sidecar(self.figures_dir / f"{name}.json", meta)
        seeds = (meta.get("parameters") or {}).get("seeds") or []
        setting = evidence_setting(list(meta.get("records") or []), seeds, self.figures_dir / "records")
        partitions = sidecar_partition_rule(meta)
        return (f"{name} (cpu profile, committed): {fig.evidence()}" + (f"; {setting}" if setting else "")
                + (f"; partition {partitions}" if partitions else ""))

    def show(self, name: str) -> None:
        """Embed the committed cpu figure ``name`` beside the paragraph that reads it, under its evidence line
        (IPython display); the line alone when none is committed."""
        from IPython.display import Image, Markdown, display

        meta = self._sidecar(name)
        fig = None if meta is None else figure_from_sidecar(self.figures_dir / f"{name}.json", meta)
        display(Markdown(f"**{self.figure_line(name)}**" + (f" — {fig.caption}" if fig else "")))
        if fig is not None:
            display(Image(filename=str(fig.png), width=720))

    def show_figures(self, skip: tuple[str, ...] = ()) -> None:
        """Embed every committed cpu figure of the notebook but those in ``skip`` (shown beside their paragraphs:
        :meth:`show`), IPython display."""
        from IPython.display import Image, Markdown, display

        for f in self.figures:
            if f.name in skip:
                continue
            display(Markdown(f"**{f.name}** — {f.caption}"))
            display(Image(filename=str(f.png), width=720))


def _word(v: PairedVerdict) -> str:
    """The verdict without its qualifier (``"inconclusive (n < 6)"`` → ``"inconclusive"``)."""
    return v.verdict.split(" (")[0]


def _lean(v: PairedVerdict) -> str:
    """For an undecided ordering claim: which way its paired differences point (no verdict: the intervals
    overlap 0, or too few pairs decide; but a reader should not have to work out that the data lean against
    the paper)."""
    if _word(v) != "inconclusive":
        return ""
    diffs = [c.difference.mean for c in v.comparisons if c.difference is not None and c.difference.n]
    return leaning(v.claim, diffs, "the paired differences", "not a verdict")


def evidence_setting(keys: list[str], seeds: list[Any], records: Path) -> str | None:
    """The federation of the committed evidence, in words, read from the first of its run records ``keys`` in
    ``records`` (not from the parameter files, which describe the next run, not the one committed), and the
    ``seeds`` its figures state; None when no record is there."""
    from lab.evidence.records import load_record

    for key in keys:
        res = load_record(key, records)
        if res is not None:
            c = res.config
            named = ", seeds " + ", ".join(str(s) for s in seeds) if seeds else ""  # an older sidecar names none
            return (f"{c.dataset} with the {c.model} model, {c.n_clients} clients, {c.participation:.0%} per round, "
                    f"{c.rounds} rounds of {c.local_steps} local steps (B = {c.batch_size}){named}"
                    "; the papers used CIFAR and ResNets over hundreds of rounds")
    return None


def sidecar_partition_rule(meta: dict[str, Any]) -> str:
    """How the partitions of a figure's runs were drawn (:func:`lab.evidence.facts.partition_rule` of the full
    configs its sidecar holds), or "" when the sidecar holds no configs or they follow no single rule (the line
    then states nothing about partitions rather than something false)."""
    import dataclasses

    from fedlab.config import Config
    from lab.evidence.facts import partition_rule

    names = {f.name for f in dataclasses.fields(Config)}
    try:
        configs = [Config.from_dict({k: v for k, v in c.items() if k in names})
                   for c in (meta.get("configs") or {}).values()]
        return partition_rule(configs) if configs else ""
    except (TypeError, ValueError):  # a config of an older schema, or mixed rules: say nothing
        return ""


def figure_from_sidecar(sidecar: Path, meta: dict[str, Any] | None = None) -> CpuFigure:
    """A figure's evidence, read from its JSON sidecar (``save_figure``; ``meta``: its content, if read)."""
    meta = json.loads(Path(sidecar).read_text()) if meta is None else meta
    params = meta.get("parameters") or {}
    # a seed or record named twice is still one sample (lab.evidence.claims.independent_runs)
    seeds = len({json.dumps(s, sort_keys=True) for s in params.get("seeds") or []}) or 1
    records = len(set(meta.get("records") or []))
    kind = str(meta.get("kind", "results"))
    trains = kind != "analysis" and bool(records or meta.get("config_hashes"))
    return CpuFigure(Path(sidecar).stem, str(meta.get("caption", "")), records, seeds,
                     Path(sidecar).with_suffix(".png"), trains, kind)


def _is_cpu_figure_of(meta: dict[str, Any], notebook: str) -> bool:
    """Whether a sidecar is of a cpu-profile figure made by ``notebook``."""
    return notebook_now(meta.get("notebook", "")) == notebook and meta.get("profile") == "cpu"


def _cpu_sidecars(notebook: str, figures_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    """(path, content) of every cpu-profile sidecar ``notebook`` made, each file read once."""
    out = []
    for sidecar in sorted(figures_dir.glob("[0-9][0-9]*_*.json")):  # a renamed notebook's figures keep their names
        meta: dict[str, Any] = json.loads(sidecar.read_text())
        if _is_cpu_figure_of(meta, notebook):
            out.append((sidecar, meta))
    return out


def cpu_figures(notebook: str, figures_dir: Path | None = None) -> list[CpuFigure]:
    """The committed cpu figures of ``notebook``, without reading its claims (:func:`cpu_report` does both)."""
    figures_dir = FIGURES_DIR if figures_dir is None else Path(figures_dir)
    return [figure_from_sidecar(path, meta) for path, meta in _cpu_sidecars(notebook, figures_dir)]


def cpu_report(notebook: str, figures_dir: Path | None = None) -> CpuReport:
    """The committed cpu evidence of ``notebook`` (a stem such as ``04_sam_baselines``)."""
    figures_dir = FIGURES_DIR if figures_dir is None else Path(figures_dir)
    claims = [c for c in load_claims(figures_dir / "claims.yaml") if c.notebook == notebook]
    keys, seeds = [], set()
    sidecars = _cpu_sidecars(notebook, figures_dir)
    for _, meta in sidecars:
        keys += list(meta.get("records") or [])
        seeds |= {json.dumps(s) for s in (meta.get("parameters") or {}).get("seeds") or []}
    report = CpuReport(notebook, [figure_from_sidecar(path, meta) for path, meta in sidecars],
                       evaluate_claims_paired(claims, figures_dir), figures_dir=figures_dir)
    setting = evidence_setting(keys, sorted((json.loads(s) for s in seeds), key=str), figures_dir / "records")
    if setting is not None:
        report.setting = setting
    return report


def _committed_sidecar(name: str, figures_dir: Path | None) -> tuple[dict[str, Any], Path]:
    """The sidecar of the committed cpu figure ``name`` and the path of its CSV (clear errors when either is
    missing or the figure is not of the cpu profile)."""
    figures_dir = FIGURES_DIR if figures_dir is None else Path(figures_dir)
    sidecar, csv = figures_dir / f"{name}.json", figures_dir / f"{name}.csv"
    if not sidecar.is_file() or not csv.is_file():
        raise FileNotFoundError(f"{name}: no committed cpu figure ({sidecar} and {csv}); make figures writes it")
    meta = json.loads(sidecar.read_text())
    if meta.get("profile") != "cpu":
        raise ValueError(f"{sidecar}: profile is {meta.get('profile')!r}, not 'cpu'")
    return meta, csv


def committed_table(name: str, panel: str | None = None, figures_dir: Path | None = None) -> Any:
    """The data of the committed cpu figure ``name`` (``figures/<name>.csv``; ``panel``: only its rows of that
    panel), whatever profile the notebook reading it runs at: the paragraphs that interpret the cpu run read
    these, so that they say what the committed figure shows."""
    import pandas as pd

    _, csv = _committed_sidecar(name, figures_dir)
    table = pd.read_csv(csv)
    if panel is not None:
        if "panel" not in table or panel not in set(table["panel"]):
            have = sorted(set(table["panel"].dropna())) if "panel" in table else []
            raise KeyError(f"{csv}: no panel {panel!r} (panels: {', '.join(map(str, have)) or 'none'})")
        table = table[table["panel"] == panel].dropna(axis=1, how="all").reset_index(drop=True)
    return table


def committed_parameters(name: str, figures_dir: Path | None = None) -> dict[str, Any]:
    """The parameters the committed cpu figure ``name`` was made with (its sidecar's ``parameters``): a paragraph
    that reads the figure names these, not the parameters of the run that shows it."""
    return dict(_committed_sidecar(name, figures_dir)[0].get("parameters") or {})


def committed_final_accuracy(name: str, panel: str = "test_acc_pct_per_seed", figures_dir: Path | None = None) -> Any:
    """Seeds × methods: the claims table's final accuracy in % (:func:`lab.evidence.protocol.final_metric` over
    each seed's curve) from the per-round, per-seed accuracy panel of the committed cpu figure ``name`` (columns
    ``seed``, ``method``, ``round``, ``test_acc_pct``; the run's length is the panel's last round), so that a
    paragraph quotes what the table judges; ``attrs`` holds the window (``final_rounds``) and its words
    (``final_how``). A curve without every round of the final window is refused (the fallback to a last
    evaluation is for records, not for a paragraph that says it reads the protocol)."""
    import pandas as pd

    from lab.evidence.protocol import Curve, final_metric

    from lab.evidence.protocol import final_rounds

    acc = committed_table(name, panel, figures_dir)
    total = int(acc["round"].max())
    values, short, hows = {}, [], set()
    for (seed, method), rows in acc.groupby(["seed", "method"]):
        # the panel is in %: the mean of the window is the same number in the same unit
        got = final_metric(Curve({int(r): float(a) for r, a in zip(rows["round"], rows["test_acc_pct"])}, total))
        if not got.protocol:
            short.append((seed, method))
        values[(seed, method)] = got.value
        hows.add(got.how)
    if short:
        raise ValueError(f"{name}: run(s) without their last rounds (every round of the final window): {short}")
    table = pd.Series(values).rename_axis(["seed", "method"]).unstack()
    table.attrs |= {"final_rounds": final_rounds(total), "final_how": "; ".join(sorted(hows))}
    return table
