"""Findings beyond the papers' claims: questions the committed data answer, by the claims' own machinery.

The claims (:mod:`lab.evidence.claims`) test what the papers say; the same records also answer questions no
paper asked, and a reader should see those answers beside the claims rather than only what was looked for.
Each finding is data (``figures/findings.yaml``), of one of four types:

* ``paired`` — one paired comparison ``left − right`` (as a claim, :func:`lab.evidence.paired.paired_difference`),
  two-sided: the reading is "left higher" when the paired 95 % interval lies above 0, "left lower" below,
  else "no difference resolved"; below :data:`~lab.evidence.paired.MIN_SEEDS_TO_DECIDE` pairs it is not
  decided and what the interval says at the committed n is given, labelled;
* ``best`` — the best method of a setting by paired comparison: the method with the highest mean, and for
  every other method the paired difference best − other; the methods whose interval contains 0 are not
  separated from the best;
* ``spearman`` — a rank correlation between two columns of a figure's table over its per-seed rows (e.g.
  λ_max against test accuracy over methods and seeds), rows flagged invalid excluded (``valid``: an
  unconverged λ_max), with scipy's p and the same over the per-method means; with ``distinct: <column>`` the
  rows whose arm (the algorithm in that column) is another method in disguise are left out too, as
  :func:`lab.evidence.validity.degenerate_arms` classifies the figure's records (a method tuned into FedAvg
  repeats FedAvg's models, which would count them twice);
* ``tuning_edges`` — where the committed tuning choices sit in their grids: how many chose the lowest or the
  highest candidate of a key (an optimum on an edge says the grid did not bracket it).
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from lab.evidence.integrity import EvidenceError

from lab.evidence.paired import MIN_SEEDS_TO_DECIDE, MIN_SEEDS_TO_PRINT, margin_test, paired_difference, sign_flip_text

__all__ = ["FINDINGS_FILE", "claims_block", "FINDING_TYPES", "Finding", "FindingResult", "evaluate_findings", "findings_table",
           "load_findings"]

FINDINGS_FILE = "findings.yaml"
FINDING_TYPES = ("paired", "best", "spearman", "tuning_edges")


@dataclass(frozen=True)
class Finding:
    """One question of ``figures/findings.yaml``."""

    id: str
    question: str
    type: str
    spec: dict[str, Any]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Finding":
        where = f"finding {d.get('id', '?')!r}"
        missing = [k for k in ("id", "question", "type") if k not in d]
        if missing:
            raise ValueError(f"{where}: missing field(s) {missing}")
        if d["type"] not in FINDING_TYPES:
            raise ValueError(f"{where}: type={d['type']!r} is invalid; allowed: {', '.join(FINDING_TYPES)}")
        need = {"paired": ("setting", "metric", "left", "right"), "best": ("setting", "metric"),
                "spearman": ("figure", "x", "y"), "tuning_edges": ("keys",)}[d["type"]]
        absent = [k for k in need if k not in d]
        if absent:
            raise ValueError(f"{where}: a {d['type']} finding needs {absent}")
        return cls(str(d["id"]), str(d["question"]), str(d["type"]),
                   {k: v for k, v in d.items() if k not in ("id", "question", "type")})


@dataclass
class FindingResult:
    """A finding's answer in words, its numbers in words, and its numbers as rows (the CSV)."""

    finding: Finding
    answer: str
    numbers: str
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def question(self) -> str:
        return self.finding.question


def load_findings(path: Path) -> list[Finding]:
    """The findings of ``path`` (``figures/findings.yaml``); none if the file does not exist."""
    import yaml

    path = Path(path)
    if not path.exists():
        return []
    found = [Finding.from_dict(d) for d in (yaml.safe_load(path.read_text()) or {}).get("findings", [])]
    ids = [f.id for f in found]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ValueError(f"{path}: duplicate finding id(s) {dup}")
    return found


