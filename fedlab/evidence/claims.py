"""The papers' claims, evaluated from stored results: holds / fails / inconclusive / not run.

The claims are data (``figures/claims.yaml``, next to the results they judge); this module is the
evaluator. For each claim it collects the evidence — the committed records of the figure named in
its setting (:func:`fedlab.evidence.records.figure_runs`, filtered by ``select``) or a column of that figure's
CSV — reduces each *arm* (a method, optionally with hyperparameters) to a mean ± 95 % interval over
seeds (:func:`fedlab.evidence.uncertainty.mean_interval`) and compares the arms:

* ``>`` / ``<`` — **holds** when the intervals are disjoint in the claimed order, **fails** when
  they are disjoint the other way, **inconclusive** when they overlap;
* ``>=`` / ``<=`` — holds unless contradicted: holds when the means are in the claimed order (or
  the intervals are disjoint in it), fails when disjoint the other way, inconclusive otherwise;
* ``approx`` (tolerance ``tol``) — an equivalence test on Welch's 95 % interval of the difference of
  the means (:func:`~fedlab.evidence.uncertainty.difference_interval`): holds when the whole interval
  lies within [−tol, tol], fails when it lies wholly outside, inconclusive otherwise (close means
  with wide intervals are not evidence of equality);
* ``much_greater`` (``margin``) — holds when left − margin is above right with disjoint intervals,
  fails when left.mean − right.mean < margin and the shifted intervals are disjoint, else inconclusive;
* ``abs_le`` (``tol``, one arm) — holds when the whole interval of |left| is ≤ tol, fails when it is
  wholly above, inconclusive otherwise.

An arm with fewer than :data:`MIN_SEEDS` finished seeds is inconclusive (one seed cannot tell noise
from effect); collapsed and diverged runs are never averaged in — they are counted and shown. A claim
whose figure has no committed evidence yet is **not run**. Against a list of arms, a claim holds only
if it holds against each (fails if any fails, otherwise the weakest verdict wins).
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from fedlab.tools.repro import FIGURES_DIR
from fedlab.evidence.integrity import rerecord
from fedlab.results import RunResult
from fedlab.evidence.uncertainty import Estimate, difference_interval, mean_interval

__all__ = ["CLAIMS_FILE", "MIN_SEEDS", "VERDICTS", "Claim", "Verdict", "claims_markdown", "claims_table",
           "evaluate_claims", "figures_root", "independent_runs", "load_claims", "replace_claims_block", "write_claims"]

CLAIMS_FILE: Path = FIGURES_DIR / "claims.yaml"
MIN_SEEDS = 2
VERDICTS = ("holds", "fails", "inconclusive", "not run")
OPS = (">", "<", ">=", "<=", "approx", "much_greater", "abs_le")
_ORDER = {"holds": 0, "inconclusive": 1, "not run": 2, "fails": 3}


@dataclass(frozen=True)
class Claim:
    id: str
    claim: str
    paper: str
    where: str
    notebook: str
    figure: str
    select: dict[str, Any]
    metric: Any
    left: dict[str, Any]
    op: str
    right: list[dict[str, Any]]
    tol: float = 0.0
    margin: float = 0.0
    cost: dict[str, float] | None = None
    reasons: dict[str, str] = field(default_factory=dict)  # verdict -> the likely reason, shown with that verdict

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Claim":
        where = f"claim {d.get('id', '?')!r}"
        missing = [k for k in ("id", "claim", "source", "setting", "metric", "left", "op") if k not in d]
        if missing:
            raise ValueError(f"{where}: missing field(s) {missing}")
        if d["op"] not in OPS:
            raise ValueError(f"{where}: op={d['op']!r} is invalid; allowed: {', '.join(OPS)}")
        right = d.get("right", [])
        right = [right] if isinstance(right, Mapping) else list(right)
        if d["op"] != "abs_le" and not right:
            raise ValueError(f"{where}: op {d['op']!r} needs a right arm")
        metric = d["metric"]
        if not (metric in ("final_test_acc", "mean_flatness_distance")
                or (isinstance(metric, Mapping) and "column" in metric)):
            raise ValueError(f"{where}: metric={metric!r} is invalid; allowed: final_test_acc, "
                             "mean_flatness_distance, or {column: <name>, arm_column: <name>}")
        return cls(id=str(d["id"]), claim=str(d["claim"]), paper=str(d["source"]["paper"]),
                   where=str(d["source"].get("where", "")), notebook=str(d["setting"]["notebook"]),
                   figure=str(d["setting"]["figure"]), select=dict(d["setting"].get("select") or {}),
                   metric=metric, left=dict(d["left"] or {}), op=str(d["op"]), right=right,
                   tol=float(d.get("tol", 0.0)), margin=float(d.get("margin", 0.0)), cost=d.get("cost"),
                   reasons=_reasons(where, d.get("reasons")))


def _reasons(where: str, value: Any) -> dict[str, str]:
    reasons = dict(value or {})
    bad = sorted(set(reasons) - {"fails", "inconclusive"})
    if bad:
        raise ValueError(f"{where}: reasons may be given for the verdicts fails and inconclusive, not {bad}")
    return {k: str(v) for k, v in reasons.items()}


@dataclass
class Verdict:
    claim: Claim
    verdict: str
    left: Estimate | None = None
    right: list[Estimate | None] = field(default_factory=list)
    note: str = ""

    def numbers(self, scale: float = 100.0) -> str:
        if self.left is None:
            return ""
        s = scale if self.claim.metric == "final_test_acc" else 1.0
        digits = 2 if s == 100.0 else 4
        parts = [f"{_arm_name(self.claim.left)} {self.left.format(s, digits)}"]
        for arm, est in zip(self.claim.right, self.right):
            parts.append(f"{_arm_name(arm)} {est.format(s, digits) if est else '–'}")
        return "; ".join(parts)

    def lean(self) -> str:
        """For an undecided ordering claim: which way the means point (the intervals overlap, so it is no
        verdict, but a reader should not have to work out that the data lean against the paper)."""
        op = self.claim.op
        rights = [r for r in self.right if r is not None]
        if self.verdict != "inconclusive" or self.left is None or not rights \
                or op not in (">", ">=", "<", "<=", "much_greater"):
            return ""
        sign = -1.0 if op in ("<", "<=") else 1.0
        margin = self.claim.margin if op == "much_greater" else 0.0
        gaps = [sign * (self.left.mean - r.mean) for r in rights]
        if any(g < 0 for g in gaps):
            return "the means point against the claim (the intervals overlap: not a verdict)"
        if all(g > margin for g in gaps):
            return "the means point the claimed way (the intervals overlap: not a verdict)"
        return ""


def figures_root() -> Path:
    """The evidence folder claims are judged from: ``$FEDLAB_FIGURES`` if set (a copy, e.g. to test a
    damaged file without touching the committed ones), else ``figures/`` of this repository."""
    env = os.environ.get("FEDLAB_FIGURES")
    return Path(env).expanduser() if env else FIGURES_DIR


def load_claims(path: Path | None = None) -> list[Claim]:
    import yaml

    path = figures_root() / CLAIMS_FILE.name if path is None else Path(path)
    data = yaml.safe_load(path.read_text())
    claims = [Claim.from_dict(d) for d in (data or {}).get("claims", [])]
    ids = [c.id for c in claims]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ValueError(f"{path}: duplicate claim id(s) {dup}")
    return claims


# --- evidence --------------------------------------------------------------------------------------
def _arm_name(arm: Mapping[str, Any]) -> str:
    from fedlab.tools.plots import method_label

    if not arm:
        return "value"
    text = arm.get("name") or method_label(arm.get("algorithm", "?"))
    if arm.get("params"):
        text += " [" + ", ".join(f"{k}={v}" for k, v in arm["params"].items()) + "]"
    return text


def _matches(res: RunResult, arm: Mapping[str, Any], select: Mapping[str, Any]) -> bool:
    from fedlab.algorithms import get_algorithm

    cfg = res.config
    if any(getattr(cfg, k, None) != v for k, v in select.items()):
        return False
    if arm.get("algorithm") and cfg.algorithm != arm["algorithm"]:
        return False
    if arm.get("name") and cfg.name != arm["name"]:
        return False
    if arm.get("params"):
        hp = get_algorithm(cfg.algorithm, cfg.algorithm_params).hp.to_dict()
        if any(hp.get(k) != v for k, v in arm["params"].items()):
            return False
    return True


def _run_value(res: RunResult, metric: str) -> float:
    if metric == "final_test_acc":
        return res.final_accuracy
    m = res.metrics[["round", "flatness_distance"]].dropna()
    total = int(res.config.rounds)
    tail = m[m["round"] > total - math.ceil(total / 4)]
    return float((tail if len(tail) else m)["flatness_distance"].mean())


def independent_runs(runs: Sequence[RunResult]) -> tuple[list[RunResult], int]:
    """The runs that are independent samples: the first of each seed, and never two identical configs
    (``runs_dir`` aside); returns them and how many were left out. A repeated seed is the same draw of
    initialisation, sampling and batches, so counting it twice would shrink the interval for nothing."""
    kept: list[RunResult] = []
    seeds: set[Any] = set()
    configs: set[str] = set()
    for r in runs:
        config = json.dumps({**r.config.to_dict(), "runs_dir": None}, sort_keys=True, default=str)
        if r.config.seed in seeds or config in configs:
            continue
        seeds.add(r.config.seed)
        configs.add(config)
        kept.append(r)
    return kept, len(runs) - len(kept)


def _duplicates_note(arm: Mapping[str, Any], n: int) -> str:
    return f"{_arm_name(arm)}: {n} duplicate run(s) (a repeated seed or config) counted once" if n else ""


def _arm_from_runs(runs: Sequence[RunResult], claim: Claim, arm: Mapping[str, Any]) -> tuple[Estimate | None, str]:
    chosen, repeated = independent_runs([r for r in runs if _matches(r, arm, claim.select)])
    ok = [r for r in chosen if r.status == "finished"]
    bad = [r for r in chosen if r.status in ("collapsed", "diverged")]
    notes = [_duplicates_note(arm, repeated)] if repeated else []
    if bad:
        counts = {s: sum(r.status == s for r in bad) for s in ("collapsed", "diverged")}
        notes.append(f"{_arm_name(arm)}: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    note = "; ".join(notes)
    if not ok:
        return None, note
    return mean_interval(_run_value(r, claim.metric) for r in ok), note


def _arm_from_table(table: pd.DataFrame, claim: Claim, arm: Mapping[str, Any]) -> tuple[Estimate | None, str]:
    col, arm_col = claim.metric["column"], claim.metric.get("arm_column")
    if col not in table.columns:
        raise ValueError(f"claim {claim.id!r}: figure {claim.figure}.csv has no column {col!r} "
                         f"(columns: {', '.join(map(str, table.columns))})")
    rows = table
    for key, value in claim.select.items():  # the setting's filter, on the columns the table has
        if key in rows.columns:
            rows = rows[rows[key] == value]
    if arm_col and arm.get("algorithm"):
        rows = rows[rows[arm_col] == arm["algorithm"]]
    note = ""
    if "seed" in rows.columns:
        # a row repeated whole (same seed, same setting, same values) is one measurement written twice; rows
        # of one seed that differ (per client, per α) are the table's own samples and all count
        unique = rows.drop_duplicates(keep="first")
        note = _duplicates_note(arm, len(rows) - len(unique))
        rows = unique
    if "status" in rows.columns:
        status = rows["status"].fillna("finished")
        counts = {s: int((status == s).sum()) for s in ("collapsed", "diverged")}
        if any(counts.values()):
            note = "; ".join(x for x in (note, f"{_arm_name(arm)}: " + ", ".join(
                f"{n} {s}" for s, n in counts.items() if n)) if x)
        rows = rows[status == "finished"]
    vals = rows[col].dropna()
    return (mean_interval(vals) if len(vals) else None), note


# --- comparison ------------------------------------------------------------------------------------
def compare(left: Estimate, right: Estimate | None, op: str, *, tol: float = 0.0, margin: float = 0.0) -> str:
    """The verdict of ``left op right`` from two estimates (see the module docstring)."""
    def bounds(e: Estimate, shift: float = 0.0) -> tuple[float, float]:
        return (e.low - shift, e.high - shift) if math.isfinite(e.half_width) else (e.mean - shift, e.mean - shift)

    if op == "abs_le":
        lo, hi = bounds(left)
        worst, best = max(abs(lo), abs(hi)), (0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi)))
        return "holds" if worst <= tol else "fails" if best > tol else "inconclusive"
    assert right is not None
    if op in ("<", "<="):  # mirror: a < b  ⇔  −a > −b
        left = Estimate(-left.mean, left.half_width, left.values, left.level)
        right = Estimate(-right.mean, right.half_width, right.values, right.level)
        op = op.replace("<", ">")
    shift = margin if op == "much_greater" else 0.0
    llo, lhi = bounds(left, shift)
    rlo, rhi = bounds(right)
    above, below = llo > rhi, lhi < rlo
    if op in (">", "much_greater"):
        return "holds" if above else "fails" if below else "inconclusive"
    if op == ">=":
        return "fails" if below else "holds" if (above or left.mean >= right.mean) else "inconclusive"
    if op == "approx":
        lo, hi = difference_interval(left, right)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            return "inconclusive"
        return "holds" if -tol <= lo and hi <= tol else "fails" if (lo > tol or hi < -tol) else "inconclusive"
    raise ValueError(f"unknown op {op!r}; allowed: {', '.join(OPS)}")


def _few(est: Estimate | None) -> bool:
    return est is not None and est.n < MIN_SEEDS


def evaluate_claim(claim: Claim, figures_dir: Path | None = None) -> Verdict:
    """One claim's verdict from the committed evidence in ``figures_dir`` (default ``figures/``)."""
    from fedlab.evidence.records import figure_runs

    figures_dir = figures_root() if figures_dir is None else Path(figures_dir)
    if isinstance(claim.metric, Mapping):
        csv = figures_dir / f"{claim.figure}.csv"
        if not csv.exists():
            return Verdict(claim, "not run", note=f"no {csv.name} yet")
        table = pd.read_csv(csv)
        arm = lambda a: _arm_from_table(table, claim, a)  # noqa: E731
    else:
        try:
            runs = figure_runs(claim.figure, figures_dir)
        except FileNotFoundError as err:  # no sidecar: the figure was never made. A bad record raises (loudly).
            return Verdict(claim, "not run", note=str(err).split(";")[0])
        if not runs:
            return Verdict(claim, "not run", note=f"{claim.figure} has no committed records yet")
        arm = lambda a: _arm_from_runs(runs, claim, a)  # noqa: E731
    left, note_l = arm(claim.left)
    rights, notes = [], [note_l] if note_l else []
    for a in claim.right:
        est, note = arm(a)
        rights.append(est)
        if note:
            notes.append(note)
    if left is None or (claim.op != "abs_le" and any(r is None for r in rights)):
        verdict = "inconclusive" if notes else "not run"
        return Verdict(claim, verdict, left, rights, "; ".join(notes + (["no finished run of an arm"])))
    if _few(left) or any(_few(r) for r in rights):
        notes.append(f"fewer than {MIN_SEEDS} seeds")
        return Verdict(claim, "inconclusive", left, rights, "; ".join(notes))
    verdicts = [compare(left, r, claim.op, tol=claim.tol, margin=claim.margin) for r in (rights or [None])]
    if claim.cost:
        from fedlab.algorithms import algorithm_class

        ratio = (algorithm_class(claim.left["algorithm"]).grad_evals_per_step
                 / algorithm_class(claim.right[0]["algorithm"]).grad_evals_per_step)
        ok = math.isclose(ratio, float(claim.cost["left_over_right"]))
        notes.append(f"gradient cost ratio {ratio:g} ({'as claimed' if ok else 'not as claimed'})")
        if not ok:
            verdicts.append("fails")
    verdict = "fails" if "fails" in verdicts else max(verdicts, key=_ORDER.__getitem__)
    return Verdict(claim, verdict, left, rights, "; ".join(notes))


