"""The rerun plan's R5 estimate (lab/regime/rerun.py): distinct runs from the plan's families and the
claims' arms, and their cost from measured seconds — on small synthetic plans, then the committed one."""
from __future__ import annotations

import json

import pytest
import yaml

from lab.regime import rerun as rr
from lab.regime.pilot import CriteriaError

METHODS = ("fedavg", "feddyn", "fedsam", "fedvssam", "scaffold")
TWO = {"fedavg": False, "feddyn": False, "fedsam": True, "fedvssam": True, "scaffold": False}
CLAIMS = [
    {"id": "a", "setting": {"select": {"partition": "dirichlet", "alpha": 0.5}},
     "left": {"algorithm": "fedvssam"}, "right": [{"algorithm": "fedavg"}, {"algorithm": "scaffold"}]},
    {"id": "b", "setting": {}, "left": {"algorithm": "fedsam", "params": {"rho": 0.1}},
     "right": {"algorithm": "fedsam", "config": {"lr": 0.02}}},
    {"id": "c", "setting": {}, "left": {}, "right": {"algorithm": "fedavg"}},  # a sanity arm without a method
]


def _plan(**extra):
    plan = {"regime": "X", "seeds": list(range(6)), "splits": ["dirichlet-0.1", "dirichlet-0.5"], "workers": 2,
            "budget_hours": 8.0,
            "tuning": {"split": "dirichlet-0.1", "rounds_fraction": 0.5, "seeds": 1, "edge_allowance": 0.0},
            "families": [{"notebook": "10", "label": "all", "methods": "all", "splits": ["dirichlet-0.1"]},
                         {"notebook": "10", "label": "claimed", "methods": "claims", "splits": ["dirichlet-0.5"]},
                         {"notebook": "08", "label": "gamma", "methods": ["fedvssam"],
                          "params": [{"gamma_l": 0.1}, {"gamma_l": 0.4}]}],
            "analyses": {"09": {"models": 2, "seeds": 3}}}
    plan.update(extra)
    return plan


def test_a_claim_on_a_studys_figure_adds_nothing_to_the_reruns_plan():
    """The failure map's control claims read its figure (failure_map/failure_map): the map's file planned those runs."""
    on_map = [c for c in rr.the_claims() if "/" in c["setting"]["figure"]]
    assert on_map and rr.claim_arms(on_map) == []
    assert rr.claim_arms([{**on_map[0], "setting": {**on_map[0]["setting"], "figure": "10_benchmarks_bars_fmnist"}}])


def test_claim_arms_are_read_at_their_split_with_params_and_config():
    arms = rr.claim_arms(CLAIMS)
    got = {(a.split, a.method, a.params) for a in arms}
    assert got == {("dirichlet-0.5", "fedvssam", "{}"), ("dirichlet-0.5", "fedavg", "{}"),
                   ("dirichlet-0.5", "scaffold", "{}"), ("dirichlet-0.1", "fedsam", json.dumps({"rho": 0.1})),
                   ("dirichlet-0.1", "fedsam", json.dumps({"config.lr": 0.02})), ("dirichlet-0.1", "fedavg", "{}")}
    assert rr.split_key({"partition": "pathological", "classes_per_client": 3}) == "pathological-3"
    with pytest.raises(CriteriaError, match="names no split"):
        rr.split_key({"partition": "shards"})


def test_a_run_two_sources_need_is_counted_once():
    runs = rr.plan_runs(_plan(), CLAIMS, METHODS)
    keys = [(r.split, r.method, r.params) for r in runs]
    assert len(keys) == len(set(keys))
    # Dir 0.1: 5 tuned methods (claim c's FedAvg is one of them) + 2 γ_l variants + 2 FedSAM claim variants;
    # Dir 0.5: the three methods claim a compares (the family and the claim: once)
    assert len(runs) == 5 + 2 + 2 + 3
    first = next(r for r in runs if (r.split, r.method) == ("dirichlet-0.1", "fedavg"))
    assert first.source.startswith("10") and first.seeds == 6  # a family's run that a claim also judges
    assert {r.seeds for r in runs if r.method == "fedvssam" and r.params != "{}"} == {6}  # no descriptive_seeds
    runs = rr.plan_runs(_plan(descriptive_seeds=3), CLAIMS, METHODS)
    seeds = {(r.split, r.method, r.params): r.seeds for r in runs}
    assert seeds[("dirichlet-0.1", "fedavg", "{}")] == 6 and seeds[("dirichlet-0.1", "scaffold", "{}")] == 3
    assert seeds[("dirichlet-0.1", "fedvssam", json.dumps({"gamma_l": 0.1}))] == 3
    assert seeds[("dirichlet-0.5", "scaffold", "{}")] == 6
    fams = _plan(descriptive_seeds=3)["families"]
    fams[2]["seeds"] = "all"
    runs = rr.plan_runs(_plan(descriptive_seeds=3, families=fams), CLAIMS, METHODS)
    assert {r.seeds for r in runs if r.params == json.dumps({"gamma_l": 0.1})} == {6}
    with pytest.raises(CriteriaError, match="unregistered"):
        rr.plan_runs(_plan(families=[{"notebook": "x", "label": "y", "methods": ["nope"]}]), CLAIMS, METHODS)
    with pytest.raises(CriteriaError, match="not one of the plan's splits"):
        rr.plan_runs(_plan(families=[{"notebook": "x", "label": "y", "methods": "all", "splits": ["iid"]}]),
                     CLAIMS, METHODS)