def _as_claim(f: Finding, left: Mapping[str, Any], right: Sequence[Mapping[str, Any]]) -> Any:
    from lab.evidence.claims import Claim

    return Claim.from_dict({"id": f.id, "claim": f.question, "source": {"paper": "fedlab"}, "setting": f.spec["setting"],
                            "metric": f.spec["metric"], "left": dict(left), "op": ">", "right": list(right)})


def _reading(low: float, high: float) -> str:
    return {"holds": "left higher", "fails": "left lower"}.get(margin_test(low, high, ">"), "no difference resolved")


def _scale(metric: Any) -> tuple[float, str]:
    return (100.0, " pts") if metric == "final_test_acc" else (1.0, "")


def _paired(f: Finding, figures_dir: Path, decide_at: int) -> FindingResult:
    from lab.evidence.claims import NO_DATA, arm_name, evidence_of

    claim = _as_claim(f, f.spec["left"], [f.spec["right"]])
    evidence = evidence_of(claim, figures_dir)
    if isinstance(evidence, str):
        return FindingResult(f, NO_DATA, evidence)
    left, _ = evidence.seeds(claim, claim.left, average=isinstance(claim.metric, Mapping))
    right, _ = evidence.seeds(claim, claim.right[0], average=isinstance(claim.metric, Mapping))
    if not left or not right:
        return FindingResult(f, NO_DATA, "an arm has no committed record")
    d = paired_difference(left, right)
    scale, unit = _scale(claim.metric)
    name = f"{arm_name(claim.left)} − {arm_name(claim.right[0])}"
    if d.n < MIN_SEEDS_TO_PRINT:
        return FindingResult(f, f"too few seeds (n={d.n})", name)
    reading = _reading(d.low, d.high).replace("left", arm_name(claim.left))
    answer = reading if d.n >= decide_at else f"undecided (n < {decide_at}); read at n = {d.n}: {reading}"
    p = f"; sign-flip {sign_flip_text(d.p_value, d.n)}" if math.isfinite(d.p_value) else ""  # its floor named
    row = {"finding": f.id, "type": f.type, "left": arm_name(claim.left), "right": arm_name(claim.right[0]),
           "mean": scale * d.mean, "low": scale * d.low, "high": scale * d.high, "n": d.n, "p": d.p_value,
           "differences": json.dumps([scale * x for x in d.values]), "reading": reading}
    text = f"{name}: {d.format(scale, 2 if scale == 100 else 4, with_n=False)}{unit} (n={d.n}){p}"
    return FindingResult(f, answer, text, [row])


def _best(f: Finding, figures_dir: Path, decide_at: int) -> FindingResult:
    from lab.evidence.claims import NO_DATA, evidence_of
    from lab.style import method_label

    probe = _as_claim(f, {}, [{}])
    evidence = evidence_of(probe, figures_dir)
    if isinstance(evidence, str) or not evidence.runs:
        return FindingResult(f, NO_DATA, evidence if isinstance(evidence, str) else "no runs")
    methods = sorted({r.config.algorithm for r in evidence.runs if all(
        getattr(r.config, k, None) == v for k, v in probe.select.items())})
    values = {m: evidence.seeds(probe, {"algorithm": m})[0] or {} for m in methods}
    values = {m: v for m, v in values.items() if len(v) >= MIN_SEEDS_TO_PRINT}
    if not values:
        return FindingResult(f, NO_DATA, "no method with 3 finished seeds")
    scale, unit = _scale(probe.metric)
    best = max(values, key=lambda m: sum(values[m].values()) / len(values[m]))
    rows, tied = [], []
    for m in values:
        if m == best:
            continue
        d = paired_difference(values[best], values[m])
        reading = _reading(d.low, d.high)
        if reading != "left higher":
            tied.append(m)
        rows.append({"finding": f.id, "type": f.type, "left": method_label(best), "right": method_label(m),
                     "mean": scale * d.mean, "low": scale * d.low, "high": scale * d.high, "n": d.n, "p": d.p_value,
                     "differences": json.dumps([scale * x for x in d.values]), "reading": reading})
    n = min(r["n"] for r in rows) if rows else 0
    mean = scale * sum(values[best].values()) / len(values[best])
    when = "" if n >= decide_at else f" (undecided: n = {n} < {decide_at}; read at n = {n})"
    answer = (f"{method_label(best)} by mean ({mean:.2f}{' %' if scale == 100 else ''}); not separated from it by "
              f"the paired interval{when}: {', '.join(method_label(m) for m in tied) or 'none'}")
    closest = sorted(rows, key=lambda r: r["mean"])[:3]
    numbers = "; ".join(f"{r['left']} − {r['right']} {r['mean']:+.2f} [{r['low']:+.2f}, {r['high']:+.2f}]{unit}"
                        for r in closest)
    return FindingResult(f, answer, f"closest: {numbers}", rows)


