"""Paired comparisons by seed: the statistics against scipy, the margin rules, the gates, the paired
reading of claims from synthetic records, and `python -m lab claims --paired` on the committed evidence."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from lab.evidence.claims import NOT_PAIRED, evaluate_claim_paired, load_claims
from lab.evidence.claims.unpaired import compare, evaluate_unpaired, unpaired_verdict
from lab.evidence.paired import (MIN_SEEDS_TO_DECIDE, MIN_SEEDS_TO_PRINT, TOO_FEW, decide, margin_test,
                                    paired_difference, sign_flip_p)
from fedlab.uncertainty import mean_interval
from lab.evidence import integrity
from lab.evidence.tuning_files import tuning_root
from lab.evidence.validity import UNTESTED
from test_claims import _claim, _fake, _figure  # the synthetic-run builders of the claims tests


def _listed(path: Path) -> None:
    """Give a figure table written by a test its manifest line (a figure's CSV is evidence, issue 46); a table
    written again replaces its line, as save_figure does."""
    integrity.rerecord(path, path.parent)


def _arms(n: int, seed: int, shift: float = 0.3, noise: float = 1.0) -> tuple[dict[int, float], dict[int, float]]:
    rng = np.random.default_rng(seed)
    right = rng.normal(0.0, 1.0, n)
    left = right + shift + rng.normal(0.0, noise, n)
    return dict(enumerate(left)), dict(enumerate(right))


@pytest.mark.parametrize(("n", "seed"), [(2, 0), (3, 1), (6, 2), (10, 3)])
def test_paired_interval_is_scipys_ttest_rel_interval(n, seed):
    left, right = _arms(n, seed)
    d = paired_difference(left, right)
    res = stats.ttest_rel(list(left.values()), list(right.values()))
    ci = res.confidence_interval(0.95)
    assert d.n == n and d.mean == pytest.approx(np.mean(np.subtract(list(left.values()), list(right.values()))))
    assert (d.low, d.high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    # the same as a one-sample t-interval of the differences at df = n − 1
    diffs = np.array(d.values)
    lo, hi = stats.t.interval(0.90, n - 1, loc=diffs.mean(), scale=stats.sem(diffs))
    d90 = paired_difference(left, right, level=0.90)
    assert (d90.low, d90.high) == (pytest.approx(lo), pytest.approx(hi))


@pytest.mark.parametrize(("n", "seed", "shift"), [(6, 0, 0.3), (7, 1, 1.0), (8, 2, 0.0), (10, 3, 0.5), (6, 4, 5.0)])
def test_sign_flip_p_is_scipys_exact_paired_permutation_test(n, seed, shift):
    left, right = _arms(n, seed, shift)
    x, y = np.array(list(left.values())), np.array(list(right.values()))
    ref = stats.permutation_test((x, y), lambda a, b, axis: np.mean(a - b, axis=axis), vectorized=True,
                                 permutation_type="samples", n_resamples=np.inf, alternative="two-sided")
    d = paired_difference(left, right)
    assert d.p_value == pytest.approx(ref.pvalue, rel=1e-12)
    assert sign_flip_p(x - y) == pytest.approx(ref.pvalue, rel=1e-12)


def test_sign_flip_p_edge_cases_and_the_nan_below_six_pairs():
    assert sign_flip_p([1.0] * 6) == pytest.approx(2 / 64)  # all one sign: only ± all-flips reach it
    assert sign_flip_p([0.0] * 6) == 1.0  # no difference at all
    assert sign_flip_p([1.0, -1.0, 2.0, -2.0, 3.0, -3.0]) == 1.0
    assert sign_flip_p(np.arange(1.0, 18.0)) == pytest.approx(2 / 2 ** 17)  # more than one block of 2^16
    left, right = _arms(5, 0, shift=10.0)
    assert math.isnan(paired_difference(left, right).p_value)  # n = 5: no p-value, however large the effect
    with pytest.raises(ValueError):
        sign_flip_p([])


def test_correlated_arms_undecided_unpaired_decided_paired():
    # a seed effect shared by both arms (θ₀, sampling, batches) of ±5 points, a consistent +0.5 point gain
    rng = np.random.default_rng(7)
    seed_effect = rng.normal(0.70, 0.05, 8)
    right = dict(enumerate(seed_effect))
    left = {s: v + 0.005 + rng.normal(0.0, 0.001) for s, v in right.items()}
    unpaired = compare(mean_interval(left.values()), mean_interval(right.values()), ">")
    d = paired_difference(left, right)
    verdict, _ = decide(d, ">")
    assert unpaired == "inconclusive" and verdict == "holds"
    assert d.p_value == pytest.approx(2 / 2 ** 8)  # every difference positive


def _diff(values: list[float]):
    return paired_difference(dict(enumerate(values)), {s: 0.0 for s in range(len(values))})


@pytest.mark.parametrize(("low", "high", "op", "tol", "margin", "expected"), [
    (0.1, 0.5, ">", 0, 0, "holds"), (-0.5, -0.1, ">", 0, 0, "fails"), (-0.1, 0.5, ">", 0, 0, "inconclusive"),
    (-0.5, -0.1, "<", 0, 0, "holds"), (0.1, 0.5, "<", 0, 0, "fails"), (-0.5, 0.1, "<", 0, 0, "inconclusive"),
    # non-inferiority, δ = 1: holds when low > −1, fails when high < −1
    (-0.8, 2.0, ">=", 0, 1.0, "holds"), (-3.0, -1.2, ">=", 0, 1.0, "fails"), (-1.5, 2.0, ">=", 0, 1.0, "inconclusive"),
    (-0.5, 0.5, ">=", 0, 0.0, "inconclusive"),  # δ = 0: means in order are no longer enough
    (-2.0, 0.8, "<=", 0, 1.0, "holds"), (1.2, 3.0, "<=", 0, 1.0, "fails"), (-2.0, 1.5, "<=", 0, 1.0, "inconclusive"),
    # equivalence within ± 1: the whole interval inside, wholly outside, or neither
    (-0.9, 0.9, "approx", 1.0, 0, "holds"), (1.1, 2.0, "approx", 1.0, 0, "fails"),
    (-2.0, -1.1, "approx", 1.0, 0, "fails"), (-0.5, 1.5, "approx", 1.0, 0, "inconclusive"),
    # Δ ≥ margin 5
    (5.5, 9.0, "much_greater", 0, 5.0, "holds"), (1.0, 4.5, "much_greater", 0, 5.0, "fails"),
    (3.0, 9.0, "much_greater", 0, 5.0, "inconclusive"),
])
def test_margin_rules(low, high, op, tol, margin, expected):
    assert margin_test(low, high, op, tol=tol, margin=margin) == expected


def test_the_gates_too_few_then_inconclusive_then_decided():
    assert (MIN_SEEDS_TO_PRINT, MIN_SEEDS_TO_DECIDE) == (3, 6)
    big = [5.0, 5.1, 4.9, 5.05, 4.95, 5.0, 5.02]
    for n, expected in [(2, TOO_FEW), (3, "inconclusive (n < 6)"), (5, "inconclusive (n < 6)"), (6, "holds")]:
        verdict, as_if = decide(_diff(big[:n]), ">")
        assert verdict == expected and as_if == "holds", n
    assert decide(_diff(big[:3]), ">", min_seeds_to_decide=3) == ("holds", "holds")
    assert decide(_diff(big[:2]), ">", min_seeds_to_decide=2)[0] == TOO_FEW  # printing still needs 3
    assert decide(_diff([-x for x in big[:5]]), ">")[0] == "inconclusive (n < 6)"  # would fail, n = 5
    assert decide(_diff(big[:1]), ">") == (TOO_FEW, "inconclusive")
    with pytest.raises(ValueError):
        decide(_diff(big), ">", min_seeds_to_decide=1)


def test_seeds_in_one_arm_only_are_dropped_and_named():
    d = paired_difference({0: 0.5, 1: 0.6, 2: 0.7, 5: 0.9}, {1: 0.5, 2: 0.6, 3: 0.1, 5: 0.7})
    assert d.seeds == (1, 2, 5) and d.values == pytest.approx((0.1, 0.1, 0.2))
    assert d.left_only == (0,) and d.right_only == (3,)
    assert "0 only in the left arm" in d.note() and "3 only in the right arm" in d.note()
    assert paired_difference({0: 1.0}, {1: 1.0}).n == 0


def test_paired_claims_from_synthetic_records(tmp_path):
    # seed effects of ±5 points shared by both arms, FedVSSAM ahead by 1 point at each seed; seed 6 only in
    # FedVSSAM, seed 7 collapsed for FedSAM
    base = [0.70, 0.78, 0.64, 0.75, 0.69, 0.81]
    runs = ([_fake("fedvssam", s, b + 0.01 + 0.001 * s) for s, b in enumerate(base)] + [_fake("fedvssam", 6, 0.7)]
            + [_fake("fedsam", s, b) for s, b in enumerate(base)] + [_fake("fedvssam", 7, 0.8),
                                                                     _fake("fedsam", 7, 0.1, "collapsed")])
    _figure(tmp_path, "fig", runs)
    claim = _claim(">")
    v = evaluate_claim_paired(claim, tmp_path)
    # the unpaired finding, read from what the verdict was read from, and from the folder: undecided both ways
    assert unpaired_verdict(claim, v.evidence).verdict == evaluate_unpaired(claim, tmp_path).verdict == "inconclusive"
    assert v.verdict == "holds" and v.as_if == "holds"
    (c,) = v.comparisons
    assert c.difference.n == 6 and c.difference.mean == pytest.approx(0.01 + 0.0025)
    assert c.difference.left_only == (6, 7) and "1 collapsed" in v.note and "only in the left arm" in v.note
    assert 0 < c.difference.p_value <= 2 / 64 + 1e-12
    assert "vs FedSAM +1.25 ±" in v.differences() and "% (n=6)" in v.differences()
    assert evaluate_claim_paired(claim, tmp_path, min_seeds_to_decide=7).verdict == "inconclusive (n < 7)"
    # several right arms: each paired separately, the claim holds only if every comparison holds
    runs = ([_fake("fedvssam", s, 0.80 + 0.001 * s) for s in range(6)]
            + [_fake("fedsam", s, 0.70 + 0.001 * s) for s in range(6)]
            + [_fake("fedavg", s, 0.80 + 0.001 * s + 0.004 * (-1) ** s) for s in range(6)])
    _figure(tmp_path / "b", "fig", runs)
    two = dataclasses.replace(claim, right=[{"algorithm": "fedsam"}, {"algorithm": "fedavg"}])
    v = evaluate_claim_paired(two, tmp_path / "b")
    assert [c.verdict for c in v.comparisons] == ["holds", "inconclusive"] and v.verdict == "inconclusive"
    assert evaluate_claim_paired(_claim(">"), tmp_path / "nothing").verdict == "not run"


def test_tables_pair_by_their_seed_column_or_say_they_cannot(tmp_path):
    rows = {"method": ["fedvssam"] * 3 + ["fedsam"] * 3, "seed": [0.0, 1.0, 2.0] * 2,
            "lambda_max": [11.0, 21.0, 31.0, 12.0, 22.5, 32.0]}
    pd.DataFrame(rows).to_csv(tmp_path / "fig.csv", index=False)
    _listed(tmp_path / "fig.csv")
    c = dataclasses.replace(_claim("<"), metric={"column": "lambda_max", "arm_column": "method"})
    v = evaluate_claim_paired(c, tmp_path, min_seeds_to_decide=3)
    assert unpaired_verdict(c, v.evidence).verdict == "inconclusive" and v.verdict == "holds"
    assert v.comparisons[0].difference.seeds == (0, 1, 2)  # CSV floats read back as the integer seeds
    pd.DataFrame({k: x for k, x in rows.items() if k != "seed"}).to_csv(tmp_path / "fig.csv", index=False)
    _listed(tmp_path / "fig.csv")
    v = evaluate_claim_paired(c, tmp_path)
    assert v.verdict == NOT_PAIRED and "no seed column" in v.note
    pd.DataFrame({**rows, "seed": [0, 0, 1, 0, 0, 1]}).to_csv(tmp_path / "fig.csv", index=False)
    _listed(tmp_path / "fig.csv")
    assert "several values per seed" in evaluate_claim_paired(c, tmp_path).note
    # one arm (|left| ≤ tol): per-client rows averaged per seed, the interval over seeds
    pd.DataFrame({"seed": [0, 0, 1, 1, 2, 2], "cross": [0.01, -0.01, 0.02, 0.0, 0.0, 0.01]}).to_csv(
        tmp_path / "fig.csv", index=False)
    _listed(tmp_path / "fig.csv")
    z = dataclasses.replace(_claim("abs_le", tol=0.05), metric={"column": "cross", "arm_column": None}, left={},
                            right=[])
    v = evaluate_claim_paired(z, tmp_path)
    assert v.comparisons[0].difference.n == 3 and v.verdict == "inconclusive (n < 6)" and v.as_if == "holds"


def _rows(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("---")) + 1
    return lines[start: lines.index("", start)]


def test_the_cli_reads_the_committed_records_paired_by_default(tmp_path, capsys):
    from lab.cli import main
    from lab.evidence.claims import NO_DATA

    claims = load_claims()
    ids = [c.id for c in claims]
    assert main(["claims", "--decide-at", "3", "--csv", str(tmp_path / "paired.csv")]) == 0
    out = capsys.readouterr().out
    rows = _rows(out)
    assert [r.split()[0] for r in rows] == ids  # one row per claim, in the file's order
    verdicts = ("holds", "fails", "inconclusive", TOO_FEW, NOT_PAIRED, "not run", NO_DATA, *UNTESTED)
    for row, claim in zip(rows, claims):
        cells = [c for c in row.split("  ") if c.strip()]
        assert cells[1].strip() == claim.kind
        assert cells[2].strip() in ("holds", "fails", "inconclusive", "not run", NO_DATA)  # the unpaired verdict
        assert cells[3].strip().startswith(verdicts)  # the paired verdict
    assert "claims: unpaired" in out and "paired (decided from n ≥ 3 pairs, Holm within families)" in out
    assert "sanity checks (not counted)" in out and "findings beyond the claims" in out
    table = pd.read_csv(tmp_path / "paired.csv")
    assert set(table["id"]) == set(ids)
    for col in ("mean", "half_width", "low", "high", "p", "left_mean", "right_mean", "paper_effect", "margin", "tol",
                "bound", "p_t", "p_holm"):
        assert pd.api.types.is_numeric_dtype(table[col]), col  # numbers, never formatted strings
    assert pd.api.types.is_integer_dtype(table["n"]) and pd.api.types.is_bool_dtype(table["decided"])
    finite = table[table["n"] >= 2]  # one pair has a mean, no interval
    assert (finite["low"] <= finite["mean"]).all() and (finite["mean"] <= finite["high"]).all()
    for _, r in table[table["n"] > 0].iterrows():
        diffs = json.loads(r["differences"])
        assert len(diffs) == len(json.loads(r["seeds"])) == r["n"]
        assert np.mean(diffs) == pytest.approx(r["mean"], abs=1e-4)
        if r["right"]:
            left, right = json.loads(r["left_values"]), json.loads(r["right_values"])
            assert np.subtract(left, right) == pytest.approx(diffs)
            assert np.mean(left) - np.mean(right) == pytest.approx(r["mean"], abs=1e-4)
    assert (table.loc[table["comparison_verdict"] == NO_DATA, "n"] == 0).all()  # declared arms: no data, no crash
    assert main(["claims"]) == 0
    out = capsys.readouterr().out
    assert len(_rows(out)) == len(ids) and "paired (decided from n ≥ 6 pairs, Holm within families)" in out
    with pytest.raises(SystemExit):  # one reading: the unpaired comparison is a finding, no reading of its own
        main(["claims", "--unpaired"])
    assert main(["claims", "--decide-at", "1"]) == 2
    assert main(["claims", "--write", "--decide-at", "3"]) == 2  # the committed files keep the protocol's gate


def test_several_comparisons_combine_to_the_weakest_unless_one_fails():
    from lab.evidence.claims import combine

    assert combine(["holds", "holds"]) == "holds"
    assert combine(["holds", "inconclusive (n < 6)", "inconclusive"]) == "inconclusive (n < 6)"
    assert combine(["inconclusive (n < 6)", TOO_FEW]) == TOO_FEW
    assert combine(["holds", NOT_PAIRED, "fails"]) == "fails"


def test_fewer_than_three_pairs_print_no_numbers(tmp_path):
    runs = ([_fake("fedvssam", s, 0.80 + 0.01 * s) for s in range(3)] + [_fake("fedsam", s, 0.70) for s in (1, 2)])
    _figure(tmp_path, "fig", runs)
    v = evaluate_claim_paired(_claim(">"), tmp_path)
    assert v.verdict == TOO_FEW and v.comparisons[0].difference.n == 2
    assert v.differences() == f"vs FedSAM – ({TOO_FEW}: n=2)" and "only in the left arm" in v.note


@pytest.mark.parametrize("values", [[0.3, 0.31, 0.32], [0.01, -0.01, 0.0], [0.04, 0.06, 0.05], [-0.2, 0.1, 0.3]])
def test_abs_le_on_left_minus_zero_is_the_unpaired_abs_le(values):
    e = mean_interval(values)
    assert margin_test(e.low, e.high, "abs_le", tol=0.05) == compare(e, None, "abs_le", tol=0.05)


# --- issue 26: margins, kinds, findings, the numeric CSV ------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("margin", [0.0, 0.01, 0.03])
def test_the_margin_tests_are_scipys_one_sided_paired_t_tests(seed, margin):
    """≥ δ (non-inferiority) holds exactly when the one-sided paired t-test of H₀: mean(d) ≤ −δ rejects at
    2.5 %, ≫ m exactly when H₀: mean(d) ≤ m is rejected (the 95 % two-sided interval's lower end)."""
    rng = np.random.default_rng(seed)
    for _ in range(20):
        n = int(rng.integers(3, 9))
        right = rng.normal(0.7, 0.05, n)
        left = right + rng.normal(rng.uniform(-0.04, 0.06), 0.02, n)
        d = paired_difference(dict(enumerate(left)), dict(enumerate(right)))
        ge = stats.ttest_rel(left + margin, right, alternative="greater").pvalue < 0.025
        assert (margin_test(d.low, d.high, ">=", margin=margin) == "holds") == ge
        much = stats.ttest_rel(left - margin, right, alternative="greater").pvalue < 0.025
        assert (margin_test(d.low, d.high, "much_greater", margin=margin) == "holds") == much
        worse = stats.ttest_rel(left + margin, right, alternative="less").pvalue < 0.025
        assert (margin_test(d.low, d.high, ">=", margin=margin) == "fails") == worse


def test_a_ge_claim_with_a_margin_is_not_held_by_the_means_alone(tmp_path):
    """The old reading let ≥ hold on the means (+0.77 where the paper claims +10); the margin test needs the
    interval above −δ."""
    left = [0.70, 0.78, 0.72]
    runs = ([_fake("fedvssam", s, a) for s, a in enumerate(left)]
            + [_fake("fedsam", s, a) for s, a in enumerate([0.71, 0.74, 0.70])])
    _figure(tmp_path, "fig", runs)
    claim = _claim(">=", margin=0.01)
    assert evaluate_unpaired(claim, tmp_path).verdict == "holds"  # unpaired: the means are in order
    v = evaluate_claim_paired(claim, tmp_path, min_seeds_to_decide=3)
    assert v.verdict == "inconclusive" and v.comparisons[0].difference.low < -0.01


def test_sanity_checks_are_shown_not_counted_and_absent_arms_are_no_data(tmp_path):
    from lab.evidence.claims import NO_DATA, Claim, claims_markdown, evaluate_claims_paired

    runs = ([_fake("fedvssam", s, 0.80 + 0.01 * s) for s in range(3)]
            + [_fake("fedsam", s, 0.70 + 0.012 * s) for s in range(3)])
    _figure(tmp_path, "fig", runs)
    pd.DataFrame({"seed": [0, 1, 2], "cross_relative": [0.01, 0.0, 0.005]}).to_csv(tmp_path / "dec.csv", index=False)
    _listed(tmp_path / "dec.csv")
    base = {"source": {"paper": "P", "where": "T1"}, "setting": {"notebook": "nb", "figure": "fig"},
            "metric": "final_test_acc"}
    claims = [Claim.from_dict({**base, "id": "a", "claim": "A", "left": {"algorithm": "fedvssam"}, "op": ">",
                               "right": {"algorithm": "fedsam"}, "effect": {"value": 2.0, "unit": "points"}}),
              Claim.from_dict({**base, "id": "b", "claim": "B", "left": {"algorithm": "fedgmt", "planned": "27"},
                               "op": ">", "right": {"algorithm": "fedsam"}}),
              Claim.from_dict({**base, "id": "c", "claim": "C", "kind": "control", "op": ">",
                               "left": {"algorithm": "fedvssam"},
                               "right": {"algorithm": "fedsam", "config": {"lr": 0.02}}}),
              Claim.from_dict({**base, "id": "s", "claim": "S", "kind": "sanity", "op": "abs_le", "tol": 0.05,
                               "setting": {"notebook": "nb", "figure": "dec"}, "left": {},
                               "metric": {"column": "cross_relative", "arm_column": None}})]
    verdicts = evaluate_claims_paired(claims, tmp_path, min_seeds_to_decide=3)
    assert [v.verdict for v in verdicts] == ["holds", NO_DATA, NO_DATA, "holds"]
    md = claims_markdown(verdicts)
    summary = md[md.index("Summary"):]
    # the sanity check's "holds" is not among the claims; no data is not a tested verdict (issue 41)
    assert "claims tested: 1 holds; read at the committed n: 1 holds; not tested: 1 no data" in summary
    assert "sanity checks (not counted): 1 holds" in summary
    assert "| A — P, T1 | +2 points | +" in md
    with pytest.raises(ValueError, match="kind='identity'"):
        Claim.from_dict({**base, "id": "x", "claim": "X", "kind": "identity", "op": ">", "left": {},
                         "right": {"algorithm": "fedsam"}})
    with pytest.raises(ValueError, match="'test'"):
        Claim.from_dict({**base, "id": "x", "claim": "X", "op": ">", "left": {}, "right": {"algorithm": "fedsam"},
                         "hypotheses": {"fails": {"hypothesis": "no run named"}}})


def test_unconverged_estimates_are_excluded_and_counted(tmp_path):
    from lab.evidence.claims import Claim

    pd.DataFrame({"method": ["fedvssam"] * 4 + ["fedsam"] * 4, "seed": [0, 1, 2, 3] * 2,
                  "lambda_max": [1.0, 1.1, 99.0, 1.2, 3.0, 3.1, 3.2, 3.3],
                  "converged": [True, True, False, True] + [True] * 4}).to_csv(tmp_path / "curv.csv", index=False)
    _listed(tmp_path / "curv.csv")
    claim = Claim.from_dict({"id": "t", "claim": "x", "source": {"paper": "P"},
                             "setting": {"notebook": "nb", "figure": "curv"},
                             "metric": {"column": "lambda_max", "arm_column": "method", "valid": "converged"},
                             "left": {"algorithm": "fedvssam"}, "op": "<", "right": {"algorithm": "fedsam"}})
    v = evaluate_claim_paired(claim, tmp_path, min_seeds_to_decide=3)
    assert v.comparisons[0].difference.seeds == (0, 1, 3) and "1 estimate(s) with converged = False" in v.note
    assert v.verdict == "holds"


def test_findings_answer_from_the_same_machinery(tmp_path):
    from lab.evidence.findings import Finding, evaluate_findings

    runs = ([_fake("fedvssam", s, 0.80 + 0.01 * s) for s in range(3)]
            + [_fake("fedsam", s, 0.70 + 0.012 * s) for s in range(3)]
            + [_fake("fedavg", s, a) for s, a in enumerate([0.80, 0.82, 0.80])])
    _figure(tmp_path, "fig", runs)
    setting = {"notebook": "nb", "figure": "fig"}
    pair = Finding.from_dict({"id": "p", "question": "Q", "type": "paired", "setting": setting,
                              "metric": "final_test_acc", "left": {"algorithm": "fedsam"},
                              "right": {"algorithm": "fedavg"}})
    best = Finding.from_dict({"id": "b", "question": "B", "type": "best", "setting": setting,
                              "metric": "final_test_acc"})
    p, b = evaluate_findings([pair, best], tmp_path, decide_at=3)
    assert p.answer == "FedSAM lower" and p.rows[0]["n"] == 3 and p.rows[0]["mean"] < 0
    assert b.answer.startswith("FedVSSAM by mean") and "FedAvg" in b.answer.split(":")[-1]  # FedAvg not separated
    assert "FedSAM" not in b.answer.split(":")[-1]
    with pytest.raises(ValueError, match="type='anova'"):
        Finding.from_dict({"id": "x", "question": "x", "type": "anova"})


def test_the_tuning_edges_finding_reads_the_folder_it_names_and_counts_edges_and_zeros(tmp_path):
    from lab.evidence.findings import Finding, evaluate_findings

    def tuned(folder, name, grid, best):
        path = tmp_path / folder / "dirichlet-0.1" / f"{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"grid": grid, "best": best}))
        integrity.add(path, tuning_root(path))  # a tuning file is evidence: read only with its manifest line

    tuned("rerun/tuning", "fedsam", {"rho": [0.0, 0.01, 0.05, 0.1]}, {"rho": 0.05})  # interior
    tuned("rerun/tuning", "fedlesam", {"rho": [0.0, 0.05, 0.1]}, {"rho": 0.0})  # lowest, and zero chosen
    tuned("rerun/tuning", "fedprox", {"mu": [0.001, 0.01, 0.1]}, {"mu": 0.1})  # highest
    tuned("tuning", "fedsam", {"rho": [0.01, 0.05]}, {"rho": 0.01})  # the other folder: not read
    spec = {"id": "edges", "question": "q", "type": "tuning_edges", "keys": ["rho", "mu"]}
    (res,) = evaluate_findings([Finding.from_dict({**spec, "folder": "rerun/tuning"})], tmp_path)
    assert res.answer == "2 of 3 choices sit on an edge of their grid; of the 2 grid(s) containing 0, 1 chose 0"
    assert res.numbers == "1 lowest, 1 highest, 1 interior (rho, mu)"
    assert {r["left"] for r in res.rows} == {"dirichlet-0.1/fedsam.json", "dirichlet-0.1/fedlesam.json",
                                             "dirichlet-0.1/fedprox.json"}
    (old,) = evaluate_findings([Finding.from_dict(spec)], tmp_path)  # no folder: figures/tuning
    assert old.answer == "1 of 1 choices sit on an edge of their grid"


# --- error rates (issue 41): Holm's step-down, the t-test against the op's bound, the sign-flip floor ------------
def test_holm_on_a_hand_computed_case():
    """p = (0.01, 0.04, 0.03, 0.005), m = 4. Sorted: 0.005, 0.01, 0.03, 0.04; thresholds α/4, α/3, α/2, α/1 at
    α = 0.05: 0.005 ≤ 0.0125 and 0.01 ≤ 0.0167 are rejected, 0.03 > 0.025 stops the steps (0.04 is kept too).
    Adjusted: 4·0.005 = 0.02; max(0.02, 3·0.01) = 0.03; max(0.03, 2·0.03) = 0.06; max(0.06, 1·0.04) = 0.06."""
    from lab.evidence.paired import holm

    adjusted = holm([0.01, 0.04, 0.03, 0.005])
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02], abs=1e-15)
    assert [p <= 0.05 for p in adjusted] == [True, False, False, True]
    assert holm([0.2]) == [0.2] and holm([]) == []
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])  # capped at 1
    with pytest.raises(ValueError, match="leave untested comparisons out"):
        holm([0.01, float("nan")])


