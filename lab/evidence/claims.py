"""The papers' claims, evaluated from stored results: holds / fails / inconclusive / not run.

The claims are data (``figures/claims.yaml``, next to the results they judge); this module is the
evaluator. For each claim it collects the evidence — the committed records of the figure named in
its setting (:func:`lab.evidence.records.figure_runs`, filtered by ``select``) or a column of that figure's
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

This is the **unpaired** reading (:func:`evaluate_claim`, ``python -m lab claims --unpaired``), kept for
comparison. The **paired** reading is the default (:func:`evaluate_claim_paired`, ``python -m lab claims``,
the committed claims files and the generated table): it uses that within a
seed every method of a figure shares θ₀, client sampling, batch order and test subsample: it compares the
per-seed differences left_s − right_s of the seeds both arms finished (records pair by ``config.seed``, a
figure's CSV by its ``seed`` column), with the paired t-interval, the sign-flip p-value from 6 pairs and the
margin rules and seed gates of :mod:`lab.evidence.paired`; a claim that cannot be paired says so.

Kinds (``kind`` in the YAML): a paper's ``claim`` (counted), a ``control`` (a run that separates a claimed
mechanism — flatness — from momentum or step size; counted apart) and a ``sanity`` check (an identity true
by construction, shown to prove the measurement, never counted as a claim that holds). Each claim carries
the paper's own ``effect`` (value, unit, table) beside fedlab's paired difference, and ``hypotheses`` —
labelled as such, each naming the run that would test it — instead of explanations. An arm that no committed
record matches is **no data** (declared for the rerun), never an error.

An arm with fewer than :data:`MIN_SEEDS` finished seeds is inconclusive (one seed cannot tell noise
from effect); collapsed and diverged runs are never averaged in — they are counted and shown. A claim
whose figure has no committed evidence yet is **not run**. Against a list of arms, a claim holds only
if it holds against each (fails if any fails, otherwise the weakest verdict wins).

**What counts** (issue 41; the paired reading). A verdict is counted only when the comparison tests the claim:
holds / fails / inconclusive. Four other classes are listed apart with their reason
(:mod:`lab.evidence.validity`): ``not tested — degenerate arm`` (an arm tuned into another method),
``not tested — diverged`` (a run of an arm diverged, :mod:`lab.evidence.divergence`), ``confounded`` (a
control the claim ``requires`` has no record) and ``not testable — headroom`` (a ``much_greater`` margin above
the room to its ``ceiling``). A failed comparison still refutes a claim against several arms; otherwise one
untested comparison leaves the claim untested.

**Error rates.** Each claim belongs to a ``family`` declared in ``figures/claims.yaml`` (``families``; a claim
without one is its own family). The decided comparisons of a family (n ≥ 6 pairs, arms tested) are one Holm
family at family-wise α = 0.05 (:func:`lab.evidence.paired.holm`), on the two-sided paired t-test p against the
op's bound; the verdict is decided on the adjusted p. A non-inferiority claim (``>=``, ``<=``) states its
``smallest_effect`` with its reason: a number, or a share of another claim's measured effect (``of``, ``times``).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from lab.repro import FIGURES_DIR
from lab.evidence.integrity import rerecord
from fedlab.results import RunResult
from lab.evidence.paired import (FAMILY_ALPHA, MIN_SEEDS_TO_DECIDE, MIN_SEEDS_TO_PRINT, TOO_FEW, PairedDifference,
                                 decide, holm, holm_decision, op_bound, paired_difference, sign_flip_floor, sign_flip_text,
                                 t_test_p)
from lab.evidence.validity import (CONFOUNDED, NOT_TESTABLE_HEADROOM, NOT_TESTED_DEGENERATE, NOT_TESTED_DIVERGED,
                                   UNTESTED, RecordPool, companion_runs, degenerate, diverged_arm, headroom, matches)
from fedlab.evidence.uncertainty import Estimate, difference_interval, mean_interval

__all__ = ["AS_IF_SEEDS", "CLAIMS_FILE", "FOREST", "KINDS", "MIN_SEEDS", "NOT_PAIRED", "NO_DATA", "TESTED", "VERDICTS",
           "Claim", "PairedComparison", "PairedVerdict", "Verdict", "claims_markdown", "claims_markdown_unpaired",
           "claims_table", "effect_text", "evaluate_claim_paired", "evaluate_claims", "evaluate_claims_paired",
           "figures_root", "independent_runs", "leaning", "load_claims", "load_families", "p_text", "paired_table",
           "paired_text", "replace_claims_block", "verdict_counts", "verdict_text", "write_claims"]

CLAIMS_FILE: Path = FIGURES_DIR / "claims.yaml"
MIN_SEEDS = 2
VERDICTS = ("holds", "fails", "inconclusive", "not run", "no data")
TESTED = ("holds", "fails", "inconclusive")
"""The verdicts of a comparison that tested the claim: the only ones counted (an ``inconclusive (n < N)`` too)."""
KINDS = ("claim", "control", "sanity")
NO_DATA = "no data"  # an arm no committed record matches: declared for the rerun
OPS = (">", "<", ">=", "<=", "approx", "much_greater", "abs_le")
_ORDER = {"holds": 0, "inconclusive": 1, "not run": 2, NO_DATA: 2, "fails": 3}
NOT_PAIRED = "not paired"  # the paired reading's verdict when the evidence has no seed to pair by


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
    reasons: dict[str, str] = field(default_factory=dict)  # verdict -> a hypothesis (labelled), shown with that verdict
    kind: str = "claim"  # claim | control | sanity (see the module docstring)
    effect: dict[str, Any] = field(default_factory=dict)  # the paper's own effect: value, unit, where, left, right
    hypotheses: dict[str, dict[str, str]] = field(default_factory=dict)  # verdict -> {hypothesis, test}
    controls: str = ""  # a control: the id of the claim whose mechanism it separates
    family: str = ""  # the Holm family (figures/claims.yaml `families`); "" : a family of its own
    smallest_effect: dict[str, Any] = field(default_factory=dict)  # >= / <=: {value | of, times, reason}
    requires: list[dict[str, Any]] = field(default_factory=list)  # controls without which it is confounded
    ceiling: dict[str, Any] = field(default_factory=dict)  # much_greater: the arm that bounds the room

    @property
    def family_name(self) -> str:
        """The Holm family this claim's comparisons are adjusted in (its own when it declares none)."""
        return self.family or f"claim {self.id}"

    def paper_effect(self) -> str:
        """The paper's effect in words: ``"+10.2 points (50.3 vs 40.1; §2 table, CIFAR-100 Dir 0.1)"``."""
        e = self.effect
        if not e:
            return "–"
        if "value" not in e:
            return str(e.get("text", "–"))
        unit = e.get("unit", "points")
        text = f"{float(e['value']):+g} {unit}" if isinstance(e["value"], (int, float)) else str(e["value"])
        vs = f"{e['left']:g} vs {e['right']:g}" if isinstance(e.get("left"), (int, float)) and \
            isinstance(e.get("right"), (int, float)) else ""
        where = "; ".join(x for x in (vs, str(e.get("where", ""))) if x)
        return f"{text} ({where})" if where else text

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
        kind = str(d.get("kind", "claim"))
        if kind not in KINDS:
            raise ValueError(f"{where}: kind={kind!r} is invalid; allowed: {', '.join(KINDS)}")
        hypotheses = _hypotheses(where, d.get("hypotheses"))
        if not (metric in ("final_test_acc", "mean_flatness_distance")
                or (isinstance(metric, Mapping) and "column" in metric)):
            raise ValueError(f"{where}: metric={metric!r} is invalid; allowed: final_test_acc, "
                             "mean_flatness_distance, or {column: <name>, arm_column: <name>}")
        op = str(d["op"])
        family = str(d.get("family") or "")
        if family and op in ("approx", "abs_le"):
            raise ValueError(f"{where}: family={family!r}, but op {op!r} is an equivalence test with no single "
                             "p-value; leave it out of a family")
        smallest = _smallest_effect(where, op, d)
        ceiling = dict(d.get("ceiling") or {})
        if ceiling and (op != "much_greater" or not ceiling.get("algorithm")):
            raise ValueError(f"{where}: ceiling={ceiling!r} is invalid; allowed: an arm with an algorithm, on a "
                             "much_greater claim (whose margin the room can rule out)")
        requires = d.get("requires") or []
        requires = [requires] if isinstance(requires, Mapping) else list(requires)
        if any(not isinstance(a, Mapping) or not a.get("algorithm") for a in requires):
            raise ValueError(f"{where}: requires={requires!r} is invalid; allowed: a list of arms, each with an "
                             "algorithm (and params / config)")
        return cls(id=str(d["id"]), claim=str(d["claim"]), paper=str(d["source"]["paper"]),
                   where=str(d["source"].get("where", "")), notebook=str(d["setting"]["notebook"]),
                   figure=str(d["setting"]["figure"]), select=dict(d["setting"].get("select") or {}),
                   metric=metric, left=dict(d["left"] or {}), op=op, right=right,
                   tol=float(d.get("tol", 0.0)), margin=float(d.get("margin", 0.0)), cost=d.get("cost"),
                   reasons=_reasons(where, d.get("reasons")) | _hypothesis_texts(hypotheses),
                   kind=kind, effect=dict(d.get("effect") or {}), hypotheses=hypotheses,
                   controls=str(d.get("controls", "")), family=family, smallest_effect=smallest,
                   requires=[dict(a) for a in requires], ceiling=ceiling)


