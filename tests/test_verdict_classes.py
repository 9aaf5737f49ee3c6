"""Verdicts that count and verdicts that do not (issue 41): each class on synthetic records — a degenerate arm, a
diverged run, a margin above the room, a missing control — Holm inside a family, the computed smallest effect; and
the committed claims table's own: FedSWA and FedLESAM tuned into FedAvg, FedGF diverged, FedNSAM's Δ_D confounded while its control lacks seeds."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats

import fedlab
from fedlab.results import RunResult
from lab.evidence import integrity
from lab.evidence.claims import Claim, claims_markdown, evaluate_claims_paired, load_claims
from lab.evidence.records import write_record
from lab.evidence.validity import (CONFOUNDED, IDENTITIES, NOT_TESTABLE_HEADROOM, NOT_TESTABLE_SCOPE,
                                   NOT_TESTED_DEGENERATE, NOT_TESTED_DIVERGED, identity_of)
from lab.repro import FIGURES_DIR

SEEDS = range(6)


def _run(algorithm: str, seed: int, acc: float, *, loss: list[float] | None = None, status: str = "finished",
         curve: list[float] | None = None, config: dict | None = None, **params) -> RunResult:
    """A 5-round run whose final metric (round 5, the last 20 %) is ``acc``; ``curve`` replaces rounds 1–4."""
    cfg = fedlab.Config(algorithm=algorithm, algorithm_params=params, dataset="digits", rounds=5, seed=seed,
                        eval_every=1, **(config or {}))
    accs = (curve or [0.1, 0.3, 0.5, 0.6]) + [acc]
    metrics = pd.DataFrame({"round": range(1, 6), "test_acc": accs,
                            "train_loss": loss or [1.0, 0.8, 0.6, 0.5, 0.4]})
    h = cfg.hash()
    return RunResult(cfg, metrics, None, status, Path(f"{algorithm}-{h}"),  # type: ignore[arg-type]
                     {"status": status, "config_hash": h, "n_params": 10, "n_classes": 10})


def _figure(folder: Path, runs: list[RunResult], extra: list[RunResult] = (), name: str = "fig") -> Path:
    """``runs`` behind figure ``name``; ``extra`` committed in the records folder only (another figure's)."""
    folder.mkdir(parents=True, exist_ok=True)
    for r in [*runs, *extra]:
        write_record(r, folder / "records")
    (folder / f"{name}.json").write_text(json.dumps({"figure": name, "records": [r.run_dir.name for r in runs]}))
    integrity.rerecord(folder / f"{name}.json", folder)  # a sidecar is evidence: read only with its manifest line
    return folder


def _claim(cid: str, left: dict, op: str, right: dict, **extra) -> Claim:
    return Claim.from_dict({"id": cid, "claim": cid, "source": {"paper": "P"}, "setting": {"notebook": "nb",
                            "figure": "fig"}, "metric": "final_test_acc", "left": left, "op": op, "right": right,
                            **extra})


def _accs(base: float, step: float = 0.001) -> list[float]:
    return [base + step * s for s in SEEDS]


def test_an_arm_tuned_into_fedavg_is_degenerate_and_not_counted(tmp_path):
    same = [0.1, 0.3, 0.5, 0.6]
    swa = [_run("fedswa", s, a, curve=same, rho=1.0, alpha=1.0) for s, a in zip(SEEDS, _accs(0.70))]
    avg = [_run("fedavg", s, a, curve=same) for s, a in zip(SEEDS, _accs(0.70))]  # the same floats: FedAvg
    sam = [_run("fedsam", s, a, rho=0.05) for s, a in zip(SEEDS, _accs(0.75))]
    folder = _figure(tmp_path, swa + sam, extra=avg)
    v = evaluate_claims_paired([_claim("c", {"algorithm": "fedswa"}, ">", {"algorithm": "fedsam"})], folder)[0]
    assert v.verdict == NOT_TESTED_DEGENERATE and not v.tested
    assert "where it is FedAvg" in v.untested and "bit for bit at 6 of 6 seeds" in v.untested
    assert v.comparisons[0].difference.n == 6 and not v.comparisons[0].tested  # shown, never decided
    # pinned by the claim (a cell of an ablation): asked for on purpose, so it is tested
    pinned = _claim("p", {"algorithm": "fedswa", "params": {"rho": 1.0, "alpha": 1.0}}, ">", {"algorithm": "fedsam"})
    assert evaluate_claims_paired([pinned], folder)[0].verdict == "fails"
    md = claims_markdown([v])
    assert "**Not tested, with the reason**" in md and "claims tested: none" in md
    assert identity_of(swa[0].config) is IDENTITIES[2] and identity_of(sam[0].config) is None


def test_an_undeclared_bit_for_bit_copy_of_fedavg_is_degenerate(tmp_path):
    same = [0.1, 0.3, 0.5, 0.6]
    gamma = [_run("fedgamma", s, a, curve=same) for s, a in zip(SEEDS, _accs(0.70))]
    avg = [_run("fedavg", s, a, curve=same) for s, a in zip(SEEDS, _accs(0.70))]
    sam = [_run("fedsam", s, a, rho=0.05) for s, a in zip(SEEDS, _accs(0.75))]
    folder = _figure(tmp_path, gamma + sam, extra=avg)
    v = evaluate_claims_paired([_claim("c", {"algorithm": "fedgamma"}, "<", {"algorithm": "fedsam"})], folder)[0]
    assert v.verdict == NOT_TESTED_DEGENERATE and "FedAvg's bit for bit at 6 of 6 seeds" in v.untested
    # one round apart at one seed: not a copy, so the comparison is tested
    gamma[3] = _run("fedgamma", 3, _accs(0.70)[3], curve=[0.1, 0.3, 0.5, 0.61])
    folder = _figure(tmp_path / "b", gamma + sam, extra=avg)
    assert evaluate_claims_paired([_claim("c", {"algorithm": "fedgamma"}, "<", {"algorithm": "fedsam"})],
                                  folder)[0].verdict == "holds"


def test_a_diverged_run_leaves_its_arm_untested_whatever_its_status(tmp_path):
    blown = [1.0, 400.0, 60.0, 40.0, 30.0]  # training loss 400 × round 1's in round 2, labelled finished
    gf = [_run("fedgf", s, a, loss=blown if s == 2 else None) for s, a in zip(SEEDS, _accs(0.60))]
    sam = [_run("fedsam", s, a, rho=0.05) for s, a in zip(SEEDS, _accs(0.75))]
    folder = _figure(tmp_path, gf + sam)
    v = evaluate_claims_paired([_claim("c", {"algorithm": "fedgf"}, ">", {"algorithm": "fedsam"})], folder)[0]
    assert v.verdict == NOT_TESTED_DIVERGED and not v.tested
    assert "1 of 6 runs diverged (seed(s) 2; seed 2: training loss 400 in round 2" in v.untested
    # a right arm diverged: the comparison against it does not count either, and its fail does not refute
    v = evaluate_claims_paired([_claim("d", {"algorithm": "fedsam"}, ">", {"algorithm": "fedgf"})], folder)[0]
    assert v.verdict == NOT_TESTED_DIVERGED


def test_a_claim_declared_out_of_scope_reads_no_evidence_and_is_not_counted(tmp_path):
    left = [_run("fedscar", s, a) for s, a in zip(SEEDS, _accs(0.80, 0.002))]
    right = [_run("fedsam", s, a, rho=0.05) for s, a in zip(SEEDS, _accs(0.70))]
    folder = _figure(tmp_path, left + right)
    tested = _claim("c", {"algorithm": "fedscar"}, ">", {"algorithm": "fedsam"}, family="f")
    why = "its baselines are not implemented"
    scoped = _claim("d", {"algorithm": "fedscar"}, ">", {"algorithm": "fedsam"}, family="f",
                    not_testable={"reason": why})
    v, w = evaluate_claims_paired([tested, scoped], folder)
    assert v.verdict == "holds" and v.family_size == 1  # the scoped claim takes no place in the Holm family
    assert w.verdict == NOT_TESTABLE_SCOPE and not w.tested and w.untested == why
    assert [c.verdict for c in w.comparisons] == [NOT_TESTABLE_SCOPE] and w.comparisons[0].difference is None
    with pytest.raises(ValueError, match="not_testable="):
        _claim("x", {"algorithm": "fedscar"}, ">", {"algorithm": "fedsam"}, not_testable="no reason field")


def test_a_margin_above_the_room_to_the_ceiling_is_not_testable(tmp_path):
    left = [_run("fednsam", s, a) for s, a in zip(SEEDS, _accs(0.74, 0.002))]
    right = [_run("fedsam", s, a, rho=0.05) for s, a in zip(SEEDS, _accs(0.72))]
    iid = {"partition": "iid", "alpha": None}
    ceiling = [_run("fedavg", s, a, config=iid) for s, a in zip(SEEDS, _accs(0.755))]  # 3.5 points above FedSAM
    spec = {"margin": 0.05, "ceiling": {"algorithm": "fedavg", "config": iid, "label": "FedAvg, IID"}}
    claim = _claim("c", {"algorithm": "fednsam"}, "much_greater", {"algorithm": "fedsam"}, **spec)
    v = evaluate_claims_paired([claim], _figure(tmp_path, left + right, extra=ceiling))[0]
    assert v.verdict == NOT_TESTABLE_HEADROOM and not v.tested
    assert "the margin 5 points exceeds the room 3.50 points from FedSAM to the ceiling FedAvg, IID" in v.untested
    # no ceiling record: the verdict stands, and the note says the room was not checked
    v = evaluate_claims_paired([claim], _figure(tmp_path / "b", left + right))[0]
    assert v.verdict == "fails" and "headroom could not be checked" in v.note
    with pytest.raises(ValueError, match="ceiling="):
        _claim("x", {"algorithm": "fednsam"}, ">", {"algorithm": "fedsam"}, ceiling={"algorithm": "fedavg"})


def test_a_missing_control_confounds_the_claim_and_a_present_one_is_compared(tmp_path):
    left = [_run("fednsam", s, a) for s, a in zip(SEEDS, _accs(0.70))]
    right = [_run("fedsam", s, a, rho=0.05) for s, a in zip(SEEDS, _accs(0.75))]
    need = {"requires": [{"algorithm": "fedsam", "params": {"rho": 0.2}}]}
    claim = _claim("c", {"algorithm": "fednsam"}, "<", {"algorithm": "fedsam"}, **need)
    v = evaluate_claims_paired([claim], _figure(tmp_path, left + right))[0]
    assert v.verdict == CONFOUNDED and "FedSAM [rho=0.2] has no committed record" in v.untested
    assert not any(c.tested for c in v.comparisons)
    matched = [_run("fedsam", s, a, rho=0.2) for s, a in zip(SEEDS, _accs(0.76))]  # in another figure's records
    v = evaluate_claims_paired([claim], _figure(tmp_path / "b", left + right, extra=matched))[0]
    assert v.verdict == "holds" and len(v.comparisons) == 2
    assert v.comparisons[1].right["label"] == "FedSAM [rho=0.2] (required control)" and v.comparisons[1].tested
    # a control still training (2 of 6 seeds) confounds the claim as a missing one does, whatever the other arm says
    v = evaluate_claims_paired([claim], _figure(tmp_path / "c", left + right, extra=matched[:2]))[0]
    assert v.verdict == CONFOUNDED and "has 2 of the 6 seeds" in v.untested
    assert not any(c.tested for c in v.comparisons)


def test_a_reference_is_the_method_as_registered_not_a_control_of_it(tmp_path):
    """FedSWA tuned into FedAvg is compared with FedAvg, not with a FedAvg control of the same seed (server_lr 0.6)."""
    same = [0.1, 0.3, 0.5, 0.6]
    swa = [_run("fedswa", s, a, curve=same, rho=1.0, alpha=1.0) for s, a in zip(SEEDS, _accs(0.70))]
    avg = [_run("fedavg", s, a, curve=same) for s, a in zip(SEEDS, _accs(0.70))]
    damped = [_run("fedavg", s, a, curve=[0.2, 0.2, 0.2, 0.2], server_lr=0.6) for s, a in zip(SEEDS, _accs(0.5))]
    sam = [_run("fedsam", s, a) for s, a in zip(SEEDS, _accs(0.71))]
    claim = _claim("d", {"algorithm": "fedswa"}, ">", {"algorithm": "fedsam"})
    v = evaluate_claims_paired([claim], _figure(tmp_path, swa + sam, extra=damped + avg))[0]
    assert v.verdict == NOT_TESTED_DEGENERATE and "bit for bit at 6 of 6 seeds" in v.untested


def test_holm_decides_inside_a_family_and_not_across_families(tmp_path):
    """Two comparisons each decided at the per-comparison 95 % level (unadjusted p < 0.05) but not after Holm in
    one family of two (min p · 2 > 0.05); each alone in its own family, they hold."""
    d1 = [0.010, 0.001, 0.008, 0.000, 0.012, 0.003]
    d2 = [0.009, 0.000, 0.007, 0.001, 0.012, 0.002]
    p1, p2 = (stats.ttest_1samp(d, 0.0).pvalue for d in (d1, d2))
    assert p1 < 0.05 and p2 < 0.05 and 2 * min(p1, p2) > 0.05
    runs = [_run("fedavg", s, 0.70) for s in SEEDS]
    runs += [_run("fedsam", s, 0.70 + d, rho=0.05) for s, d in zip(SEEDS, d1)]
    runs += [_run("fedgamma", s, 0.70 + d) for s, d in zip(SEEDS, d2)]
    folder = _figure(tmp_path, runs)
    a = _claim("a", {"algorithm": "fedsam"}, ">", {"algorithm": "fedavg"}, family="f")
    b = _claim("b", {"algorithm": "fedgamma"}, ">", {"algorithm": "fedavg"}, family="f")
    both = evaluate_claims_paired([a, b], folder)
    assert [v.verdict for v in both] == ["inconclusive", "inconclusive"] and {v.family_size for v in both} == {2}
    assert both[0].comparisons[0].p == pytest.approx(p1, rel=1e-9)
    # Holm over two: the smaller p doubled, the larger kept unless below it (0.0393 and 0.0485 → 0.0785, 0.0785)
    assert [v.comparisons[0].p_holm for v in both] == pytest.approx([max(2 * min(p1, p2), p1), max(2 * min(p1, p2), p2)])
    alone = evaluate_claims_paired([Claim.from_dict({**_dict(a), "family": ""}), Claim.from_dict({**_dict(b)})],
                                   folder)
    assert [v.verdict for v in alone] == ["holds", "holds"] and {v.family_size for v in alone} == {1}


def _dict(c: Claim) -> dict:
    return {"id": c.id, "claim": c.claim, "source": {"paper": c.paper}, "setting": {"notebook": c.notebook,
            "figure": c.figure}, "metric": c.metric, "left": c.left, "op": c.op, "right": c.right}


def test_a_smallest_effect_is_a_share_of_another_claims_effect(tmp_path):
    runs = [_run("fedavg", s, 0.700) for s in SEEDS]
    runs += [_run("fedsam", s, 0.705 + 0.0002 * (s - 2.5), rho=0.05) for s in SEEDS]  # SAM: +0.5 points
    runs += [_run("fedgamma", s, 0.7035 - 0.0001 * s) for s in SEEDS]  # 0.175 points below FedSAM, ± little
    folder = _figure(tmp_path, runs)
    sam = _claim("sam", {"algorithm": "fedsam"}, ">", {"algorithm": "fedavg"})
    spec = {"of": "sam", "times": 0.5, "reason": "half of SAM's effect"}
    ni = _claim("ni", {"algorithm": "fedgamma"}, ">=", {"algorithm": "fedsam"}, smallest_effect=spec)
    v_sam, v_ni = evaluate_claims_paired([sam, ni], folder)
    assert v_ni.margin == pytest.approx(0.5 * v_sam.comparisons[0].difference.mean, rel=1e-12)
    assert v_ni.comparisons[0].bound == pytest.approx(-v_ni.margin) and v_ni.verdict == "holds"
    assert "[δ = 0.25 pts]" in claims_markdown([v_sam, v_ni])
    for bad, match in (({"value": 0.01}, "needs a reason"), ({"value": 0.01, "of": "sam", "reason": "r"}, "either"),
                       ({"value": -1, "reason": "r"}, "smallest_effect.value")):
        with pytest.raises(ValueError, match=match):
            _claim("x", {"algorithm": "fedgamma"}, ">=", {"algorithm": "fedsam"}, smallest_effect=bad)
    with pytest.raises(ValueError, match="not both"):
        _claim("x", {"algorithm": "fedgamma"}, ">=", {"algorithm": "fedsam"}, margin=0.01,
               smallest_effect={"value": 0.01, "reason": "r"})
    with pytest.raises(ValueError, match="non-inferiority"):
        _claim("x", {"algorithm": "fedgamma"}, ">", {"algorithm": "fedsam"}, smallest_effect={"value": 0.01,
                                                                                            "reason": "r"})


def test_the_claims_file_declares_its_families_and_margins():
    from lab.evidence.claims import load_families

    claims, families = load_claims(), load_families()
    assert all(c.family in families for c in claims if c.kind != "sanity")  # every counted claim in a family
    assert {c.family for c in claims if c.kind == "control"} == {"controls"}
    ni = [c for c in claims if c.op in (">=", "<=")]
    assert ni and all(c.smallest_effect.get("reason") and c.margin == 0.0 for c in ni)  # no blanket 1-point margin
    assert all(c.ceiling for c in claims if c.op == "much_greater")
    dd = [c for c in claims if c.metric == "mean_flatness_distance" and c.kind == "claim"]
    assert dd and all(c.requires for c in dd)


def test_the_committed_table_sets_apart_the_arms_that_test_nothing():
    """FedSWA (ρ = 1, α = 1) and FedLESAM (ρ = 0) were tuned into FedAvg; FedGF's runs diverged; FedNSAM's Δ_D
    claims are confounded while FedSAM at FedNSAM's radius has fewer seeds than a verdict needs. None of them is
    counted as a verdict."""
    table = pd.read_csv(FIGURES_DIR / "claims_cpu.csv")
    verdict = table.groupby("id")["paired_verdict"].first()
    assert verdict["fedswa_above_fedsam_high_het"] == NOT_TESTED_DEGENERATE
    assert verdict["fedlesam_ge_fedsam_half_cost"] == NOT_TESTED_DEGENERATE
    assert verdict["fedmoswa_above_fedswa_scaffold"] == NOT_TESTED_DEGENERATE  # its FedSWA arm
    assert verdict["fedgf_above_fedsam_dir01"] == NOT_TESTED_DIVERGED
    for dd in ("fednsam_smaller_flatness_distance", "fednsam_paper_smaller_flatness_distance"):
        rows = table[table["id"] == dd]
        control = rows[rows["right"].str.contains("required control", regex=False)]
        assert len(control) == 1, dd  # FedSAM at FedNSAM's radius, declared as the claim's required control
        # confounded exactly while the control has fewer seeds than a verdict needs, a tested verdict after
        short = int(control["n"].fillna(0).iloc[0]) < int(control["min_seeds_to_decide"].iloc[0])
        assert (verdict[dd] == CONFOUNDED) == short, (dd, verdict[dd])
    assert verdict["fedswa_paper_best_cell"] != NOT_TESTED_DEGENERATE  # its ρ = 1, α = 1 cell is asked for
    classes = [NOT_TESTED_DEGENERATE, NOT_TESTED_DIVERGED, CONFOUNDED, NOT_TESTABLE_HEADROOM, NOT_TESTABLE_SCOPE]
    untested = table[table["comparison_verdict"].isin(classes)]  # never decided, never in a family
    assert len(untested) >= 6 and not untested["decided"].any() and untested["p_holm"].isna().all()
    # a claim set apart may keep a tested comparison (FedMoSWA vs SCAFFOLD), but none that fails (it would refute)
    apart = table[table["paired_verdict"].isin(classes)]
    assert not (apart["decided"] & (apart["comparison_verdict"] == "fails")).any()
    counted = table[table["decided"] & (table["kind"] != "sanity")]  # every counted decision is a Holm decision
    assert counted["p_holm"].notna().all() and (counted["p_holm"] >= counted["p_t"]).all()
    assert math.isclose(table.loc[table["id"] == "fedlesam_ge_fedsam_half_cost", "margin"].iloc[0],
                        0.5 * table.loc[table["id"] == "fedsam_below_fedavg_dir01", "mean"].iloc[0], rel_tol=1e-5)