def test_claims_at_a_split_the_plan_does_not_train_add_no_runs_and_are_named():
    plan = _plan(splits=["dirichlet-0.1"], families=[{"notebook": "10", "label": "all", "methods": "all"}])
    runs = rr.plan_runs(plan, CLAIMS, METHODS)
    assert {r.split for r in runs} == {"dirichlet-0.1"} and len(runs) == len(METHODS) + 2
    assert rr.claims_not_run(plan, CLAIMS) == ["a"]


def test_the_estimate_is_the_stated_sum():
    plan = _plan()
    runs = rr.plan_runs(plan, CLAIMS, METHODS)
    seconds = {"fedavg": 100.0, "feddyn": 140.0, "fedsam": 200.0}
    grids = {"fedavg": {}, "feddyn": {"lam": (0.01, 0.1)}, "fedvssam": {"rho": (0, 1, 2), "preset": ("a", "b")}}
    est = rr.estimate(plan, runs, seconds, TWO, grids, analysis_seconds=15.0)
    first = (100.0 + 140.0) / 2  # a first-order method stage B did not train (SCAFFOLD)
    per_seed = {"fedavg": 100.0, "feddyn": 140.0, "fedsam": 200.0, "fedvssam": 200.0, "scaffold": first}
    runs_s = sum(r.seeds * per_seed[r.method] for r in runs)
    tuning_s = 0.5 * (2 * 140.0 + 6 * 200.0)
    assert est["total_seconds"] == pytest.approx(runs_s + tuning_s + 2 * 3 * 15.0)
    assert est["hours"] == pytest.approx(est["total_seconds"] / 2 / 3600) and est["runs"] == 6 * len(runs)  # no descriptive_seeds
    assert est["fits"] is (est["hours"] <= 8.0)
    assert not rr.estimate(_plan(budget_hours=0.1), runs, seconds, TWO, grids, 15.0)["fits"]
    with pytest.raises(CriteriaError, match="FedSAM"):
        rr.estimate(plan, runs, {"fedavg": 1.0}, TWO, grids, 15.0)


def test_the_committed_plan_names_registered_methods_six_seeds_and_a_candidate():
    from fedlab.algorithms import algorithm_names
    from lab.regime.pilot import REGISTERED_LATER, load_criteria

    plan = rr.load_plan()
    assert len(plan["seeds"]) >= 6 and plan["regime"] in load_criteria().candidates
    claims = yaml.safe_load(rr.CLAIMS_FILE.read_text())["claims"]
    runs = rr.plan_runs(plan, claims, list(algorithm_names()))
    excluded = {m for fam in plan["families"] for m in fam.get("exclude", ())}
    assert excluded <= set(algorithm_names()) and REGISTERED_LATER <= set(algorithm_names())
    # 'methods: all' is the registry the plan read: the methods registered later are left out in code
    assert {r.method for r in runs if r.split == "dirichlet-0.1"} == set(algorithm_names()) - excluded - REGISTERED_LATER