def _smallest_effect(where: str, op: str, d: Mapping[str, Any]) -> dict[str, Any]:
    """The checked ``smallest_effect`` of a non-inferiority claim: ``{value, reason}`` (a number in the metric's
    unit, 0.01 = 1 point) or ``{of, times, reason}`` (``times`` × |the mean paired difference| of claim ``of``'s
    first comparison); {} when the claim gives none."""
    value = d.get("smallest_effect")
    if value is None:
        return {}
    if op not in (">=", "<="):
        raise ValueError(f"{where}: smallest_effect is the margin of a non-inferiority claim (op >= or <=), "
                         f"not of op {op!r}")
    if "margin" in d:
        raise ValueError(f"{where}: give smallest_effect or margin, not both")
    if not isinstance(value, Mapping) or not str(value.get("reason", "")).strip():
        raise ValueError(f"{where}: smallest_effect needs a reason, and a value or an 'of' (claim id)")
    if ("value" in value) == ("of" in value):
        raise ValueError(f"{where}: smallest_effect takes either value (a number) or of (a claim id), got "
                         f"{sorted(value)}")
    if "value" in value:
        number = value["value"]
        if isinstance(number, bool) or not isinstance(number, (int, float)) or number < 0:
            raise ValueError(f"{where}: smallest_effect.value={number!r} is invalid; allowed: a number ≥ 0")
        return {"value": float(number), "reason": str(value["reason"])}
    times = value.get("times", 1.0)
    if isinstance(times, bool) or not isinstance(times, (int, float)) or times <= 0:
        raise ValueError(f"{where}: smallest_effect.times={times!r} is invalid; allowed: a number > 0")
    return {"of": str(value["of"]), "times": float(times), "reason": str(value["reason"])}


def _hypotheses(where: str, value: Any) -> dict[str, dict[str, str]]:
    """``{verdict: {hypothesis, test}}``: each hypothesis must name the run that would test it."""
    out: dict[str, dict[str, str]] = {}
    for verdict, h in dict(value or {}).items():
        if verdict not in ("fails", "inconclusive"):
            raise ValueError(f"{where}: hypotheses may be given for the verdicts fails and inconclusive, not {verdict!r}")
        if not isinstance(h, Mapping) or not h.get("hypothesis") or not h.get("test"):
            raise ValueError(f"{where}: hypotheses.{verdict} needs 'hypothesis' and 'test' (the run that would test it)")
        out[verdict] = {"hypothesis": str(h["hypothesis"]), "test": str(h["test"])}
    return out