def evaluate_claims(claims: Sequence[Claim] | None = None, figures_dir: Path | None = None) -> list[Verdict]:
    """Every claim of ``<figures>/claims.yaml`` (or ``claims``), evaluated from stored results.

    Every record read is checked (:func:`fedlab.evidence.records.load_record`): a corrupt, edited or
    foreign one raises a :class:`~fedlab.evidence.records.RecordError` naming the file, never a
    quiet "not run"."""
    figures_dir = figures_root() if figures_dir is None else Path(figures_dir)
    return [evaluate_claim(c, figures_dir) for c in (load_claims(figures_dir / "claims.yaml") if claims is None
                                                     else claims)]


def claims_table(verdicts: Sequence[Verdict]) -> pd.DataFrame:
    """One row per claim: claim, paper, setting, fedlab's numbers (mean ± 95 % interval (n)), verdict."""
    return pd.DataFrame([{"id": v.claim.id, "claim": v.claim.claim, "paper": f"{v.claim.paper}, {v.claim.where}",
                          "setting": f"{v.claim.notebook} / {v.claim.figure}"
                          + (" (" + ", ".join(f"{k}={x}" for k, x in v.claim.select.items()) + ")"
                             if v.claim.select else ""),
                          "numbers": v.numbers(), "verdict": v.verdict,
                          "note": "; ".join(x for x in (v.note, v.lean()) if x)} for v in verdicts])