def _spearman(f: Finding, figures_dir: Path) -> FindingResult:
    from scipy import stats

    from lab.evidence.claims import NO_DATA

    spec = f.spec
    from lab.evidence.records import figure_data

    try:  # checked against the manifest, as a claim's table is
        table = figure_data(spec["figure"], figures_dir)
    except FileNotFoundError:
        return FindingResult(f, NO_DATA, f"no {spec['figure']}.csv")
    for key, value in (spec.get("where") or {}).items():
        table = table[table[key] == value]
    x, y = spec["x"], spec["y"]
    rows = table[table[x].notna() & table[y].notna()]
    total = len(rows)
    valid = spec.get("valid")
    if valid:
        rows = rows[rows[valid].astype(str).str.lower().isin(("true", "1", "1.0"))]
    invalid = total - len(rows)
    disguised = _degenerate_groups(spec, figures_dir) if spec.get("distinct") else {}
    if disguised:  # an arm that is another method in disguise repeats that method's models: each counts once
        rows = rows[~rows[spec["distinct"]].isin(list(disguised))]
    if len(rows) < 4:
        return FindingResult(f, "too few values", f"{len(rows)} rows")
    rho, p = stats.spearmanr(rows[x], rows[y])
    group = spec.get("group")
    extra, out = "", {"finding": f.id, "type": f.type, "left": x, "right": y, "n": len(rows), "excluded": total - len(rows),
                      "spearman": float(rho), "p": float(p)}
    if group:
        means = rows.groupby(group)[[x, y]].mean()
        if len(means) >= 4:
            rho_g, p_g = stats.spearmanr(means[x], means[y])
            extra = f"; over the {len(means)} {group} means ρ_s = {rho_g:+.2f} (p = {p_g:.2g})"
            out |= {"spearman_of_means": float(rho_g), "p_of_means": float(p_g), "n_means": len(means)}
    strength = "no monotone relation resolved" if p >= 0.05 else ("higher goes with higher" if rho > 0 else
                                                                  "higher goes with lower")
    dropped = f", {invalid} excluded ({valid} = False)" if valid else ""
    if disguised:
        from lab.style import method_label

        # the names only: the reasons (long) are the claims table's, where the same arms are listed apart
        dropped += (f", {total - invalid - len(rows)} of degenerate arms excluded ("
                    + ", ".join(method_label(k) for k in sorted(disguised)) + ": another method in disguise)")
        out["degenerate"] = sorted(disguised)
    return FindingResult(f, f"{strength} (Spearman ρ_s = {rho:+.2f}, p = {p:.2g})",
                         f"{len(rows)} per-seed values{dropped}{extra}", [out])


def _degenerate_groups(spec: Mapping[str, Any], figures_dir: Path) -> dict[str, str]:
    """``{algorithm: reason}`` for the arms of the figure's runs (its sidecar's records, grouped by algorithm)
    that :func:`lab.evidence.validity.degenerate_arms` classifies as another method in disguise, the references
    looked up in the whole records folder."""
    from lab.evidence.records import figure_runs
    from lab.evidence.validity import RecordPool, degenerate_arms

    arms: dict[str, list[Any]] = {}
    for run in figure_runs(spec["figure"], figures_dir):
        arms.setdefault(run.config.algorithm, []).append(run)
    return degenerate_arms(arms, RecordPool(figures_dir / "records"))