def _hypothesis_texts(hypotheses: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    return {v: f"hypothesis (untested): {h['hypothesis']} — would be tested by: {h['test']}"
            for v, h in hypotheses.items()}


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
        parts = [f"{arm_name(self.claim.left)} {self.left.format(s, digits)}"]
        for arm, est in zip(self.claim.right, self.right):
            parts.append(f"{arm_name(arm)} {est.format(s, digits) if est else '–'}")
        return "; ".join(parts)

    def lean(self) -> str:
        """For an undecided ordering claim: which way the means point (the intervals overlap, so it is no
        verdict, but a reader should not have to work out that the data lean against the paper)."""
        rights = [r for r in self.right if r is not None]
        if self.verdict != "inconclusive" or self.left is None:
            return ""
        return leaning(self.claim, [self.left.mean - r.mean for r in rights], "the means",
                       "the intervals overlap: not a verdict")


def leaning(claim: Claim, differences: Sequence[float], what: str, why: str) -> str:
    """Which way the left − right ``differences`` of an ordering claim point, in words (``what`` point ...
    (``why``)), or "" when the claim orders nothing, no difference is given, or they point both ways."""
    op = claim.op
    if not differences or op not in (">", ">=", "<", "<=", "much_greater"):
        return ""
    sign = -1.0 if op in ("<", "<=") else 1.0
    margin = claim.margin if op == "much_greater" else 0.0
    gaps = [sign * d for d in differences]
    if any(g < 0 for g in gaps):
        return f"{what} point against the claim ({why})"
    if all(g > margin for g in gaps):
        return f"{what} point the claimed way ({why})"
    return ""


def figures_root() -> Path:
    """The evidence folder claims are judged from: ``$FEDLAB_FIGURES`` if set (a copy, e.g. to test a
    damaged file without touching the committed ones), else ``figures/`` of this repository."""
    env = os.environ.get("FEDLAB_FIGURES")
    return Path(env).expanduser() if env else FIGURES_DIR


def load_claims(path: Path | None = None) -> list[Claim]:
    """The claims of ``path`` (default ``<figures>/claims.yaml``), checked: unique ids, every ``family`` declared
    under ``families``, every ``smallest_effect.of`` a claim of the file."""
    path = figures_root() / CLAIMS_FILE.name if path is None else Path(path)
    data = _read_yaml(path)
    claims = [Claim.from_dict(d) for d in data.get("claims", [])]
    ids = [c.id for c in claims]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ValueError(f"{path}: duplicate claim id(s) {dup}")
    families = load_families(path)
    for c in claims:
        if c.family and c.family not in families:
            raise ValueError(f"{path}: claim {c.id!r}: family={c.family!r} is not declared under families "
                             f"(declared: {', '.join(families) or 'none'})")
        if c.smallest_effect.get("of") and c.smallest_effect["of"] not in ids:
            raise ValueError(f"{path}: claim {c.id!r}: smallest_effect.of={c.smallest_effect['of']!r} is no claim "
                             "of the file")
    return claims


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(Path(path).read_text()) or {}


def load_families(path: Path | None = None) -> dict[str, str]:
    """``{family: what it groups}`` of the ``families`` block of ``path`` (default ``<figures>/claims.yaml``): the
    groups inside which Holm's step-down controls the family-wise error."""
    path = figures_root() / CLAIMS_FILE.name if path is None else Path(path)
    block = _read_yaml(path).get("families") or {}
    if not isinstance(block, Mapping) or any(not isinstance(v, Mapping) or not v.get("what") for v in block.values()):
        raise ValueError(f"{path}: families must map each name to {{what: <the claims it groups>}}")
    return {str(k): str(v["what"]) for k, v in block.items()}


# --- evidence --------------------------------------------------------------------------------------
def arm_name(arm: Mapping[str, Any]) -> str:
    from lab.style import method_label

    if not arm:
        return "value"
    text = arm.get("name") or method_label(arm.get("algorithm", "?"))
    if arm.get("label"):
        return str(arm["label"])
    settings = {**(arm.get("params") or {}), **(arm.get("config") or {})}
    if settings:
        text += " [" + ", ".join(f"{k}={v}" for k, v in settings.items()) + "]"
    return text


_matches = matches  # lab.evidence.validity.matches: which runs an arm names


def _run_value(res: RunResult, metric: str) -> float:
    if metric == "final_test_acc":  # the protocol's final metric, or the labelled fallback of an older record
        from lab.evidence.protocol import final_metric

        return final_metric(res).value
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
    return f"{arm_name(arm)}: {n} duplicate run(s) (a repeated seed or config) counted once" if n else ""


def _arm_runs(runs: Sequence[RunResult], claim: Claim, arm: Mapping[str, Any]) -> list[RunResult]:
    """The arm's independent runs (one per seed), whatever their status."""
    return independent_runs([r for r in runs if _matches(r, arm, claim.select)])[0]


def _finished_runs(runs: Sequence[RunResult], claim: Claim, arm: Mapping[str, Any]) -> tuple[list[RunResult], str]:
    """The arm's finished independent runs, and a note on its repeated, collapsed and diverged ones."""
    chosen, repeated = independent_runs([r for r in runs if _matches(r, arm, claim.select)])
    ok = [r for r in chosen if r.status == "finished"]
    bad = [r for r in chosen if r.status in ("collapsed", "diverged")]
    notes = [_duplicates_note(arm, repeated)] if repeated else []
    if bad:
        counts = {s: sum(r.status == s for r in bad) for s in ("collapsed", "diverged")}
        notes.append(f"{arm_name(arm)}: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    return ok, "; ".join(notes)


def _arm_from_runs(runs: Sequence[RunResult], claim: Claim, arm: Mapping[str, Any]) -> tuple[Estimate | None, str]:
    ok, note = _finished_runs(runs, claim, arm)
    if not ok:
        return None, note
    return mean_interval(_run_value(r, claim.metric) for r in ok), note


def _seeds_from_runs(runs: Sequence[RunResult], claim: Claim,
                     arm: Mapping[str, Any]) -> tuple[dict[Hashable, float] | None, str]:
    """``{config.seed: value}`` of the arm's finished independent runs (one run per seed by construction)."""
    ok, note = _finished_runs(runs, claim, arm)
    return {r.config.seed: _run_value(r, claim.metric) for r in ok}, note


def _table_rows(table: pd.DataFrame, claim: Claim, arm: Mapping[str, Any]) -> tuple[pd.DataFrame, str]:
    """The finished rows of the arm in the figure's table (whole-row repeats counted once), and a note."""
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
    valid = claim.metric.get("valid")
    if valid:  # e.g. λ_max estimates whose power iteration did not converge: flagged in the data, never used
        if valid not in table.columns:
            raise ValueError(f"claim {claim.id!r}: figure {claim.figure}.csv has no column {valid!r} (metric.valid)")
        ok = rows[valid].astype(str).str.lower().isin(("true", "1", "1.0"))
        dropped = int((~ok & rows[col].notna()).sum())
        rows = rows[ok]
        if dropped:
            note = f"{arm_name(arm)}: {dropped} estimate(s) with {valid} = False excluded"
    if "seed" in rows.columns:
        # a row repeated whole (same seed, same setting, same values) is one measurement written twice; rows
        # of one seed that differ (per client, per α) are the table's own samples and all count
        unique = rows.drop_duplicates(keep="first")
        note = "; ".join(x for x in (note, _duplicates_note(arm, len(rows) - len(unique))) if x)
        rows = unique
    if "status" in rows.columns:
        status = rows["status"].fillna("finished")
        counts = {s: int((status == s).sum()) for s in ("collapsed", "diverged")}
        if any(counts.values()):
            note = "; ".join(x for x in (note, f"{arm_name(arm)}: " + ", ".join(
                f"{n} {s}" for s, n in counts.items() if n)) if x)
        rows = rows[status == "finished"]
    return rows, note


def _arm_from_table(table: pd.DataFrame, claim: Claim, arm: Mapping[str, Any]) -> tuple[Estimate | None, str]:
    rows, note = _table_rows(table, claim, arm)
    vals = rows[claim.metric["column"]].dropna()
    return (mean_interval(vals) if len(vals) else None), note


def _seed_label(seed: Any) -> Hashable:
    """A seed as read from a CSV (``0.0``) as the integer it is; anything else unchanged."""
    return int(seed) if isinstance(seed, float) and seed.is_integer() else seed


def _seeds_from_table(table: pd.DataFrame, claim: Claim, arm: Mapping[str, Any],
                      average: bool = False) -> tuple[dict[Hashable, float] | None, str]:
    """``{seed: value}`` of the arm in the figure's table; ``None`` (and why) when the table cannot be paired:
    no seed column, or several values of one seed (per-client rows are samples within a seed, not pairs)
    unless ``average``, which takes each seed's mean (the seed, not the client, is the independent unit)."""
    rows, note = _table_rows(table, claim, arm)
    col = claim.metric["column"]
    rows = rows[rows[col].notna()]
    if "seed" not in rows.columns:
        return None, "; ".join(x for x in (note, f"{claim.figure}.csv has no seed column: cannot pair") if x)
    per_seed = rows.groupby("seed")[col]
    if average:
        return {_seed_label(k): float(v) for k, v in per_seed.mean().items()}, note
    if len(rows) and int(per_seed.size().max()) > 1:
        return None, "; ".join(x for x in (note, f"{arm_name(arm)}: several values per seed in "
                                                  f"{claim.figure}.csv: cannot pair by seed") if x)
    return {_seed_label(k): float(v) for k, v in per_seed.first().items()}, note


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


@dataclass(frozen=True)
class Evidence:
    """What a claim is judged from: the figure's committed runs, or its CSV table."""

    runs: Sequence[RunResult] | None = None
    table: pd.DataFrame | None = None

    def arm(self, claim: Claim, arm: Mapping[str, Any]) -> tuple[Estimate | None, str]:
        """The arm's mean ± interval over its values (unpaired reading), and a note."""
        if self.table is not None:
            return _arm_from_table(self.table, claim, arm)
        return _arm_from_runs(self.runs or [], claim, arm)

    def seeds(self, claim: Claim, arm: Mapping[str, Any],
              average: bool = False) -> tuple[dict[Hashable, float] | None, str]:
        """The arm's ``{seed: value}`` (paired reading), or ``None`` and why it cannot be paired."""
        if self.table is not None:
            return _seeds_from_table(self.table, claim, arm, average)
        return _seeds_from_runs(self.runs or [], claim, arm)


def evidence_of(claim: Claim, figures_dir: Path) -> Evidence | str:
    """The claim's evidence in ``figures_dir``, or (a string) why there is none: the claim is not run."""
    from lab.evidence.records import figure_data, figure_runs

    if isinstance(claim.metric, Mapping):
        try:  # checked against the manifest: an edited (or deleted) table is refused, naming it
            return Evidence(table=figure_data(claim.figure, figures_dir))
        except FileNotFoundError:
            return f"no {claim.figure}.csv yet"
    try:
        runs = figure_runs(claim.figure, figures_dir)
    except FileNotFoundError as err:  # no sidecar: the figure was never made. A bad record raises (loudly).
        return str(err).split(";")[0]
    if not runs:
        return f"{claim.figure} has no committed records yet"
    return Evidence(runs=runs)


def _cost_check(claim: Claim) -> tuple[bool, str]:
    """Whether the claim's gradient-cost ratio (``cost``) is that of the algorithm registry, and a note."""
    from fedlab.algorithms import algorithm_class

    ratio = (algorithm_class(claim.left["algorithm"]).grad_evals_per_step
             / algorithm_class(claim.right[0]["algorithm"]).grad_evals_per_step)
    ok = math.isclose(ratio, float(claim.cost["left_over_right"]))  # type: ignore[index]
    return ok, f"gradient cost ratio {ratio:g} ({'as claimed' if ok else 'not as claimed'})"


def evaluate_claim(claim: Claim, figures_dir: Path | None = None) -> Verdict:
    """One claim's verdict from the committed evidence in ``figures_dir`` (default ``figures/``): the
    unpaired reading of the module docstring."""
    figures_dir = figures_root() if figures_dir is None else Path(figures_dir)
    evidence = evidence_of(claim, figures_dir)
    if isinstance(evidence, str):
        return Verdict(claim, "not run", note=evidence)
    return _unpaired(claim, evidence)


def _unpaired(claim: Claim, evidence: Evidence) -> Verdict:
    left, note_l = evidence.arm(claim, claim.left)
    rights, notes = [], [note_l] if note_l else []
    for a in claim.right:
        est, note = evidence.arm(claim, a)
        rights.append(est)
        if note:
            notes.append(note)
    if left is None or (claim.op != "abs_le" and any(r is None for r in rights)):
        verdict = "inconclusive" if notes else NO_DATA
        return Verdict(claim, verdict, left, rights, "; ".join(notes + ([f"{NO_DATA}: no committed record of an arm"
                                                                         if verdict == NO_DATA else
                                                                         "no finished run of an arm"])))
    if _few(left) or any(_few(r) for r in rights):
        notes.append(f"fewer than {MIN_SEEDS} seeds")
        return Verdict(claim, "inconclusive", left, rights, "; ".join(notes))
    verdicts = [compare(left, r, claim.op, tol=claim.tol, margin=claim.margin) for r in (rights or [None])]
    if claim.cost:
        ok, note = _cost_check(claim)
        notes.append(note)
        if not ok:
            verdicts.append("fails")
    verdict = "fails" if "fails" in verdicts else max(verdicts, key=_ORDER.__getitem__)
    return Verdict(claim, verdict, left, rights, "; ".join(notes))


# --- paired reading --------------------------------------------------------------------------------
_PAIRED_ORDER = {"holds": 0, "inconclusive": 1, TOO_FEW: 3, NOT_PAIRED: 4, NO_DATA: 5, "not run": 5, "fails": 6}
_PENDING = ""  # a comparison's verdict before the family is adjusted (never left in a returned verdict)


def _paired_rank(verdict: str) -> int:
    """holds < inconclusive < inconclusive (n < N) < too few seeds < not paired, an untested class < not run
    < fails."""
    if verdict.startswith("inconclusive (n < "):
        return 2
    return 4 if verdict in UNTESTED else _PAIRED_ORDER[verdict]


def _combine(verdicts: Sequence[str]) -> str:
    """A claim against several arms: fails if any comparison fails (one decided failure refutes "better than
    each"); else, if a comparison did not test the claim, the first such class (in :data:`UNTESTED` order);
    holds only if every one holds; else the weakest of the others (inconclusive < inconclusive (n < N) < too
    few seeds < not paired < not run)."""
    if not verdicts:
        return "not run"
    if "fails" in verdicts:
        return "fails"
    untested = [u for u in UNTESTED if u in verdicts]
    return untested[0] if untested else max(verdicts, key=_paired_rank)


@dataclass(frozen=True)
class PairedComparison:
    """``left − right`` of one right arm, paired by seed (for a one-arm ``abs_le`` claim: the left arm's
    per-seed values against 0)."""

    right: dict[str, Any]
    difference: PairedDifference | None  # None: the arms could not be paired (see note)
    verdict: str  # gated by the number of pairs, decided on the Holm-adjusted p, or an untested class
    as_if: str  # what the interval says without the gate on the number of pairs
    note: str = ""
    p: float = math.nan  # two-sided paired t-test p against the op's bound (NaN: not in a family)
    p_holm: float = math.nan  # … Holm-adjusted in the claim's family
    bound: float = math.nan  # the op's bound b the p tests (0, +m, −δ, +δ), in the metric's unit

    @property
    def tested(self) -> bool:
        """Whether the comparison was decided in its family (n ≥ the gate, both arms tested)."""
        return math.isfinite(self.p_holm)


@dataclass
class PairedVerdict:
    """A claim's paired verdict, beside its unpaired one (:class:`Verdict`)."""

    claim: Claim
    verdict: str
    as_if: str  # the verdict with no gate on the number of pairs
    unpaired: Verdict
    comparisons: list[PairedComparison] = field(default_factory=list)
    min_seeds_to_decide: int = MIN_SEEDS_TO_DECIDE
    note: str = ""
    final_how: str = ""  # how the final accuracy was computed (lab.evidence.protocol.final_metric), if accuracy
    margin: float = 0.0  # the margin the comparisons were read with (a >= / <= claim's resolved smallest effect)
    untested: str = ""  # why the claim is not tested (its untested class's reasons), "" when tested
    family_size: int = 0  # the comparisons Holm adjusted together in the claim's family

    @property
    def scale(self) -> float:
        """100 for accuracies (shown in %), 1 otherwise."""
        return 100.0 if self.claim.metric == "final_test_acc" else 1.0

    @property
    def unit(self) -> str:
        return "%" if self.scale == 100.0 else ""

    @property
    def tested(self) -> bool:
        """Whether the verdict counts: holds, fails or inconclusive (gated or not) — a test that ran."""
        return self.verdict in TESTED or self.verdict.startswith("inconclusive (n < ")

    def differences(self, with_n: bool = True) -> str:
        """``"vs FedSAM +3.10 ± 1.20 % (n=3)"`` per comparison, joined by ``"; "``; '–' where nothing paired,
        ``"– (too few seeds: n=2)"`` below :data:`~lab.evidence.paired.MIN_SEEDS_TO_PRINT` pairs (the numbers
        stay in :func:`paired_table`)."""
        digits = 2 if self.scale == 100.0 else 4
        parts = []
        for c in self.comparisons:
            d = c.difference
            if d is None or d.n == 0:
                text = "–"
            elif d.n < MIN_SEEDS_TO_PRINT:
                text = f"– ({TOO_FEW}: n={d.n})"
            else:
                text = d.format(self.scale, digits, with_n=False) + (f" {self.unit}" if self.unit else "") \
                    + (f" (n={d.n})" if with_n else "")
            parts.append(f"vs {arm_name(c.right)} {text}" if c.right else text)
        return "; ".join(parts)


def _one_arm(claim: Claim, evidence: Evidence, min_seeds_to_decide: int,
             level: float) -> tuple[PairedComparison, list[str]]:
    """``abs_le``: nothing to pair; the per-seed values (a seed's mean over its rows) against 0, with the
    one-sample interval over seeds and the same gate on the number of seeds (an equivalence: in no family)."""
    values, note = evidence.seeds(claim, claim.left, average=True)
    notes = [note] if note else []
    if values == {} and not note:
        return PairedComparison({}, None, NO_DATA, NO_DATA, NO_DATA), [f"{NO_DATA} (no committed value)"]
    if values is None:
        return PairedComparison({}, None, NOT_PAIRED, NOT_PAIRED, note), notes
    diff = paired_difference(values, {s: 0.0 for s in values}, level)
    verdict, as_if = decide(diff, "abs_le", tol=claim.tol, min_seeds_to_decide=min_seeds_to_decide)
    notes.append("one arm: nothing to pair; the interval is over per-seed values")
    return PairedComparison({}, diff, verdict, as_if), notes


@dataclass
class _Reading:
    """A claim read up to its decision (:func:`_read`): its paired differences, what keeps a comparison or the
    whole claim from testing it, and the notes. Comparisons still to decide carry the verdict :data:`_PENDING`."""

    claim: Claim
    unpaired: Verdict
    comparisons: list[PairedComparison] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    untested: list[tuple[str, str]] = field(default_factory=list)  # claim-level (class, reason)
    final_how: str = ""
    not_run: str = ""  # why there is no evidence at all
    decided: bool = False  # an abs_le claim: decided on its own interval, in no family


def _arm_validity(claim: Claim, arm: Mapping[str, Any], runs: Sequence[RunResult], pool: RecordPool) -> tuple[str, str]:
    """``(class, reason)`` when the arm does not test the claim (a diverged run, a degenerate method), else
    ``("", "")``."""
    chosen = _arm_runs(runs, claim, arm)
    why = diverged_arm(arm_name(arm), chosen)
    if why:
        return NOT_TESTED_DIVERGED, why
    why = degenerate(arm_name(arm), arm, chosen, pool)
    return (NOT_TESTED_DEGENERATE, why) if why else ("", "")


def _seed_values(claim: Claim, runs: Mapping[Hashable, RunResult]) -> dict[Hashable, float]:
    return {s: _run_value(r, claim.metric) for s, r in runs.items() if r.status == "finished"}


def _read(claim: Claim, figures_dir: Path, pool: RecordPool, min_seeds_to_decide: int, level: float) -> _Reading:
    """Phase 1 of the paired reading: the evidence, each comparison's paired difference, the arms' validity
    (:mod:`lab.evidence.validity`), the required controls and the ceiling's room; no decision yet."""
    evidence = evidence_of(claim, figures_dir)
    if isinstance(evidence, str):
        return _Reading(claim, Verdict(claim, "not run", note=evidence), not_run=evidence)
    reading = _Reading(claim, _unpaired(claim, evidence), final_how=_final_how(claim, evidence))
    if claim.op == "abs_le":
        comparison, notes = _one_arm(claim, evidence, min_seeds_to_decide, level)
        reading.comparisons, reading.notes, reading.decided = [comparison], notes, True
        return reading
    runs = list(evidence.runs or [])
    validity = {id(a): _arm_validity(claim, a, runs, pool) if runs else ("", "") for a in [claim.left, *claim.right]}
    left, note = evidence.seeds(claim, claim.left)
    notes = reading.notes
    notes += [note] if note else []
    left_absent = left == {} and not note  # no record of the arm at all (not: all collapsed)
    if left_absent:
        notes.append(f"{arm_name(claim.left)}: {NO_DATA} (no committed record)")
    # (the arm as shown, its {seed: value}, a note, its validity class)
    arms: list[tuple[dict[str, Any], dict[Hashable, float] | None, str, str]] = []
    for arm in claim.right:
        right, note = evidence.seeds(claim, arm)
        arms.append((dict(arm), right, note, validity[id(arm)][0]))
    left_runs = _arm_runs(runs, claim, claim.left)
    for required in claim.requires:  # a control the claim needs, read from the whole records folder
        found = companion_runs(pool, required, left_runs) if left_runs else {}
        name = f"{arm_name(required)} (required control)"
        if found and len(found) < min_seeds_to_decide:  # a control still training confounds like a missing one
            reading.untested.append((CONFOUNDED, f"the control {arm_name(required)} has {len(found)} of the "
                                                 f"{min_seeds_to_decide} seeds a verdict needs (figures/claims.yaml "
                                                 "requires)"))
        if found:
            why = diverged_arm(name, list(found.values()))
            if why:
                validity[id(required)] = (NOT_TESTED_DIVERGED, why)
            arms.append(({**required, "label": name}, _seed_values(claim, found), "", validity.get(id(required),
                                                                                                  ("", ""))[0]))
        elif left_runs:
            reading.untested.append((CONFOUNDED, f"the control {arm_name(required)} has no committed record in the "
                                                 "claim's federation (figures/claims.yaml requires)"))
    left_class = validity[id(claim.left)][0]
    for arm, right, note, right_class in arms:
        if note:
            notes.append(note)
        if left_absent or (right == {} and not note):
            if right == {} and not note:
                notes.append(f"{arm_name(arm)}: {NO_DATA} (no committed record)")
            reading.comparisons.append(PairedComparison(arm, None, NO_DATA, NO_DATA, NO_DATA))
            continue
        if left is None or right is None:
            reading.comparisons.append(PairedComparison(arm, None, NOT_PAIRED, NOT_PAIRED, note))
            continue
        diff = paired_difference(left, right, level)
        if diff.note():
            notes.append(f"vs {arm_name(arm)}: {diff.note()}")
        cls = left_class or right_class  # either arm not what the claim names: the comparison tests nothing
        reading.comparisons.append(PairedComparison(arm, diff, cls or _PENDING, cls or _PENDING, diff.note()))
    for cls, why in (v for v in validity.values() if v[0]):
        notes.append(f"{cls}: {why}")
    if claim.ceiling and runs:
        _check_headroom(claim, evidence, runs, pool, reading)
    return reading


def _check_headroom(claim: Claim, evidence: Evidence, runs: Sequence[RunResult], pool: RecordPool,
                    reading: _Reading) -> None:
    """A ``much_greater`` claim: the room from each right arm to its ``ceiling`` (the same federation with the
    ceiling's ``config`` fields), :func:`lab.evidence.validity.headroom`; a margin above it makes the claim not
    testable, and a missing ceiling record is said."""
    scale, unit = (100.0, " points") if claim.metric == "final_test_acc" else (1.0, "")
    for arm in claim.right:
        right_runs = _arm_runs(runs, claim, arm)
        ceiling = _seed_values(claim, companion_runs(pool, claim.ceiling, right_runs, claim.ceiling.get("config")))
        right, _ = evidence.seeds(claim, arm)
        room, n = headroom(ceiling, right or {})
        name = arm_name(claim.ceiling)
        if n == 0:
            reading.notes.append(f"headroom could not be checked: no committed record of the ceiling {name} in the "
                                 f"federation of {arm_name(arm)}")
        elif claim.margin > room:
            reading.untested.append((NOT_TESTABLE_HEADROOM, f"the margin {scale * claim.margin:g}{unit} exceeds the "
                                     f"room {scale * room:.2f}{unit} from {arm_name(arm)} to the ceiling {name} "
                                     f"(mean over {n} seeds)"))
        else:
            reading.notes.append(f"room to the ceiling {name}: {scale * room:.2f}{unit} (n = {n}), above the margin")


def _resolved_margin(claim: Claim, readings: Mapping[str, _Reading]) -> tuple[float, str]:
    """The margin a claim's comparisons are read with, and a note: a ``>=`` / ``<=`` claim's ``smallest_effect``
    (its value, or ``times`` × |mean paired difference| of claim ``of``'s first comparison), else ``margin``."""
    se = claim.smallest_effect
    if not se:
        return claim.margin, ""
    if "value" in se:
        return float(se["value"]), ""
    ref = readings.get(se["of"])
    if ref is None:
        raise ValueError(f"claim {claim.id!r}: smallest_effect.of={se['of']!r} is not among the claims evaluated")
    diffs = [c.difference for c in ref.comparisons if c.difference is not None and c.difference.n]
    if not diffs:
        return math.nan, f"smallest effect unresolved: claim {se['of']} has no paired difference"
    return float(se["times"]) * abs(diffs[0].mean), ""


def _family_p(reading: _Reading, margin: float, min_seeds_to_decide: int) -> list[PairedComparison]:
    """Phase 2: each pending comparison gated by its number of pairs; from the gate on, its t-test p against the
    op's bound (entered into the family), below it the undecided verdict with what the interval says."""
    claim, out = reading.claim, []
    for c in reading.comparisons:
        if c.verdict != _PENDING:
            out.append(c)
            continue
        d = c.difference
        assert d is not None
        gated, as_if = decide(d, claim.op, tol=claim.tol, margin=margin, min_seeds_to_decide=min_seeds_to_decide)
        if d.n < min_seeds_to_decide or not math.isfinite(margin):
            out.append(dataclasses.replace(c, verdict=gated if math.isfinite(margin) else "inconclusive",
                                           as_if=as_if if math.isfinite(margin) else "inconclusive"))
            continue
        bound = op_bound(claim.op, margin)
        out.append(dataclasses.replace(c, verdict=_PENDING, as_if=_PENDING, p=t_test_p(d, bound), bound=bound))
    return out


def _finish(reading: _Reading, comparisons: list[PairedComparison], margin: float, family_size: int,
            min_seeds_to_decide: int, extra: str) -> PairedVerdict:
    """Phase 4: the claim's verdict from its comparisons (:func:`_combine`), its untested class first, the cost
    check last."""
    claim, notes = reading.claim, list(reading.notes) + ([extra] if extra else [])
    if reading.not_run:
        return PairedVerdict(claim, "not run", "not run", reading.unpaired, [], min_seeds_to_decide, reading.not_run)
    untested = sorted(reading.untested, key=lambda u: UNTESTED.index(u[0]))
    if untested:  # the claim as a whole does not test what it says: its comparisons are not read as verdicts
        cls = untested[0][0]
        comparisons = [c if c.verdict in (NO_DATA, NOT_PAIRED) else dataclasses.replace(c, verdict=cls, as_if=cls)
                       for c in comparisons]
        notes += [f"{u}: {why}" for u, why in untested]
    verdicts, as_ifs = [c.verdict for c in comparisons], [c.as_if for c in comparisons]
    if claim.cost:
        ok, note = _cost_check(claim)
        notes.append(note)
        if not ok:
            verdicts.append("fails")
            as_ifs.append("fails")
    verdict, as_if = _combine(verdicts), _combine(as_ifs)
    why = "; ".join(w for u, w in untested if u == verdict) if verdict in UNTESTED else ""
    if verdict in UNTESTED and not why:  # an arm's class: its reason is among the notes
        why = "; ".join(n.removeprefix(f"{verdict}: ") for n in notes if n.startswith(f"{verdict}: "))
    return PairedVerdict(claim, verdict, as_if, reading.unpaired, comparisons, min_seeds_to_decide,
                         "; ".join(dict.fromkeys(n for n in notes if n)), reading.final_how, margin, why,
                         family_size)


def evaluate_claim_paired(claim: Claim, figures_dir: Path | None = None, *,
                          min_seeds_to_decide: int = MIN_SEEDS_TO_DECIDE, level: float = 0.95) -> PairedVerdict:
    """One claim read by seed pairs, as the claims table reads it: :func:`evaluate_claims_paired` of the claim,
    its family read beside it (the peers of ``<figures>/claims.yaml``) so that its Holm adjustment is the table's."""
    return evaluate_claims_paired([claim], figures_dir, min_seeds_to_decide=min_seeds_to_decide, level=level)[0]


def _with_peers(claims: Sequence[Claim], figures_dir: Path) -> list[Claim]:
    """``claims`` and what their reading needs from ``<figures>/claims.yaml``: the other claims of their families
    (one Holm family is adjusted whole) and the claims their ``smallest_effect`` is a share of."""
    path = figures_dir / CLAIMS_FILE.name
    out = list(claims)
    if not path.exists():
        return out
    pool = [c for c in load_claims(path) if c.id not in {x.id for x in claims}]
    while True:
        families = {c.family for c in out if c.family}
        refs = {c.smallest_effect["of"] for c in out if c.smallest_effect.get("of")}
        more = [c for c in pool if c not in out and (c.family in families or c.id in refs)]
        if not more:
            return out
        out += more


def evaluate_claims_paired(claims: Sequence[Claim] | None = None, figures_dir: Path | None = None, *,
                           min_seeds_to_decide: int = MIN_SEEDS_TO_DECIDE,
                           level: float = 0.95) -> list[PairedVerdict]:
    """Every claim of ``<figures>/claims.yaml`` (or ``claims``), read by seed pairs beside the unpaired reading.

    Per claim and right arm the per-seed differences d_s = left_s − R_s over the seeds both arms finished give
    d̄ ± t_{(1+level)/2, n−1}·s_d/√n and the exact sign-flip p (:mod:`lab.evidence.paired`). A comparison whose
    arms do not test the claim takes its class (:mod:`lab.evidence.validity`); one with fewer pairs than
    ``min_seeds_to_decide`` is undecided (``too few seeds`` below 3); the others enter their claim's family
    with the two-sided t-test p against the op's bound, and are decided on the Holm-adjusted p at
    :data:`~lab.evidence.paired.FAMILY_ALPHA`. A claim's verdict combines its comparisons (:func:`_combine`); a
    claim with a cost check fails when the cost ratio is not as claimed. Claims of ``claims`` are returned, in
    order; their family peers are read to adjust the families whole (:func:`_with_peers`).
    """
    figures_dir = figures_root() if figures_dir is None else Path(figures_dir)
    claims = load_claims(figures_dir / "claims.yaml") if claims is None else list(claims)
    universe = _with_peers(claims, figures_dir)
    pool = RecordPool(figures_dir / "records")
    readings = {c.id: _read(c, figures_dir, pool, min_seeds_to_decide, level) for c in universe}
    margins = {i: _resolved_margin(r.claim, readings) for i, r in readings.items()}
    staged = {i: (r.comparisons if r.decided else _family_p(r, margins[i][0], min_seeds_to_decide))
              for i, r in readings.items()}
    families: dict[str, list[tuple[str, int]]] = {}
    for i, comparisons in staged.items():
        if readings[i].untested:  # a claim that does not test what it says enters no family
            continue
        for j, c in enumerate(comparisons):
            if c.verdict == _PENDING:
                families.setdefault(readings[i].claim.family_name, []).append((i, j))
    for members in families.values():
        adjusted = holm([staged[i][j].p for i, j in members])
        for (i, j), p in zip(members, adjusted):
            c, claim = staged[i][j], readings[i].claim
            assert c.difference is not None
            decided = holm_decision(c.difference, claim.op, p, margin=margins[i][0])
            staged[i][j] = dataclasses.replace(c, verdict=decided, as_if=decided, p_holm=p)
    out = []
    for c in claims:
        reading = readings[c.id]
        # an untested claim's pending comparisons were never adjusted: they take its class in _finish
        comparisons = [x if x.verdict != _PENDING else dataclasses.replace(x, verdict="inconclusive",
                                                                           as_if="inconclusive")
                       for x in staged[c.id]]
        size = len(families.get(c.family_name, []))
        out.append(_finish(reading, comparisons, margins[c.id][0], size, min_seeds_to_decide, margins[c.id][1]))
    return out


def _final_how(claim: Claim, evidence: Evidence) -> str:
    """How the final accuracies behind ``claim`` were computed (one label per kind, joined)."""
    if claim.metric != "final_test_acc" or not evidence.runs:
        return ""
    from lab.evidence.protocol import final_metric

    arms = [claim.left, *claim.right]
    used = [r for r in evidence.runs if r.status == "finished" and any(_matches(r, a, claim.select) for a in arms)]
    return "; ".join(sorted({final_metric(r).how for r in used}))


def paired_table(verdicts: Sequence[PairedVerdict]) -> pd.DataFrame:
    """One row per comparison, numbers as floats (accuracies in %, see ``unit``): claim id, arms, unpaired
    and paired verdicts (the claim's and the comparison's), mean paired difference, half-width, low, high,
    n, p (the exact sign-flip p, NaN below 6 pairs), the claim's family, the bound the t-test is against, its
    p (``p_t``) and Holm-adjusted p (``p_holm``; NaN when the comparison was not decided in its family), why
    the claim is not tested (``untested``), and the seeds, per-seed differences and the paired per-seed values
    of each arm as JSON lists."""
    rows, nan = [], float("nan")
    for v in verdicts:
        for i, c in enumerate(v.comparisons or [None]):
            d = c.difference if c is not None else None
            e = v.claim.effect
            rows.append({
                "id": v.claim.id, "kind": v.claim.kind, "claim": v.claim.claim, "paper": v.claim.paper,
                "where": v.claim.where, "metric": v.claim.metric if isinstance(v.claim.metric, str)
                else v.claim.metric["column"],
                "paper_effect": float(e["value"]) if isinstance(e.get("value"), (int, float)) else nan,
                "paper_effect_unit": str(e.get("unit", "")) if e else "",
                "paper_effect_where": str(e.get("where", "")) if e else "",
                "op": v.claim.op, "left": arm_name(v.claim.left),
                "right": arm_name(c.right) if c is not None and c.right else "", "comparison": i,
                "unpaired_verdict": v.unpaired.verdict, "paired_verdict": v.verdict, "paired_as_if": v.as_if,
                "comparison_verdict": c.verdict if c is not None else v.verdict,
                "min_seeds_to_decide": v.min_seeds_to_decide, "unit": v.unit,
                "mean": v.scale * d.mean if d is not None else nan, "half_width": v.scale * d.half_width if d is not None else nan,
                "low": v.scale * d.low if d is not None else nan, "high": v.scale * d.high if d is not None else nan,
                "n": d.n if d is not None else 0, "p": d.p_value if d is not None else nan,
                "left_mean": v.scale * sum(a for a, _ in d.pairs) / d.n if d is not None and d.n else nan,
                "right_mean": v.scale * sum(b for _, b in d.pairs) / d.n if d is not None and d.n else nan,
                "comparison_as_if": c.as_if if c is not None else v.as_if,
                "decided": _decided(v, c),
                "family": v.claim.family_name, "family_size": v.family_size,
                "bound": v.scale * c.bound if c is not None else nan, "p_t": c.p if c is not None else nan,
                "p_holm": c.p_holm if c is not None else nan, "untested": v.untested,
                "smallest_effect_reason": str(v.claim.smallest_effect.get("reason", "")),
                "final_metric": v.final_how,
                "tol": v.scale * v.claim.tol, "margin": v.scale * v.margin,
                "seeds": json.dumps([_seed_json(s) for s in d.seeds] if d is not None else []),
                "differences": json.dumps([v.scale * x for x in d.values] if d is not None else []),
                "left_values": json.dumps([v.scale * a for a, _ in d.pairs] if d is not None else []),
                "right_values": json.dumps([v.scale * b for _, b in d.pairs] if d is not None else []),
                "note": v.note})
    return pd.DataFrame(rows)


def _decided(v: PairedVerdict, c: PairedComparison | None) -> bool:
    """Whether a comparison's verdict was decided: in its Holm family, or — an equivalence (``approx``,
    ``abs_le``: a sanity check, in no family) — on its own interval from the gate's number of pairs."""
    if c is None:
        return False
    if c.tested:
        return True
    d = c.difference
    return v.claim.op in ("approx", "abs_le") and d is not None and d.n >= v.min_seeds_to_decide \
        and c.verdict in TESTED


def _seed_json(seed: Hashable) -> Any:
    return seed if isinstance(seed, (int, float, str)) else str(seed)


def paired_text(verdicts: Sequence[PairedVerdict]) -> str:
    """The old-vs-new listing: per claim its id, unpaired verdict, paired verdict, the mean paired difference
    ± half-width per comparison (accuracies in %), n, the Holm-adjusted t-test p and the sign-flip p; then the
    counts (tested verdicts only) and the notes."""
    header = ("id", "kind", "unpaired", "paired", "paired difference (left − right)", "n", "p (Holm)", "p (sign-flip)")
    rows = []
    for v in verdicts:
        ds = [c.difference for c in v.comparisons]
        ns = sorted({d.n for d in ds if d is not None})
        ps = [f"{d.p_value:.3g}" for d in ds if d is not None and math.isfinite(d.p_value)]
        holms = [f"{c.p_holm:.2g}" for c in v.comparisons if c.tested]
        rows.append((v.claim.id, v.claim.kind, v.unpaired.verdict, v.verdict, v.differences(with_n=False) or "–",
                     "/".join(map(str, ns)) or "0", "; ".join(holms) or "–", "; ".join(ps) or "–"))
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip()  # noqa: E731
    out = [line(header), line(tuple("-" * w for w in widths)), *map(line, rows)]
    counts_of = lambda group, key: ", ".join(f"{sum(key(v) == x for v in group)} {x}"  # noqa: E731
                                             for x in dict.fromkeys(sorted(map(key, group), key=_paired_rank)))
    decide_at = verdicts[0].min_seeds_to_decide if verdicts else MIN_SEEDS_TO_DECIDE
    out.append("")
    for kind in KINDS:  # sanity checks are shown, never counted with the claims
        group = [v for v in verdicts if v.claim.kind == kind]
        if group:
            word = {"claim": "claims", "control": "controls", "sanity": "sanity checks (not counted)"}[kind]
            tested = [v for v in group if v.tested or kind == "sanity"]
            out += [f"{word}: unpaired {counts_of(group, lambda v: v.unpaired.verdict)}; paired (decided from "
                    f"n ≥ {decide_at} pairs, Holm within families) {counts_of(tested, lambda v: v.verdict) or 'none'}"
                    + (f"; not counted: {counts_of([v for v in group if v not in tested], lambda v: v.verdict)}"
                       if len(tested) < len(group) else "")]
    notes = [f"  {v.claim.id}: {v.note}" for v in verdicts if v.note]
    return "\n".join(out + (["", "notes:", *notes] if notes else []))


def evaluate_claims(claims: Sequence[Claim] | None = None, figures_dir: Path | None = None) -> list[Verdict]:
    """Every claim of ``<figures>/claims.yaml`` (or ``claims``), evaluated from stored results.

    Every record read is checked (:func:`lab.evidence.records.load_record`): a corrupt, edited or
    foreign one raises a :class:`~lab.evidence.records.RecordError` naming the file, never a
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


def claims_markdown_unpaired(verdicts: Sequence[Verdict], profile: str = "cpu") -> str:
    """The unpaired claims table as Markdown (the reading before issue 26, kept for comparison): a sentence on
    how to read it, the table, and the verdict counts."""
    table = claims_table(verdicts)
    esc = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = [f"Generated by `python -m lab claims --write` from the committed {profile}-profile run records "
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


FOREST = "claims_forest"  # the forest plot's figure name (lab.tools.forest)


def write_claims(verdicts: Sequence[PairedVerdict] | Sequence[Verdict], stem: Path | None = None, profile: str = "cpu",
                 pages: Sequence[Path] | None = None, findings: Sequence[Any] = ()) -> dict[str, Path]:
    """Write ``figures/claims_<profile>.md`` (the compact table) and ``.csv`` (numeric: one row per comparison,
    :func:`paired_table`), and refresh the claims block of each of ``pages`` (default, when ``stem`` is not
    given: the repository's README.md and figures/README.md, where they have one), each with the forest plot
    linked relative to that page when ``claims_forest.png`` exists beside the CSV. Given unpaired
    :class:`Verdict` s, the files take the unpaired table (the reading before issue 26)."""
    import os

    from lab.repro import REPO_ROOT

    if pages is None:
        pages = [REPO_ROOT / "README.md", FIGURES_DIR / "README.md"] if stem is None else []
    stem = FIGURES_DIR / f"claims_{profile}" if stem is None else Path(stem)
    paths = {"csv": stem.with_suffix(".csv"), "md": stem.with_suffix(".md")}
    paired = bool(verdicts) and all(isinstance(v, PairedVerdict) for v in verdicts)
    forest = stem.parent / f"{FOREST}.png"

    def block(where: Path | None) -> str:
        if not paired:
            return claims_markdown_unpaired(verdicts, profile)  # type: ignore[arg-type]
        image = os.path.relpath(forest, where).replace(os.sep, "/") if forest.exists() and where else None
        return claims_markdown(verdicts, profile, findings=findings, image=image)  # type: ignore[arg-type]

    table = paired_table(verdicts) if paired else claims_table(verdicts)  # type: ignore[arg-type]
    table.to_csv(paths["csv"], index=False, float_format="%.6g")
    # the .md is included by the book's landing page, which shows the plot itself: no image link in it
    paths["md"].write_text(f"# Paper claims checked on the {profile} profile\n\n{block(None)}\n")
    # `claims --write` is the named step that regenerates the claims data from verified records, so it
    # re-records these two files' digests (records and tuning files are never re-recorded this way)
    rerecord([paths["csv"], paths["md"]], paths["csv"].parent)
    for page in pages:
        page = Path(page)
        if page.exists() and BLOCK_START in page.read_text():
            page.write_text(replace_claims_block(page.read_text(), block(page.parent), str(page)))
            paths[f"page:{page.name}:{page.parent.name}"] = page
    return paths


# --- the compact, paired table (the generated block) ----------------------------------------------------
AS_IF_SEEDS = 3
"""The committed cpu evidence has 3 seeds: below the protocol's 6, each verdict is shown with what the
interval says when read at n = 3 (``as_if``), labelled so."""


def effect_text(v: PairedVerdict, with_arm: bool = True) -> str:
    """fedlab's paired effect, compact: ``"+6.12 ± 4.17 pts vs FedSAM (n=3)"`` (accuracy in percentage points);
    several comparisons joined by ``"; "``; ``"no data"`` where an arm has no record."""
    digits = 2 if v.scale == 100.0 else 4
    unit = " pts" if v.scale == 100.0 else ""
    parts, ns = [], set()
    for c in v.comparisons:
        d = c.difference
        if c.verdict == NO_DATA:
            text = NO_DATA
        elif d is None or d.n == 0:
            text = c.verdict if c.verdict == NOT_PAIRED else "–"
        elif d.n < MIN_SEEDS_TO_PRINT:
            text = f"– ({TOO_FEW})"
        else:
            text = d.format(v.scale, digits, with_n=False) + unit
            ns.add(d.n)
        parts.append(f"{text} vs {arm_name(c.right)}" if (c.right and with_arm) else text)
    if not parts:
        return "–"
    return "; ".join(parts) + (f" (n={'/'.join(map(str, sorted(ns)))})" if ns else "")


def p_text(v: PairedVerdict) -> str:
    """The claim's p-values, compact: the Holm-adjusted t-test p of each decided comparison (``"Holm 0.0021;
    0.43"``), then the exact sign-flip p of each paired comparison, its floor named once (``"sign-flip p = 0.031
    (the floor at n = 6)"``; ``"sign-flip 0.031; 0.44 (0.031: the floor at n = 6)"``); "–" when nothing paired."""
    holms = [f"{c.p_holm:.2g}" for c in v.comparisons if c.tested]
    flips = [(c.difference.p_value, c.difference.n) for c in v.comparisons
             if c.difference is not None and math.isfinite(c.difference.p_value)]
    parts = [f"Holm {'; '.join(holms)}"] if holms else []
    if len({round(p, 12) for p, _ in flips}) == 1:
        p, n = flips[0]
        parts.append(f"sign-flip {sign_flip_text(p, n)}" + (" each" if len(flips) > 1 else ""))
    elif flips:
        floors = sorted({n for p, n in flips if math.isclose(p, sign_flip_floor(n), rel_tol=1e-9)})
        parts.append("sign-flip " + "; ".join(f"{p:.2g}" for p, _ in flips)
                     + "".join(f" ({sign_flip_floor(n):.2g}: the floor at n = {n})" for n in floors))
    return " · ".join(parts) or "–"


def verdict_text(v: PairedVerdict, as_if_seeds: int = AS_IF_SEEDS) -> str:
    """The gated verdict, and what the interval says when read at the committed number of seeds."""
    if v.verdict.startswith("inconclusive (n < ") and v.as_if != v.verdict:
        n = min((c.difference.n for c in v.comparisons if c.difference is not None), default=0)
        if n >= MIN_SEEDS_TO_PRINT:
            return f"{v.verdict}; read at n = {n}: **{v.as_if}**"
    return f"**{v.verdict}**" if v.verdict in ("holds", "fails") else v.verdict


_SHOWN = ("holds", "fails", "inconclusive", "inconclusive (n <", *UNTESTED, "too few seeds", "not paired", "not run",
          "no data")


def verdict_counts(verdicts: Sequence[str]) -> str:
    """``"4 holds, 1 fails, 2 inconclusive (n < 6), …"``: how many of each verdict, decided ones first."""
    order = sorted(dict.fromkeys(verdicts), key=lambda v: next((i for i, p in enumerate(_SHOWN) if v.startswith(p)
                                                                   and (p != "inconclusive" or v == p)), len(_SHOWN)))
    return ", ".join(f"{sum(x == o for x in verdicts)} {o}" for o in order) or "none"


def _short(v: PairedVerdict) -> str:
    return f"{v.claim.claim} ({v.claim.id})"


def claims_markdown(verdicts: Sequence[PairedVerdict], profile: str = "cpu", *, findings: Sequence[Any] = (),
                    image: str | None = None) -> str:
    """The generated claims block: how to read it, one compact table per kind (claim | paper's effect |
    fedlab's effect | p | verdict), the counts of the tested verdicts (sanity checks apart), the claims not tested
    with their reasons, the families, the findings beyond the claims, and the forest plot (``image``, a path
    relative to the page)."""
    esc = lambda x: str(x).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    decide_at = verdicts[0].min_seeds_to_decide if verdicts else MIN_SEEDS_TO_DECIDE
    hows = sorted({h for v in verdicts for h in v.final_how.split("; ") if h})
    lines = [f"Generated by `python -m lab claims --write` from the committed {profile}-profile records "
             "(`figures/records/`) and figure data; claims in `figures/claims.yaml`, findings in "
             "`figures/findings.yaml`, every number in `figures/claims_cpu.csv`. "
             "fedlab's effect is the **paired** difference left − right over the seeds both arms share (mean ± 95 % "
             f"paired t-interval; accuracies in percentage points). A verdict needs n ≥ {decide_at} seed pairs; "
             f"below that it is `inconclusive (n < {decide_at})` and what the interval says at the committed n is "
             "shown beside it. **p**: the two-sided paired t-test p against the claim's bound (0; the margin m of ≫; "
             "−δ of ≥, δ its smallest effect of interest, with its reason in `figures/claims.yaml`), "
             f"Holm-adjusted inside the claim's family at family-wise α = {FAMILY_ALPHA:g}: the verdict is decided "
             "on it. The exact sign-flip p is shown beside it; with n pairs it cannot fall below 2/2ⁿ (the floor). "
             "Only holds / fails / inconclusive are counted: a claim whose arm was tuned into another method, "
             "diverged, lacks a control it needs, or whose margin exceeds the room there is, is listed apart with "
             "the reason. `no data`: declared, to be trained."
             + (f" Final accuracy: {'; '.join(hows)}." if hows else ""), ""]
    if image:
        lines += [f"![paper's effect vs fedlab's paired difference]({image})", ""]
    titles = {"claim": "Papers' claims", "control": "Controls (flatness vs momentum / step size)",
              "sanity": "Sanity checks (identities: shown, not counted)"}
    for kind in KINDS:
        group = [v for v in verdicts if v.claim.kind == kind]
        if not group:
            continue
        lines += [f"**{titles[kind]}**", "", "| claim | paper's effect | fedlab's effect | p | verdict |",
                  "|---|---|---|---|---|"]
        for v in group:
            claim = f"{v.claim.claim} — {v.claim.paper}" + (f", {v.claim.where}" if v.claim.where else "")
            if v.claim.smallest_effect and math.isfinite(v.margin):  # its δ, computed (figures/claims.yaml)
                claim += f" [δ = {v.scale * v.margin:.2f}{' pts' if v.scale == 100.0 else ''}]"
            lines.append("| " + " | ".join(esc(x) for x in (claim, v.claim.paper_effect(), effect_text(v), p_text(v),
                                                             verdict_text(v))) + " |")
        lines.append("")
    summary = []
    for kind in ("claim", "control"):
        group = [v for v in verdicts if v.claim.kind == kind]
        tested = [v for v in group if v.tested]
        if group:
            summary.append(f"{kind}s tested: {verdict_counts([v.verdict for v in tested])}; read at the committed n: "
                           f"{verdict_counts([v.as_if if v.verdict.startswith('inconclusive (n <') else v.verdict for v in tested])}"
                           f"; not tested: {verdict_counts([v.verdict for v in group if not v.tested])}")
    sanity = [v for v in verdicts if v.claim.kind == "sanity"]
    if sanity:
        summary.append(f"sanity checks (not counted): {verdict_counts([v.as_if for v in sanity])}")
    lines += ["Summary — " + ". ".join(summary) + "."]
    apart = [v for v in verdicts if v.verdict in UNTESTED]
    if apart:
        lines += ["", "**Not tested, with the reason** (not counted above)", ""]
        lines += [f"- {esc(_short(v))}: {v.verdict} — {esc(v.untested)}" for v in apart]
    families: dict[str, int] = {}
    for v in verdicts:
        if v.family_size and v.claim.family:
            families[v.claim.family] = v.family_size
    if families:
        lines += ["", "Families (Holm's step-down at family-wise α = "
                  f"{FAMILY_ALPHA:g}; decided comparisons in each): "
                  + "; ".join(f"{name} {n}" for name, n in families.items()) + "."]
    if findings:
        lines += ["", "**Findings beyond the claims** (same data, same paired machinery, each read on its own 95 % "
                  "interval: descriptive, in no family; `figures/findings.yaml`)", "",
                  "| question | answer | numbers |", "|---|---|---|"]
        for f in findings:
            lines.append("| " + " | ".join(esc(x) for x in (f.question, f.answer, f.numbers)) + " |")
    return "\n".join(lines).rstrip()