def claims_markdown(verdicts: Sequence[Verdict], profile: str = "cpu") -> str:
    """The claims table as Markdown: a sentence on how to read it, the table, and the verdict counts."""
    table = claims_table(verdicts)
    esc = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = [f"Generated by `python -m fedlab claims --write` from the committed {profile}-profile run records "
             "(`figures/records/`) and figure data; the claims are listed in `figures/claims.yaml`. "
             "Accuracies in %, mean ± 95 % Student-t interval over seeds (n = seeds). "
             "holds / fails: the intervals are disjoint in / against the claimed order; "
             "inconclusive: they overlap (or too few seeds, or an arm collapsed); for ≥ (\"at least as good\") "
             "holds means not contradicted: the means are in order and the intervals are not disjoint against it; "
             "for ≈ (within a tolerance) "
             "holds means Welch's 95 % interval of the difference lies inside the tolerance; "
             "not run: no data yet.", "",
             "| claim | paper | setting | fedlab's numbers | verdict | note |", "|---|---|---|---|---|---|"]
    for _, r in table.iterrows():
        lines.append("| " + " | ".join(esc(r[k]) for k in ("claim", "paper", "setting", "numbers", "verdict",
                                                             "note")) + " |")
    counts = table["verdict"].value_counts()
    lines += ["", "Summary: " + ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICTS) + "."]
    return "\n".join(lines)