def _tuning_edges(f: Finding, figures_dir: Path) -> FindingResult:
    keys = list(f.spec["keys"])
    folder = figures_dir / f.spec.get("folder", "tuning")  # the tuning the evidence uses (figures/<folder>)
    rows = []
    from lab.evidence.integrity import verify
    from lab.evidence.tuning_files import tuning_root

    for path in sorted(folder.glob("**/*.json")):
        try:
            done = json.loads(verify(path, tuning_root(path)))  # an edited choice moves a finding: refused
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise EvidenceError(f"tuning file {path} is not JSON ({type(err).__name__}: {err}); restore it from "
                                "git") from None
        grid, best = done.get("grid") or {}, done.get("best") or {}
        for key in keys:
            values = grid.get(key)
            if not values or key not in best or len(values) < 2 or not all(isinstance(v, (int, float)) for v in values):
                continue
            where = "lowest" if best[key] == min(values) else "highest" if best[key] == max(values) else "interior"
            rows.append({"finding": f.id, "type": f.type, "left": path.relative_to(folder).as_posix(),
                         "right": key, "chosen": best[key], "grid": json.dumps(values), "position": where,
                         "grid_has_zero": 0 in values})
    if not rows:
        return FindingResult(f, "no tuning files", "")
    count = {w: sum(r["position"] == w for r in rows) for w in ("lowest", "highest", "interior")}
    zero = [r for r in rows if r["grid_has_zero"]]
    zero_text = (f"; of the {len(zero)} grid(s) containing 0, {sum(r['chosen'] == 0 for r in zero)} chose 0"
                 if zero else "")
    return FindingResult(f, f"{count['lowest'] + count['highest']} of {len(rows)} choices sit on an edge of their grid"
                            f"{zero_text}",
                         f"{count['lowest']} lowest, {count['highest']} highest, {count['interior']} interior "
                         f"({', '.join(keys)})", rows)


def evaluate_findings(findings: Sequence[Finding] | None = None, figures_dir: Path | None = None, *,
                      decide_at: int = MIN_SEEDS_TO_DECIDE) -> list[FindingResult]:
    """Every finding of ``<figures>/findings.yaml`` (or ``findings``), answered from the committed data."""
    from lab.evidence.claims import figures_root

    figures_dir = figures_root() if figures_dir is None else Path(figures_dir)
    findings = load_findings(figures_dir / FINDINGS_FILE) if findings is None else findings
    out = []
    for f in findings:
        if f.type == "paired":
            out.append(_paired(f, figures_dir, decide_at))
        elif f.type == "best":
            out.append(_best(f, figures_dir, decide_at))
        elif f.type == "spearman":
            out.append(_spearman(f, figures_dir))
        else:
            out.append(_tuning_edges(f, figures_dir))
    return out


def findings_table(results: Sequence[FindingResult]) -> pd.DataFrame:
    """Every finding's numbers, one row per comparison / correlation / tuning file (numbers as numbers)."""
    rows = [dict(r) | {"question": res.question, "answer": res.answer} for res in results for r in res.rows]
    return pd.DataFrame(rows)


def claims_block(figures_dir: Path | None = None, page_dir: Path | None = None, profile: str = "cpu") -> str:
    """The generated block for a page in ``page_dir`` (default: the figures folder) from the committed data:
    paired claims at the protocol's gate, the findings, and the forest plot if it exists."""
    import os

    from lab.evidence.claims import FOREST, claims_markdown, evaluate_claims_paired, figures_root

    figures_dir = figures_root() if figures_dir is None else Path(figures_dir)
    verdicts = evaluate_claims_paired(figures_dir=figures_dir)
    forest = figures_dir / f"{FOREST}.png"
    page_dir = figures_dir if page_dir is None else Path(page_dir)
    image = os.path.relpath(forest, page_dir).replace(os.sep, "/") if forest.exists() else None
    return claims_markdown(verdicts, profile, findings=evaluate_findings(figures_dir=figures_dir), image=image)