def test_the_t_test_is_against_the_ops_bound_and_matches_scipy():
    from lab.evidence.paired import op_bound, t_test_p

    d = paired_difference({s: 0.70 + 0.011 * s for s in range(6)}, {s: 0.69 + 0.009 * s ** 1.1 for s in range(6)})
    for bound in (0.0, 0.005, -0.01):
        want = stats.ttest_1samp(np.array(d.values) - bound, 0.0).pvalue
        assert t_test_p(d, bound) == pytest.approx(want, rel=1e-10)
    assert (op_bound(">"), op_bound("<"), op_bound("much_greater", 0.05)) == (0.0, 0.0, 0.05)
    assert (op_bound(">=", 0.0015), op_bound("<=", 0.0015)) == (-0.0015, 0.0015)
    with pytest.raises(ValueError, match="equivalence"):
        op_bound("approx")
    same = paired_difference({s: 0.8 for s in range(6)}, {s: 0.7 for s in range(6)})
    assert t_test_p(same, 0.0) == 0.0 and t_test_p(same, same.mean) == 1.0  # no spread
    assert math.isnan(t_test_p(paired_difference({0: 0.8}, {0: 0.7})))


def test_a_holm_decision_is_read_on_the_claimed_side_of_the_bound():
    from lab.evidence.paired import holm_decision

    up = paired_difference({s: 0.80 + 0.001 * s for s in range(6)}, {s: 0.70 for s in range(6)})
    assert holm_decision(up, ">", 0.01) == "holds" and holm_decision(up, "<", 0.01) == "fails"
    assert holm_decision(up, ">", 0.06) == "inconclusive"  # not rejected at α = 0.05
    assert holm_decision(up, "much_greater", 0.01, margin=0.2) == "fails"  # decided, below the margin
    assert holm_decision(up, ">=", 0.01, margin=0.01) == "holds" and holm_decision(up, "<=", 0.01, margin=0.01) == "fails"


def test_the_sign_flip_p_names_its_floor():
    from lab.evidence.paired import sign_flip_floor, sign_flip_text

    assert sign_flip_floor(6) == 0.03125 == sign_flip_p([0.1, 0.2, 0.3, 0.1, 0.2, 0.3])
    assert sign_flip_text(0.03125, 6) == "p = 0.031 (the floor at n = 6)"
    assert sign_flip_text(0.21875, 6) == "p = 0.22" and sign_flip_text(float("nan"), 3) == "p: –"