def test_the_rerun_federation_is_the_regime_as_stage_b_ran_it_with_tuning_samples_on_top():
    from lab.regime.pilot import build_config, load_criteria

    criteria = load_criteria()
    plan = rr.load_plan()
    cand = criteria.candidates[plan["regime"]]
    run = rr.federation(plan, criteria, "dirichlet-0.1")
    stage_b = build_config(criteria, "B", plan["regime"], "dir0.1", "fedavg", {}, 0)
    same = {k: v for k, v in stage_b.hashed_fields().items() if k not in ("partition_seed", "name")}
    assert {k: run.hashed_fields()[k] for k in same} == same  # only the partition seed is the rerun's own
    tuning = rr.federation(plan, criteria, "dirichlet-0.1", tuning=True)
    proto = rr.tuning_protocol(plan, criteria)
    assert tuning.train_size - proto["validation_size"] == cand.train_size == run.train_size
    assert proto["rounds"] == round(cand.rounds * plan["tuning"]["rounds_fraction"])
    assert rr.federation(plan, criteria, "pathological-3").classes_per_client == 3
    with pytest.raises(CriteriaError, match="split 'shards-2'"):
        rr.federation(plan, criteria, "shards-2")


def test_the_rerun_starts_only_in_the_regime_stage_b_named(tmp_path):
    plan = {"regime": "M10k-K50-lr01"}
    side = tmp_path / "stage_b.json"
    with pytest.raises(CriteriaError, match="no stage-B outcome"):
        rr.check_outcome(plan, side)
    for outcome, regime, ok in [("regime", "M10k-K50-lr01", True), ("if_none", "M10k-K50-lr01", True),
                                ("regime", "M5k-K50", False), ("undecided", None, False)]:
        side.write_text(json.dumps({"parameters": {"outcome": outcome, "regime": regime}}))
        if ok:
            rr.check_outcome(plan, side)
        else:
            with pytest.raises(CriteriaError, match="runs in the regime the outcome names"):
                rr.check_outcome(plan, side)


def test_a_claim_arm_at_the_methods_untuned_defaults_is_the_tuned_run():
    claims = [{"id": "d", "setting": {}, "left": {"algorithm": "fedsam", "params": {"eps": 1e-12}},
               "right": {"algorithm": "fedsam", "params": {"rho": 0.1}}},
              {"id": "e", "setting": {}, "left": {"algorithm": "fedvssam", "params": {"lf": True}}, "right": {}}]
    defaults = {"fedsam": {"rho": 0.1, "eps": 1e-12}, "fedvssam": {"lf": True}}
    grids = {"fedsam": {"rho": (0.0, 0.1)}, "fedvssam": {"rho": (0.0,), "preset": ("a", "b")}}
    plan = _plan(families=[{"notebook": "10", "label": "all", "methods": "all"}])
    runs = {(r.method, r.params) for r in rr.plan_runs(plan, claims, METHODS, defaults, grids)}
    assert ("fedsam", json.dumps({"eps": 1e-12})) not in runs  # the default of an untuned key: the tuned run
    assert ("fedsam", json.dumps({"rho": 0.1})) in runs  # a tuned key: its own run, whatever the default
    assert ("fedvssam", json.dumps({"lf": True})) in runs  # a preset in the grid may move lf: its own run
    assert len(runs) == len(METHODS) + 2


def test_the_small_step_control_runs_fedsam_at_gamma_l_times_the_regimes_lr():
    from fedlab.algorithms import algorithm_class
    from lab.regime.pilot import load_criteria

    claims = {c["id"]: c for c in yaml.safe_load(rr.CLAIMS_FILE.read_text())["claims"]}
    arm = claims["fedvssam_above_fedsam_small_step"]["right"]
    gamma_l = algorithm_class("fedvssam").resolve_hparams(None, {}).gamma_l
    lr = load_criteria().candidates[rr.load_plan()["regime"]].lr
    assert arm["config"]["lr"] == pytest.approx(gamma_l * lr)


