"""The claims table, written: the numeric table (one row per comparison), the listing the command prints, the
generated Markdown block (one compact table per kind) and the pages and files that carry them.

``python -m lab claims --write`` writes ``figures/claims_<profile>.md`` and ``.csv`` and refreshes the claims
block of README.md and figures/README.md (:func:`write_claims`); the numbers are :mod:`lab.evidence.claims.reading`'s.
Beside each paired verdict the numeric table and the listing carry the unpaired comparison's, a finding of its own
(:mod:`lab.evidence.claims.unpaired`): the column the committed tables have always had.
"""
from __future__ import annotations

import json
import math
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from lab.evidence.claims.reading import NOT_PAIRED, TESTED, PairedComparison, PairedVerdict, verdict_rank
from lab.evidence.claims.spec import KINDS, NO_DATA, arm_name
from lab.evidence.claims.unpaired import unpaired_verdict
from lab.evidence.integrity import rerecord
from lab.evidence.map_table import map_reading
from lab.evidence.paired import (FAMILY_ALPHA, MIN_SEEDS_TO_DECIDE, MIN_SEEDS_TO_PRINT, TOO_FEW, sign_flip_floor,
                                 sign_flip_text)
from lab.evidence.validity import UNTESTED
from lab.repro import FIGURES_DIR

__all__ = ["AS_IF_SEEDS", "BLOCK_END", "BLOCK_START", "FOREST", "claims_markdown", "effect_text", "p_text",
           "paired_table", "paired_text", "replace_claims_block", "verdict_counts", "verdict_text", "write_claims"]


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
                "unpaired_verdict": _unpaired(v), "paired_verdict": v.verdict, "paired_as_if": v.as_if,
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


def _unpaired(v: PairedVerdict) -> str:
    """The unpaired comparison's verdict on ``v``'s claim, from the evidence ``v`` was read from (a finding)."""
    return unpaired_verdict(v.claim, v.evidence).verdict


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
    """The listing the command prints: per claim its id, the unpaired finding's verdict, the paired verdict, the
    mean paired difference ± half-width per comparison (accuracies in %), n, the Holm-adjusted t-test p and the
    sign-flip p; then the counts (tested verdicts only) and the notes."""
    header = ("id", "kind", "unpaired", "paired", "paired difference (left − right)", "n", "p (Holm)", "p (sign-flip)")
    rows = []
    for v in verdicts:
        ds = [c.difference for c in v.comparisons]
        ns = sorted({d.n for d in ds if d is not None})
        ps = [f"{d.p_value:.3g}" for d in ds if d is not None and math.isfinite(d.p_value)]
        holms = [f"{c.p_holm:.2g}" for c in v.comparisons if c.tested]
        rows.append((v.claim.id, v.claim.kind, _unpaired(v), v.verdict, v.differences(with_n=False) or "–",
                     "/".join(map(str, ns)) or "0", "; ".join(holms) or "–", "; ".join(ps) or "–"))
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip()  # noqa: E731
    out = [line(header), line(tuple("-" * w for w in widths)), *map(line, rows)]
    counts_of = lambda group, key: ", ".join(f"{sum(key(v) == x for v in group)} {x}"  # noqa: E731
                                             for x in dict.fromkeys(sorted(map(key, group), key=verdict_rank)))
    decide_at = verdicts[0].min_seeds_to_decide if verdicts else MIN_SEEDS_TO_DECIDE
    out.append("")
    for kind in KINDS:  # sanity checks are shown, never counted with the claims
        group = [v for v in verdicts if v.claim.kind == kind]
        if group:
            word = {"claim": "claims", "control": "controls", "sanity": "sanity checks (not counted)"}[kind]
            tested = [v for v in group if v.tested or kind == "sanity"]
            out += [f"{word}: unpaired {counts_of(group, _unpaired)}; paired (decided from "
                    f"n ≥ {decide_at} pairs, Holm within families) {counts_of(tested, lambda v: v.verdict) or 'none'}"
                    + (f"; not counted: {counts_of([v for v in group if v not in tested], lambda v: v.verdict)}"
                       if len(tested) < len(group) else "")]
    notes = [f"  {v.claim.id}: {v.note}" for v in verdicts if v.note]
    return "\n".join(out + (["", "notes:", *notes] if notes else []))


BLOCK_START, BLOCK_END = "<!-- fedlab:claims:start -->", "<!-- fedlab:claims:end -->"


def replace_claims_block(text: str, block: str, where: str = "the file") -> str:
    """``text`` with the part between :data:`BLOCK_START` and :data:`BLOCK_END` replaced by ``block``."""
    i, j = text.find(BLOCK_START), text.find(BLOCK_END)
    if i < 0 or j < i:
        raise ValueError(f"{where} has no {BLOCK_START} … {BLOCK_END} block for the claims table")
    return text[: i + len(BLOCK_START)] + "\n" + block + "\n" + text[j:]


FOREST = "claims_forest"  # the forest plot's figure name (lab.tools.forest)


def write_claims(verdicts: Sequence[PairedVerdict], stem: Path | None = None, profile: str = "cpu",
                 pages: Sequence[Path] | None = None, findings: Sequence[Any] = ()) -> dict[str, Path]:
    """Write ``figures/claims_<profile>.md`` (the compact table) and ``.csv`` (numeric: one row per comparison,
    :func:`paired_table`), and refresh the claims block of each of ``pages`` (default, when ``stem`` is not
    given: the repository's README.md and figures/README.md, where they have one), each with the forest plot
    linked relative to that page when ``claims_forest.png`` exists beside the CSV."""
    import os

    from lab.repro import REPO_ROOT

    if pages is None:
        pages = [REPO_ROOT / "README.md", FIGURES_DIR / "README.md"] if stem is None else []
    stem = FIGURES_DIR / f"claims_{profile}" if stem is None else Path(stem)
    paths = {"csv": stem.with_suffix(".csv"), "md": stem.with_suffix(".md")}
    forest = stem.parent / f"{FOREST}.png"

    def block(where: Path | None) -> str:
        image = os.path.relpath(forest, where).replace(os.sep, "/") if forest.exists() and where else None
        return claims_markdown(verdicts, profile, findings=findings, image=image)

    paired_table(verdicts).to_csv(paths["csv"], index=False, float_format="%.6g")
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
    mapped = [v for v in verdicts if v.claim.map_arm]
    if mapped:
        lines += ["", "**Where local SAM should fail** (the failure map, `lab/study/failure_map.yaml`: its pre-registered "
                  "decision per split × local work, read from `figures/failure_map/map.csv`)", ""]
        lines += [f"- {esc(_short(v))}: {esc(map_reading(v.claim.map_arm))}" for v in mapped]
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