BLOCK_START, BLOCK_END = "<!-- fedlab:claims:start -->", "<!-- fedlab:claims:end -->"


def replace_claims_block(text: str, block: str, where: str = "the file") -> str:
    """``text`` with the part between :data:`BLOCK_START` and :data:`BLOCK_END` replaced by ``block``."""
    i, j = text.find(BLOCK_START), text.find(BLOCK_END)
    if i < 0 or j < i:
        raise ValueError(f"{where} has no {BLOCK_START} … {BLOCK_END} block for the claims table")
    return text[: i + len(BLOCK_START)] + "\n" + block + "\n" + text[j:]


def write_claims(verdicts: Sequence[Verdict], stem: Path | None = None, profile: str = "cpu",
                 pages: Sequence[Path] | None = None) -> dict[str, Path]:
    """Write ``figures/claims_<profile>.md`` (Markdown table) and ``.csv``, and refresh the claims block of
    each of ``pages`` (default, when ``stem`` is not given: the repository's README.md and
    figures/README.md, where they have one)."""
    from fedlab.tools.repro import REPO_ROOT

    if pages is None:
        pages = [REPO_ROOT / "README.md", FIGURES_DIR / "README.md"] if stem is None else []
    stem = FIGURES_DIR / f"claims_{profile}" if stem is None else Path(stem)
    table = claims_table(verdicts)
    paths = {"csv": stem.with_suffix(".csv"), "md": stem.with_suffix(".md")}
    table.to_csv(paths["csv"], index=False)
    block = claims_markdown(verdicts, profile)
    paths["md"].write_text(f"# Paper claims checked on the {profile} profile\n\n{block}\n")
    # `claims --write` is the named step that regenerates the claims data from verified records, so it
    # re-records these two files' digests (records and tuning files are never re-recorded this way)
    rerecord([paths["csv"], paths["md"]], paths["csv"].parent)
    for page in pages:
        page = Path(page)
        if page.exists() and BLOCK_START in page.read_text():
            page.write_text(replace_claims_block(page.read_text(), block, str(page)))
            paths[f"page:{page.name}:{page.parent.name}"] = page
    return paths