def test_a_tiny_rerun_waits_for_tuning_then_trains_every_seed_resumably(tmp_path, monkeypatch):
    from test_regime import TINY_CRITERIA

    from lab.evidence.records import load_record, record_meta
    from lab.regime.pilot import load_criteria

    monkeypatch.setenv("FEDLAB_RUNS", str(tmp_path / "runs"))
    path = tmp_path / "criteria.yaml"
    path.write_text(TINY_CRITERIA)
    tiny = load_criteria(path)
    plan = {"regime": "tiny", "seeds": [1, 2], "descriptive_seeds": 1, "splits": ["dirichlet-0.1"], "workers": 2,
            "tuning": {"split": "dirichlet-0.1", "rounds_fraction": 1.0, "seeds": 1, "edge_allowance": 0.0},
            "families": [{"notebook": "10", "label": "two", "methods": ["fedavg", "fedsam"], "seeds": "all"}]}
    root = tmp_path / "rerun"
    log = tmp_path / "log"
    with open(log, "w") as out:  # FedSAM has a grid and no tuning file yet: only FedAvg trains
        assert rr.train(plan, tiny, root=root, claims=[], seconds={}, out=out, design=None) == 2
    assert "waiting for tuning: fedsam" in log.read_text()
    rr.tune(plan, tiny, methods=["fedsam"], client_threads=1, root=root, progress=False)
    rho = json.loads((root / "tuning" / "dirichlet-0.1" / "fedsam.json").read_text())["best"]["rho"]
    with open(log, "w") as out:
        assert rr.train(plan, tiny, root=root, claims=[], seconds={}, out=out, design=None) == 2
    done = rr.recorded(root / "records")
    assert sorted(done) == sorted((("dirichlet-0.1", m, "{}", s) for m in ("fedavg", "fedsam") for s in (1, 2)))
    for (split, method, _, seed), key in done.items():
        res = load_record(key, root / "records")
        assert (res.config.seed, res.config.partition_seed, res.config.eval_every) == (seed, seed, 1)
        assert res.config.train_size == tiny.candidates["tiny"].train_size and res.config.parallel_clients == 1
        assert method == "fedavg" or res.config.algorithm_params["rho"] == rho
    with open(log, "w") as out:  # everything recorded: nothing trains again
        assert rr.train(plan, tiny, root=root, claims=[], seconds={}, out=out, design=None) == 0
    # what the records measured: each run's wall time once, and every grid point of the tuning
    got = rr.measured(plan, rr.plan_runs(plan, [], ["fedavg", "fedsam"]), root / "records", root / "tuning")
    walls = [record_meta(key, root / "records")["wall_seconds"] for key in done.values()]
    assert got["10"]["records"] == got["10"]["planned"] == 4 and got["10"]["seconds"] == pytest.approx(sum(walls))
    grid = (root / "tuning" / "dirichlet-0.1" / "fedsam.csv").read_text().splitlines()[1:]
    assert got["tuning"]["records"] == len(grid) > 1 and got["tuning"]["seconds"] > 0


def test_evaluations_beyond_stage_bs_are_costed_per_run_and_seed():
    plan = _plan()
    runs = rr.plan_runs(plan, CLAIMS, METHODS)
    seconds = {"fedavg": 100.0, "fedsam": 200.0}
    base = rr.estimate(plan, runs, seconds, TWO, {}, 15.0)
    more = rr.estimate(plan, runs, seconds, TWO, {}, 15.0, extra_eval_seconds=7.0)
    assert more["total_seconds"] - base["total_seconds"] == pytest.approx(7.0 * sum(r.seeds for r in runs))


def test_an_evaluation_costs_what_stage_bs_evaluated_rounds_took_beyond_the_others():
    import pandas as pd

    from lab.regime.pilot import PilotRecord, load_criteria

    def rec(extra: float, stage: str = "B") -> PilotRecord:
        rounds = range(1, 11)
        metrics = pd.DataFrame({"round": rounds, "test_acc": [0.5 if r % 5 == 0 else None for r in rounds],
                                "wall_seconds": [1.0 + (extra if r % 5 == 0 else 0.0) for r in rounds]})
        return PilotRecord("k", {"stage": stage, "candidate": "X"}, None, "finished", metrics)

    assert rr.evaluation_seconds([rec(0.1), rec(0.3), rec(0.2), rec(9.0, "A")], "X") == pytest.approx(0.2)
    assert rr.evaluation_seconds([], "X") != rr.evaluation_seconds([], "X")  # NaN: nothing to read
    criteria = load_criteria()
    plan = rr.load_plan()
    rounds = criteria.candidates[plan["regime"]].rounds
    assert rr.extra_evaluations(plan, criteria) == rounds - rounds // criteria.fixed["eval_every"]  # every round


def test_the_runs_an_analysis_reads_train_after_every_other_run():
    plan = _plan(analyses={"09": {"models": 2, "seeds": 3, "methods": ["fedavg", "fedsam"]},
                           "02": {"models": 1, "seeds": 6, "methods": ["fedavg"], "splits": ["dirichlet-0.5"]}})
    assert rr.analysed(plan) == {("dirichlet-0.1", "fedavg"), ("dirichlet-0.1", "fedsam"), ("dirichlet-0.5", "fedavg")}
    runs = rr.plan_runs(plan, CLAIMS, METHODS)
    items = rr.seed_runs(plan, runs)
    assert len(items) == sum(r.seeds for r in runs)  # reordered, nothing dropped
    late = [i.run.params == "{}" and (i.run.split, i.run.method) in rr.analysed(plan) for i in items]
    assert any(late) and late == sorted(late)  # every analysed run after every other one
    first = items[:late.index(True)]
    assert [i.seed for i in first] == sorted(i.seed for i in first)  # the others stay seed-major
    assert not late[next(n for n, i in enumerate(items) if i.run.method == "fedsam" and i.run.params != "{}")]
    with pytest.raises(CriteriaError, match="lists no methods"):
        rr.analysed(_plan(analyses={"10_benchmarks": {"models": 1, "seeds": 1, "methods": "notebook"}}))
    only = rr.seed_runs(plan, runs, only=["02"])
    assert only and {(i.run.split, i.run.method, i.run.params) for i in only} == {("dirichlet-0.5", "fedavg", "{}")}
    assert len(only) == next(r.seeds for r in runs if (r.split, r.method, r.params) == ("dirichlet-0.5", "fedavg", "{}"))
    with pytest.raises(CriteriaError, match="--only: 03 is no notebook"):
        rr.seed_runs(plan, runs, only=["03"])


def test_the_committed_plan_defers_notebook_09s_methods():
    plan = rr.load_plan()
    from lab.evidence.protocol import notebook_params

    late = rr.analysed(plan)
    assert {("dirichlet-0.1", m) for m in notebook_params("09_sharpness_and_landscapes")["methods"]} <= late
    assert ("dirichlet-1", "fedsam") in late and ("dirichlet-0.5", "scaffold") not in late


def test_the_rerun_records_are_where_the_notebooks_read_records():
    """A notebook's cpu run is a rerun run (tests/test_regime_params.py): its record must be in records_dir(),
    which run_or_load reads, not in a folder of the rerun's own."""
    from lab.evidence.records import records_dir

    assert rr._records(None) == records_dir()
    assert len(rr.recorded(records_dir())) > 0 and not (rr.RERUN_DIR / "records").exists()


def test_tuning_without_named_methods_tunes_the_methods_the_plan_trains_and_no_other(monkeypatch):
    """`make figures` runs rerun-tune with no --methods; a method the plan leaves out (FedSOL, rerun.yaml's
    reasons) must not be tuned then: its grid points would cost time the plan does not have."""
    from fedlab.algorithms import algorithm_names
    from lab.evidence import protocol
    from lab.regime.pilot import load_criteria

    seen: list = []
    monkeypatch.setattr(protocol, "tune_splits", lambda splits, *, methods, **kw: seen.append(methods) or [])
    plan = rr.load_plan()
    rr.tune(plan, load_criteria(), client_threads=1, progress=False)
    excluded = {m for fam in plan["families"] for m in fam.get("exclude", ())}
    assert excluded and not excluded & set(seen[0])
    assert set(seen[0]) == {r.method for r in rr.the_runs(plan)} and set(seen[0]) < set(algorithm_names())
    rr.tune(plan, load_criteria(), methods=["fedsol"], client_threads=1, progress=False)
    assert seen[1] == ["fedsol"]  # named explicitly, a method is tuned whatever the plan says


def test_the_committed_measurement_is_the_committed_records():
    """figures/regime/rerun_measured.md (estimate against measured wall time) says what the records say."""
    assert rr.MEASURED_FILE.read_text() == rr.measured_text(rr.load_plan()), \
        "stale: python -m lab regime rerun-measured"


def test_claim_arms_leave_out_what_the_plan_does_not_train():
    """A claim adds its arms to the rerun's plan, except a claim declared out of scope, an arm of a method fedlab does
    not implement (``planned``) and an arm of a method registered after the plan (that takes an amendment)."""
    from lab.regime.rerun_plan import claim_arms

    base = {"id": "c", "setting": {"figure": "f", "select": {"partition": "dirichlet", "alpha": 0.1}},
            "left": {"algorithm": "fedsam"}, "right": {"algorithm": "fedavg"}}
    assert sorted(a.method for a in claim_arms([base])) == ["fedavg", "fedsam"]
    assert claim_arms([{**base, "not_testable": {"reason": "its baselines are not implemented"}}]) == []
    assert [a.method for a in claim_arms([{**base, "right": {"algorithm": "pfl", "planned": "outside"}}])] == ["fedsam"]
    assert [a.method for a in claim_arms([{**base, "left": {"algorithm": "fedscar"}}])] == ["fedavg"]
