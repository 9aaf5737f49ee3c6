"""The regime pilot (issue 28): the plan read from the pre-registered criteria, resumable records,
the final metric and the stage-A reading of R1–R5 — on tiny synthetic records, no training."""
from __future__ import annotations

import hashlib
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from lab.regime import analyse as an
from lab.regime.pilot import (CRITERIA_FILE, CriteriaError, PilotError, PilotRecord, PlannedRun, build_plan,
                              final_metric, load_criteria, load_records, rho_arm)


@pytest.fixture(scope="module")
def criteria():
    return load_criteria()


def _metrics(rounds: int, eval_every: int, last: tuple[float, float, float], early: float | None = None) -> pd.DataFrame:
    """Metric rows of a run of ``rounds`` rounds evaluated every ``eval_every``: the last three evaluations
    are ``last`` (in %), the earlier ones ``early`` (default: the first of ``last``)."""
    evals = [r for r in range(1, rounds + 1) if r % eval_every == 0 or r == rounds]
    values = {r: (early if early is not None else last[0]) for r in evals}
    for r, v in zip(evals[-3:], last):
        values[r] = v
    return pd.DataFrame({"round": range(1, rounds + 1),
                         "test_acc": [values[r] / 100 if r in values else np.nan for r in range(1, rounds + 1)],
                         "wall_seconds": [0.5] * rounds})


def _record(run: PlannedRun, criteria, last: tuple[float, float, float], seconds: float = 60.0,
            early: float | None = None, status: str = "finished") -> PilotRecord:
    meta = {**run.meta(criteria), "wall_seconds": seconds, "round_seconds": 0.0}
    metrics = _metrics(run.config.rounds, run.config.eval_every, last, early)
    return PilotRecord(f"{run.algorithm}-{hashlib.sha256(repr(run.run_id).encode()).hexdigest()[:12]}", meta,
                       run.config, status, metrics)


def _complete_stage_a(criteria, candidate: str, score) -> list[PilotRecord]:
    """Synthetic records of every stage-A run of ``candidate``; ``score(run) -> (a, b, c)`` gives each
    run's last three evaluations; dependent arms are planned from the records as they accumulate."""
    records: list[PilotRecord] = []
    while True:
        plan = build_plan(criteria, "A", records, [candidate])
        if not plan.todo:
            assert not plan.pending
            return records
        records += [_record(run, criteria, score(run)) for run in plan.todo]


# --- the plan -----------------------------------------------------------------------------------
def test_stage_a_plan_counts_and_configs_follow_the_file(criteria):
    raw = yaml.safe_load(CRITERIA_FILE.read_text())
    seeds = raw["stages"]["A"]["seeds"]
    plan = build_plan(criteria, "A")
    expected_todo = expected_pending = 0
    for name, spec in raw["candidates"].items():
        grid = raw["stages"]["A"]["cnn_rho_grid"] if spec["model"] == "cnn" else raw["rho_grid"]
        expected_todo += (1 + len(grid) + 1 + len(raw["drift_corrections"])) * len(seeds)
        expected_pending += 1
    assert len(plan.todo) == expected_todo and len(plan.pending) == expected_pending and not plan.done
    assert len({r.run_id for r in plan.todo}) == len(plan.todo)
    hold_out = raw["fixed"]["validation_size"]
    for run in plan.todo:
        spec, cfg = raw["candidates"][run.candidate], run.config
        want = None if spec["train_size"] is None else spec["train_size"] + hold_out
        assert cfg.train_size == want and cfg.validation_size == hold_out
        assert (cfg.model, cfg.local_steps, cfg.lr, cfg.rounds) == (spec["model"], spec["local_steps"], spec["lr"],
                                                                    spec["rounds"])
        for key, value in raw["fixed"].items():
            if key != "validation_size":
                assert getattr(cfg, key) == value, key
        assert cfg.seed == run.seed and run.seed in seeds
        assert cfg.partition == raw["splits"][run.split]["partition"]
        if run.split == "dir0.1":
            assert cfg.alpha == raw["splits"]["dir0.1"]["alpha"]
        assert cfg.algorithm == run.algorithm
        if run.algorithm == "fedsam":
            assert run.arm == rho_arm(cfg.algorithm_params["rho"])
    # the file's first example: train_size null stays null (all of the training set)
    m60 = [r for r in plan.todo if r.candidate == "M60k-K50"]
    assert m60 and all(r.config.train_size is None for r in m60)
    # cheapest first: the cnn candidate's runs come last
    models = [r.config.model for r in plan.todo]
    assert models.index("cnn") > max(i for i, m in enumerate(models) if m == "mlp")


def test_the_cnn_candidate_screens_the_thinned_grid(criteria):
    raw = yaml.safe_load(CRITERIA_FILE.read_text())
    plan = build_plan(criteria, "A", candidates=["C10k-K20"])
    rhos = sorted({r.params["rho"] for r in plan.todo if r.algorithm == "fedsam"})
    assert rhos == sorted(raw["stages"]["A"]["cnn_rho_grid"]) and len(rhos) < len(raw["rho_grid"])
    mlp = build_plan(criteria, "A", candidates=["M10k-K20"])
    assert sorted({r.params["rho"] for r in mlp.todo if r.algorithm == "fedsam"}) == sorted(raw["rho_grid"])


def test_dir_fedsam_arm_waits_for_and_uses_the_iid_argmax(criteria):
    cand, best = "M10k-K20", 0.05

    def score(run):  # FedSAM peaks at ρ = 0.05 in the IID split
        if run.algorithm == "fedsam" and run.split == "iid":
            v = 80.0 - 100 * abs(run.params["rho"] - best)
            return (v, v, v)
        return (78.0, 78.0, 78.0)

    iid = [r for r in build_plan(criteria, "A", [], [cand]).todo if r.split == "iid"]
    partial = [_record(r, criteria, score(r)) for r in iid[:-1]]  # one IID run still missing
    plan = build_plan(criteria, "A", partial, [cand])
    assert [p.arm for p in plan.pending] == ["fedsam@best_iid_rho"]
    assert not [r for r in plan.todo if r.arm == "fedsam@best_iid_rho"]
    records = partial + [_record(iid[-1], criteria, score(iid[-1]))]
    plan = build_plan(criteria, "A", records, [cand])
    dep = [r for r in plan.todo if r.arm == "fedsam@best_iid_rho"]
    assert not plan.pending and len(dep) == len(criteria.seeds("A"))
    assert all(r.split == "dir0.1" and r.params == {"rho": best} and r.config.algorithm_params == {"rho": best}
               for r in dep)
    # the dependent arms are scheduled after the candidate's other runs
    assert plan.todo[-len(dep):] == dep


def test_stage_b_uses_rho_star_and_the_best_drift_correction(criteria):
    cand = "M10k-K20"

    def score(run):
        if run.arm == "feddyn":
            return (83.0, 83.0, 83.0)
        if run.algorithm == "fedsam" and run.split == "iid":
            return (81.0, 81.0, 81.0) if run.params["rho"] == 0.1 else (79.0, 79.0, 79.0)
        return (79.5, 79.5, 79.5)

    records = _complete_stage_a(criteria, cand, score)
    plan = build_plan(criteria, "B", records, [cand])
    raw = yaml.safe_load(CRITERIA_FILE.read_text())
    assert len(plan.todo) == sum(map(len, raw["stages"]["B"]["arms"].values())) * len(raw["stages"]["B"]["seeds"])
    by_arm = {(r.split, r.arm): r for r in plan.todo}
    assert by_arm[("dir0.1", "drift@best")].algorithm == "feddyn"
    assert by_arm[("iid", "fedsam@rho_star")].params == {"rho": 0.1}
    for run in plan.todo:  # stage B: the test set, the candidate's own train_size
        assert run.config.validation_size is None and run.config.train_size == raw["candidates"][cand]["train_size"]


# --- records and resumability -------------------------------------------------------------------
def _write_synthetic(run: PlannedRun, criteria, folder: Path, last=(80.0, 81.0, 82.0)) -> Path:
    """A record of ``run`` written through the lab's record writer, as the pilot writes it (no training)."""
    from fedlab.results import RunResult
    from lab.evidence.records import write_record

    # keyed by its config (Config.hash(), as a result built by hand is): every load re-forms the key from the
    # record's config block (issue 46), so a made-up key would be refused
    key = f"{run.algorithm}-{run.config.hash()}"
    metrics = _metrics(run.config.rounds, run.config.eval_every, last)
    summary = {"status": "finished", "config_hash": key.rsplit("-", 1)[1]}
    result = RunResult(run.config, metrics, None, "finished", folder / "nowhere" / key, summary)
    return write_record(result, folder, meta={**run.meta(criteria), "wall_seconds": 12.5, "round_seconds": 10.0})


def test_a_recorded_run_is_skipped_and_the_stage_resumes(criteria, tmp_path):
    cand = "M10k-K20"
    folder = tmp_path / "records"
    first = build_plan(criteria, "A", [], [cand]).todo
    _write_synthetic(first[0], criteria, folder)
    records = load_records(folder, criteria)
    assert [r.run_id for r in records] == [first[0].run_id] and records[0].seconds == 12.5
    plan = build_plan(criteria, "A", records, [cand])
    assert [r.run_id for r in plan.done] == [first[0].run_id]
    assert first[0].run_id not in {r.run_id for r in plan.todo} and len(plan.todo) == len(first) - 1
    # a stage whose runs are all recorded trains nothing
    for run in first[1:]:
        _write_synthetic(run, criteria, folder)
    while (todo := build_plan(criteria, "A", load_records(folder, criteria), [cand]).todo):
        for run in todo:
            _write_synthetic(run, criteria, folder)
    from lab.regime.pilot import PILOT_FILE
    from lab.study.runner import train
    from lab.study.spec import load_study

    assert train(load_study(PILOT_FILE), stage="A", candidates=[cand], workers=1, records=folder,
                 out=open(tmp_path / "log", "w")) == 0


def test_records_of_another_plan_are_refused(criteria, tmp_path):
    folder = tmp_path / "records"
    run = build_plan(criteria, "A", [], ["M10k-K20"]).todo[0]
    other = PlannedRun(run.stage, run.candidate, run.split, run.arm, run.seed, run.algorithm, run.params,
                       run.config.replace(lr=0.3))
    _write_synthetic(other, criteria, folder)
    with pytest.raises(PilotError, match="differs in: lr|differs in lr"):
        build_plan(criteria, "A", load_records(folder, criteria), ["M10k-K20"])
    changed = tmp_path / "criteria.yaml"
    changed.write_text(CRITERIA_FILE.read_text() + "\n# edited\n")
    with pytest.raises(PilotError, match="another criteria file"):
        load_records(folder, load_criteria(changed))


# --- the final metric ---------------------------------------------------------------------------
def test_final_metric_is_the_mean_of_the_last_three_evaluations_in_percent():
    m = _metrics(20, 5, (70.0, 74.0, 81.0), early=10.0)
    assert final_metric(m, 3) == pytest.approx((70 + 74 + 81) / 3)
    assert final_metric(m, 1) == pytest.approx(81.0)
    # stopped at round 16: the evaluations at rounds 5, 10, 15
    assert final_metric(m, 3, upto_round=16) == pytest.approx((10 + 70 + 74) / 3)
    assert math.isnan(final_metric(m, 3, upto_round=12))  # two evaluations only
    m.loc[m["round"] == 20, "test_acc"] = np.nan  # a missing last evaluation is not one of the last three
    assert final_metric(m, 3) == pytest.approx((10 + 70 + 74) / 3)


# --- the criteria on synthetic records ----------------------------------------------------------
def _scenario(criteria, cand: str, sam_peak: float, gap: float = 7.0, drift_gain: float = 2.0):
    """Every stage-A run of ``cand``: FedAvg 80 % (IID) and 80 − gap (Dir), FedSAM best at ``sam_peak``
    (+1.5 points there, less away from it), SCAFFOLD + drift_gain; seeds differ by a small offset."""

    def score(run):
        jitter = 0.1 * (run.seed - criteria.seeds("A")[0])
        base = 80.0 if run.split == "iid" else 80.0 - gap
        if run.algorithm == "fedsam":
            rho = run.params["rho"]
            v = base + 1.5 - 4 * abs(math.log10(rho + 1e-3) - math.log10(sam_peak + 1e-3))
        elif run.algorithm == "scaffold":
            v = base + drift_gain
        elif run.algorithm in ("feddyn", "fedacg"):
            v = base - 0.5
        else:
            v = base
        return (v + jitter, v + jitter, v + jitter)

    return _complete_stage_a(criteria, cand, score)


def _result(criteria, records, name):
    return next(r for r in an.analyse(criteria, records) if r.name == name)


def test_an_interior_rho_star_with_a_gain_meets_r3_and_qualifies(criteria):
    res = _result(criteria, _scenario(criteria, "M10k-K20", sam_peak=0.05), "M10k-K20")
    assert res.rho_star == 0.05 and res.rho_star_interior is True
    assert res.rho_gain[0.05].mean == pytest.approx(1.5) and res.rho_gain[0.05].n == 2
    assert res.r3() is True
    assert res.gap.mean == pytest.approx(7.0) and res.r1() is True
    assert res.best_drift == "scaffold" and res.drift["scaffold"].mean == pytest.approx(2.0) and res.r2() is True
    assert res.dir_sam_gain.mean == pytest.approx(1.5)
    assert res.qualifies()
    assert set(res.horizon) == {f"{s} {a}" for s, a in an.STAGE_B_ARMS} and res.ranking_stable is True
    assert all(v == pytest.approx(0.0) for v in res.horizon.values())
    assert res.seconds["fedavg"] == 60.0 and math.isfinite(res.rerun_hours)


@pytest.mark.parametrize("peak", [0.5, 0.0])
def test_rho_star_on_the_grid_edge_does_not_meet_r3(criteria, peak):
    res = _result(criteria, _scenario(criteria, "M10k-K20", sam_peak=peak), "M10k-K20")
    assert res.rho_star == peak and res.rho_star_interior is False
    assert res.r3() is False and not res.qualifies()


def test_a_small_gap_or_no_drift_gain_fails_r1_r2(criteria):
    res = _result(criteria, _scenario(criteria, "M10k-K20", sam_peak=0.05, gap=3.0, drift_gain=-1.0), "M10k-K20")
    assert res.gap.mean == pytest.approx(3.0) and res.r1() is False
    assert res.best_drift == "feddyn" and res.r2() is False and not res.qualifies()


def test_a_candidate_without_records_is_undecided_and_the_table_holds_numbers(criteria):
    records = _scenario(criteria, "M10k-K20", sam_peak=0.05)
    results = an.analyse(criteria, records)
    empty = next(r for r in results if r.name == "C10k-K20")
    assert empty.r1() is None and empty.r3() is None and empty.n_records == 0 and not empty.qualifies()
    frame = an.scores_frame(records, criteria)
    table = an.pilot_table(results, frame)
    for col in ("rho", "n", "value", "half_width"):
        assert pd.api.types.is_numeric_dtype(table[col]), col
    row = table[(table.candidate == "M10k-K20") & (table.quantity == "rho_star")]
    assert row.value.item() == 0.05
    text = an.summary_markdown(results, criteria, an.two_gradient_share())
    assert "screening" in text and "stage B" in text and "M10k-K20" in text


def test_horizon_reads_the_score_at_0_8_t(criteria):
    # every arm rose by 4 points after 0.8 T: the stage-A reading of R4 sees the movement
    def score(run):
        base = 80.0 if run.split == "iid" else 72.0
        return (base + (1.0 if run.algorithm == "fedsam" else 0.0),) * 3

    records = []
    for rec in _complete_stage_a(criteria, "M10k-K20", score):
        last = tuple(100 * rec.metrics.test_acc.dropna().to_numpy()[-3:])
        records.append(PilotRecord(rec.key, rec.meta, rec.config, rec.status,
                                   _metrics(rec.config.rounds, rec.config.eval_every, last, early=last[0] - 4.0)))
    res = _result(criteria, records, "M10k-K20")
    assert all(v == pytest.approx(4.0) for v in res.horizon.values())


# --- bad criteria files -------------------------------------------------------------------------
@pytest.mark.parametrize("edit, field", [
    (lambda d: d["candidates"]["M10k-K20"].pop("lr"), "candidates.M10k-K20.lr"),
    (lambda d: d["stages"]["A"]["arms"]["iid"].append("fedsam@nonsense"), "fedsam@nonsense"),
    (lambda d: d.pop("splits"), "splits"),
    (lambda d: d.__setitem__("rho_grid", [0.1, -0.2]), "rho_grid"),
    (lambda d: d["stages"]["A"].__setitem__("seeds", []), "stages.A.seeds"),
    (lambda d: d["fixed"].__setitem__("batch_size", "many"), "batch_size"),
])
def test_a_bad_criteria_file_is_refused_naming_the_field(tmp_path, edit, field):
    data = yaml.safe_load(CRITERIA_FILE.read_text())
    edit(data)
    path = tmp_path / "criteria.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(CriteriaError, match=re.escape(str(path))) as err:
        build_plan(load_criteria(path), "A")
    assert field in str(err.value)


def test_a_criteria_file_that_is_not_yaml_is_refused(tmp_path):
    path = tmp_path / "criteria.yaml"
    path.write_text("fixed: [unclosed\n")
    with pytest.raises(CriteriaError, match="not YAML"):
        load_criteria(path)


def test_committed_pilot_records_match_their_manifest():
    from lab.evidence.integrity import problems
    from lab.repro import FIGURES_DIR

    root = FIGURES_DIR / "regime"
    if not (root / "records").is_dir():
        pytest.skip("no pilot records committed yet")
    assert problems(root) == {"changed": [], "unlisted": [], "missing": []}


def test_analyse_writes_table_figure_and_summary_from_records_on_disk(criteria, tmp_path):
    folder = tmp_path / "records"
    for rec in _scenario(criteria, "M10k-K20", sam_peak=0.05):
        plan_run = PlannedRun(rec.meta["stage"], rec.meta["candidate"], rec.meta["split"], rec.meta["arm"],
                              int(rec.meta["seed"]), rec.meta["algorithm"], rec.meta["params"], rec.config)
        _write_synthetic(plan_run, criteria, folder, last=tuple(100 * rec.metrics.test_acc.dropna().to_numpy()[-3:]))
    out = tmp_path / "regime"
    paths = an.write_outputs(criteria, folder, out)
    assert {p.name for p in paths.values()} >= {"pilot_table.csv", "pilot.png", "pilot.pdf", "pilot.json",
                                                   "pilot.csv", "pilot.md"}
    table = pd.read_csv(out / "pilot_table.csv")
    gap = table[(table.candidate == "M10k-K20") & (table.quantity == "fedavg_iid_minus_dir")]
    assert gap.value.item() == pytest.approx(7.0) and gap.n.item() == 2
    text = (out / "pilot.md").read_text()
    assert "M10k-K20 (" in text.split("## Selection")[1]  # the one complete, qualifying candidate is named
    import json

    meta = json.loads((out / "pilot.json").read_text())
    assert meta["command"] == "python -m lab regime analyse" and len(meta["records"]) == 26


def test_the_lab_command_line_plans_a_stage_without_training(tmp_path, monkeypatch, capsys):
    from lab.cli import main

    monkeypatch.setenv("FEDLAB_REGIME_RECORDS", str(tmp_path / "records"))
    assert main(["regime", "pilot", "--stage", "A", "--candidate", "C10k-K20", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "stage A: 0 recorded, 16 to train, 2 waiting" in out and "estimated wall time" in out
    assert not (tmp_path / "records").exists()
    assert main(["regime", "pilot", "--stage", "B", "--dry-run"]) == 2  # stage B names its candidate
    assert "--candidate" in capsys.readouterr().err
    assert main(["regime", "pilot", "--candidate", "nope", "--dry-run"]) == 2
    assert "nope" in capsys.readouterr().err


TINY_CRITERIA = """
fixed: {dataset: digits, n_clients: 6, participation: 0.5, batch_size: 8, lr_schedule: constant,
        weight_decay: 0.001, eval_every: 1, validation_size: 120, parallel_clients: 1}
candidates:
  tiny: {model: mlp, train_size: 600, local_steps: 2, lr: 0.1, rounds: 3}
splits:
  iid: {partition: iid}
  dir0.1: {partition: dirichlet, alpha: 0.1}
rho_grid: [0.0, 0.1]
drift_corrections: [scaffold]
stages:
  A:
    seeds: [1]
    arms: {iid: [fedavg, "fedsam@rho_grid"], dir0.1: [fedavg, scaffold, "fedsam@best_iid_rho"]}
  B:
    seeds: [2]
    arms: {iid: [fedavg, "fedsam@rho_star"], dir0.1: [fedavg, "drift@best", "fedsam@rho_star"]}
metric: {name: accuracy, last_k_evaluations: 3, percent: true}
"""
TINY_PILOT = "study: regime-pilot-issue28\nkind: staged\ncriteria: criteria.yaml\n"
"""A staged study file of the tiny criteria beside it (no amendment)."""


def test_a_tiny_stage_trains_on_two_workers_records_every_run_and_resumes(tmp_path, monkeypatch):
    import subprocess

    monkeypatch.setenv("FEDLAB_RUNS", str(tmp_path / "runs"))
    from lab.study.runner import train
    from lab.study.spec import load_study

    (tmp_path / "criteria.yaml").write_text(TINY_CRITERIA)
    (tmp_path / "pilot.yaml").write_text(TINY_PILOT)
    for args in (["init", "-q"], ["add", "criteria.yaml", "pilot.yaml"],  # a stage trains only committed files
                 ["-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", "register"]):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)
    study = load_study(tmp_path / "pilot.yaml")
    tiny = study.criteria
    folder = tmp_path / "records"
    log = tmp_path / "log"
    with open(log, "w") as out:
        assert train(study, stage="A", workers=2, records=folder, out=out, repository=tmp_path) == 6
    records = load_records(folder, tiny)
    assert sorted(r.meta["arm"] for r in records) == sorted(
        ["fedavg", "fedsam@rho=0", "fedsam@rho=0.1", "fedavg", "scaffold", "fedsam@best_iid_rho"])
    scores = {r.run_id: an.record_score(r, 3) for r in records}
    iid = {rho: scores[("A", "tiny", "iid", rho_arm(rho), 1)] for rho in (0.0, 0.1)}
    best = max(iid, key=lambda r: (iid[r], -r))
    dep = next(r for r in records if r.meta["arm"] == "fedsam@best_iid_rho")
    assert dep.config.algorithm_params["rho"] == best and dep.config.partition == "dirichlet"
    assert all(r.status == "finished" and r.seconds > 0 and len(r.metrics) == 3 for r in records)
    assert all(r.config.train_size == 720 and r.config.validation_size == 120 for r in records)
    text = log.read_text()
    assert "6/6 done" in text and "ETA" in text
    with open(log, "w") as out:  # everything recorded: nothing is trained again
        assert train(study, stage="A", workers=2, records=folder, out=out, repository=tmp_path) == 0


# --- stage B: the decisions (lab.regime.decide) -------------------------------------------------
from lab.regime import decide as dc  # noqa: E402

SMALL = (0.03, -0.03, 0.02, -0.02, 0.01, -0.01)  # mean 0: a tight paired interval around the intended mean
WIDE = (10.0, -10.0, 9.0, -9.0, 8.0, -8.0)  # mean 0: an interval that straddles any small mean
R3_NOISE = (0.3, -0.3, 0.2, -0.2, 0.1, -0.1)  # R3's half-width ≈ 0.24 (t_{0.975,5} · s / √6)


def _stage_b(criteria, stage_a, cand, *, gap=7.0, gap_noise=SMALL, drift=1.0, drift_noise=SMALL, sam=1.0,
             sam_noise=R3_NOISE, move=0.1, moves=None, drop=(), diverge=()):
    """Stage-B records of ``cand`` on top of ``stage_a``, per seed s (index i): FedAvg IID b_i = 80 + 0.3 i,
    FedAvg Dir b_i − gap + gap_noise_i, drift@best Dir FedAvg + drift + drift_noise_i, FedSAM@ρ* IID
    b_i + sam + sam_noise_i, FedSAM@ρ* Dir FedAvg Dir + 0.5; every run scored ``move`` lower at 0.8 T
    (``moves``: per (split, arm)). ``drop``/``diverge``: (split, arm, seed) left out / recorded diverged."""
    moves = moves or {}
    plan = build_plan(criteria, "B", stage_a, [cand])
    assert not plan.pending and len(plan.todo) == 30
    out = []
    for run in plan.todo:
        i = criteria.seeds("B").index(run.seed)
        base = 80.0 + 0.3 * i
        dir_avg = base - gap + gap_noise[i]
        v = {("iid", "fedavg"): base, ("iid", "fedsam@rho_star"): base + sam + sam_noise[i],
             ("dir0.1", "fedavg"): dir_avg, ("dir0.1", "drift@best"): dir_avg + drift + drift_noise[i],
             ("dir0.1", "fedsam@rho_star"): dir_avg + 0.5}[(run.split, run.arm)]
        if (run.split, run.arm, run.seed) in drop:
            continue
        status = "diverged" if (run.split, run.arm, run.seed) in diverge else "finished"
        out.append(_record(run, criteria, (v, v, v), early=v - moves.get((run.split, run.arm), move), status=status))
    return stage_a + out


@pytest.fixture(scope="module")
def stage_a_interior(criteria):
    return _scenario(criteria, "M10k-K20", sam_peak=0.05)  # ρ* = 0.05 interior, SCAFFOLD the best drift


@pytest.fixture(scope="module")
def stage_a_edge(criteria):
    return _scenario(criteria, "M10k-K20", sam_peak=0.5)  # ρ* = 0.5, the grid's largest


def _decide(criteria, records):
    return dc.decide(criteria, records, "M10k-K20")


def test_stage_b_meets_r1_to_r5_and_names_the_regime(criteria, stage_a_interior):
    d = _decide(criteria, _stage_b(criteria, stage_a_interior, "M10k-K20"))
    assert (d.n_records, d.n_planned, d.rho_star, d.best_drift) == (30, 30, 0.05, "scaffold")
    assert d.gap.mean == pytest.approx(7.0) and d.gap.n == 6
    assert d.drift_gain.mean == pytest.approx(1.0) and d.sam_gain.mean == pytest.approx(1.0)
    assert d.sam_gain_dir.mean == pytest.approx(0.5)
    assert d.sam_gain.half_width == pytest.approx(
        2.5706 * np.std(R3_NOISE, ddof=1) / math.sqrt(6), rel=1e-3)
    assert all(t - e == pytest.approx(0.1) for t, e, _ in d.horizon().values())
    assert d.hours_rule == pytest.approx(510 * 60.0 / 2 / 3600)  # stage-A seconds of the synthetic records
    assert {k: v.met for k, v in d.verdicts().items()} == dict.fromkeys(["R1", "R2", "R3", "R4", "R5"], True)
    out = dc.selection_outcome([d])
    assert (out.kind, out.regime) == ("regime", "M10k-K20")


@pytest.mark.parametrize("gap, noise, met", [(5.1, SMALL, True), (4.9, SMALL, False), (6.0, WIDE, False)])
def test_r1_needs_a_mean_gap_of_five_and_a_lower_end_above_zero(criteria, stage_a_interior, gap, noise, met):
    d = _decide(criteria, _stage_b(criteria, stage_a_interior, "M10k-K20", gap=gap, gap_noise=noise))
    assert d.gap.mean == pytest.approx(gap)
    assert (d.gap.low > 0) is (noise is SMALL)
    assert d.r1().met is met


@pytest.mark.parametrize("gain, noise, met", [(0.5, SMALL, True), (0.5, WIDE, False), (-0.5, SMALL, False)])
def test_r2_needs_the_drift_interval_above_zero(criteria, stage_a_interior, gain, noise, met):
    d = _decide(criteria, _stage_b(criteria, stage_a_interior, "M10k-K20", drift=gain, drift_noise=noise))
    assert d.drift_gain.mean == pytest.approx(gain) and d.r2().met is met


@pytest.mark.parametrize("gain, noise, met", [(0.3, SMALL, True), (0.3, WIDE, False), (-0.3, SMALL, False)])
def test_r3_needs_the_sam_interval_above_zero(criteria, stage_a_interior, gain, noise, met):
    d = _decide(criteria, _stage_b(criteria, stage_a_interior, "M10k-K20", sam=gain, sam_noise=noise))
    assert d.sam_gain.mean == pytest.approx(gain) and d.r3().met is met


def test_r3_fails_with_rho_star_on_the_edge_whatever_the_interval_and_if_none_follows(criteria, stage_a_edge):
    d = _decide(criteria, _stage_b(criteria, stage_a_edge, "M10k-K20", sam=3.0, sam_noise=SMALL))
    assert d.rho_star == 0.5 and d.rho_star_interior is False
    assert d.sam_gain.low > 0 and d.r3().met is False and "edge" in d.r3().why
    assert all(d.verdicts()[k].met for k in ("R1", "R2", "R5"))
    # R4 against R3's (tight) half-width: every arm moves less
    d = _decide(criteria, _stage_b(criteria, stage_a_edge, "M10k-K20", sam=3.0, sam_noise=R3_NOISE, move=0.05))
    assert d.r4().met is True
    out = dc.selection_outcome([d])
    assert (out.kind, out.regime) == ("if_none", "M10k-K20")
    assert "not testable at cpu scale" in out.text and "R1, R2, R4 and R5" in out.text


def test_if_none_without_a_candidate_meeting_r1_r2_r4_r5_names_no_rerun_candidate(criteria, stage_a_edge):
    d = _decide(criteria, _stage_b(criteria, stage_a_edge, "M10k-K20", gap=3.0, move=0.05))
    assert d.r1().met is False and d.r3().met is False
    out = dc.selection_outcome([d])
    assert out.kind == "if_none" and out.regime is None and "fails R1" in out.text


def test_r4_detects_a_move_above_r3_half_width_and_a_ranking_change(criteria, stage_a_interior):
    d = _decide(criteria, _stage_b(criteria, stage_a_interior, "M10k-K20", moves={("dir0.1", "fedavg"): 0.5}))
    assert d.sam_gain.half_width < 0.5 and d.rankings()[0] == d.rankings()[1]
    assert d.r4().met is False and "dir0.1 fedavg" in d.r4().why
    # FedSAM at Dir 0.1 is 0.5 above FedAvg at T; 0.2 below it at 0.8 T (moves 0.7 and 0): the order flips
    d = _decide(criteria, _stage_b(criteria, stage_a_interior, "M10k-K20", sam_noise=WIDE, sam=20.0,
                                   moves={("dir0.1", "fedsam@rho_star"): 0.7, ("dir0.1", "fedavg"): 0.0}))
    rank_t, rank_08 = d.rankings()
    assert rank_t != rank_08 and max(abs(t - e) for t, e, _ in d.horizon().values()) < d.sam_gain.half_width
    assert d.r4().met is False and "ranking" in d.r4().why


def test_r5_alone_failing_is_said_so(criteria, stage_a_interior):
    slow = [PilotRecord(r.key, {**r.meta, "wall_seconds": 200.0}, r.config, r.status, r.metrics)
            for r in stage_a_interior]
    d = _decide(criteria, _stage_b(criteria, slow, "M10k-K20"))
    assert d.hours_rule == pytest.approx(510 * 200.0 / 2 / 3600) and d.r5().met is False
    assert [k for k, v in d.verdicts().items() if not v.met] == ["R5"]
    out = dc.selection_outcome([d])
    assert out.kind == "none" and out.regime is None and "R5 alone fails" in out.text


def test_missing_or_diverged_stage_b_runs_leave_the_criteria_undecided(criteria, stage_a_interior, stage_a_edge):
    d = _decide(criteria, _stage_b(criteria, stage_a_interior, "M10k-K20", drop={("iid", "fedavg", 205)}))
    assert d.n_records == 29 and d.gap.n == 5  # the interval is shown, the verdict waits
    assert d.r1().word == "undecided (runs missing)" and d.r3().met is None and d.r4().met is None
    assert d.r2().met is True  # its arms are complete
    out = dc.selection_outcome([d])
    assert out.kind == "undecided" and out.text.startswith("undecided (runs missing)") and "29/30" in out.text
    d = _decide(criteria, _stage_b(criteria, stage_a_interior, "M10k-K20", diverge={("dir0.1", "drift@best", 200)}))
    assert d.r2().word == "undecided (diverged run)" and d.r1().met is True
    # an edge ρ* decides R3 before stage B ends: the undecided outcome already says if_none applies
    d = _decide(criteria, _stage_b(criteria, stage_a_edge, "M10k-K20", drop={("iid", "fedavg", 205)}))
    out = dc.selection_outcome([d])
    assert out.kind == "undecided" and "if_none" in out.text and "not testable at cpu scale" in out.text


def test_decide_writes_markdown_csv_and_figure_from_records_on_disk(criteria, stage_a_interior, tmp_path,
                                                                    monkeypatch, capsys):
    folder = tmp_path / "records"
    for rec in _stage_b(criteria, stage_a_interior, "M10k-K20", drop={("dir0.1", "fedavg", 203)}):
        run = PlannedRun(rec.meta["stage"], rec.meta["candidate"], rec.meta["split"], rec.meta["arm"],
                         int(rec.meta["seed"]), rec.meta["algorithm"], rec.meta["params"], rec.config)
        _write_synthetic(run, criteria, folder, last=tuple(100 * rec.metrics.test_acc.dropna().to_numpy()[-3:]))
    monkeypatch.setenv("FEDLAB_REGIME_RECORDS", str(folder))
    monkeypatch.setattr(dc, "FIGURES_DIR", tmp_path / "figures")
    from lab.cli import main

    assert main(["regime", "decide", "--candidate", "nope"]) == 2 and "nope" in capsys.readouterr().err
    assert main(["regime", "decide"]) == 0
    printed = capsys.readouterr().out
    assert "M10k-K20: 29/30 stage-B runs recorded" in printed and "outcome: undecided (runs missing)" in printed
    out = tmp_path / "figures" / "regime"
    assert {p.name for p in out.iterdir()} >= {"stage_b.md", "stage_b.csv", "stage_b.png", "stage_b.pdf",
                                               "stage_b.json"}
    table = pd.read_csv(out / "stage_b.csv")
    r1 = table[(table.panel == "decision") & (table.criterion == "R1")]
    kept = [SMALL[i] for i in range(6) if i != 3]  # seed 203 (index 3) of Dir-0.1 FedAvg is missing
    assert r1.value.item() == pytest.approx(7.0 - np.mean(kept), abs=1e-4)  # the csv keeps 6 digits
    assert r1.n.item() == 5 and math.isnan(r1.met.item())
    r2 = table[(table.panel == "decision") & (table.criterion == "R2")]
    assert math.isnan(r2.met.item()) and r2.arm.item() == "scaffold"  # it pairs with the incomplete arm
    r3 = table[(table.panel == "decision") & (table.criterion == "R3")]
    assert r3.met.item() == 1.0 and r3.n.item() == 6 and r3.rho.item() == 0.05  # its IID arms are complete
    assert len(table[(table.panel == "seeds") & (table.criterion == "R3")]) == 6
    text = (out / "stage_b.md").read_text()
    assert "undecided (runs missing)" in text and "Not the rule" in text and "| R5 |" in text


def test_the_screening_note_names_candidates_stage_a_sent_on_but_stage_b_lacks(criteria, stage_a_interior):
    records = _stage_b(criteria, stage_a_interior, "M10k-K20")
    screened = an.analyse(criteria, records)
    note = dc.screening_note([dc.decide(criteria, records, "M10k-K20")], screened)
    assert "M10k-K20: meets R1–R3 on its stage-A point estimates; decided here" in note
    assert "C10k-K20: stage A incomplete (0/18)" in note
    assert "M5k-K50: meets" not in note and "M5k-K50: stage A incomplete" in note


# --- amendment 1: stage B's order, its fixed fields and the outcome it decides --------------------
from lab.regime.amendment import AMENDMENT_FILE  # noqa: E402


def test_the_amendment_amends_these_criteria_and_changes_stage_b_only(criteria):
    am = criteria.amendment
    assert am is not None and am.path == AMENDMENT_FILE
    assert yaml.safe_load(AMENDMENT_FILE.read_text())["amends"]["sha256"] == criteria.digest
    assert am.order == ("M10k-K50-lr01", "M5k-K50", "M10k-K20") and am.require == (("R2", "R3"), ("R3",))
    a = build_plan(criteria, "A", [], ["M10k-K50-lr01"]).todo[0]
    stage_a = _scenario(criteria, "M10k-K50-lr01", sam_peak=0.05)
    b = build_plan(criteria, "B", stage_a, ["M10k-K50-lr01"]).todo[0]
    assert a.config.parallel_clients == "auto" and b.config.parallel_clients == 1
    assert "amendment_sha256" not in a.meta(criteria) and b.meta(criteria)["amendment_sha256"] == am.digest
    assert load_criteria(CRITERIA_FILE).amendment.digest == am.digest  # the default file is read by path too


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["amends"].update(sha256="0" * 64), "amends.sha256"),
    (lambda d: d["stage_b"].update(order=["M10k-K50-lr01", "nope"]), "stage_b.order"),
    (lambda d: d["stage_b"].update(order=["M5k-K50", "M5k-K50"]), "stage_b.order"),
    (lambda d: d["stage_b"]["fixed"].update(parallel_clientz=1), "stage_b.fixed"),
    (lambda d: d["outcome"].update(require=[["R2", "R9"]]), "outcome.require"),
    (lambda d: d["outcome"].update(require="R3"), "outcome.require"),
])
def test_a_bad_amendment_is_refused_naming_the_field(tmp_path, edit, field):
    raw = yaml.safe_load(AMENDMENT_FILE.read_text())
    edit(raw)
    path = tmp_path / "amendment.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(CriteriaError, match=re.escape(field)):
        load_criteria(CRITERIA_FILE, amendment=path)


def _amended(criteria, **per_candidate):
    """Decisions of the candidates named (each: the stage-B keyword arguments of :func:`_stage_b`) on an
    interior-ρ* stage A, and the stage-A screen with M60k-K50 (R1 and R2 met, ρ* = 0)."""
    records = _scenario(criteria, "M60k-K50", sam_peak=0.0)
    decisions = []
    for cand, kwargs in per_candidate.items():
        mine = _stage_b(criteria, _scenario(criteria, cand, sam_peak=0.05), cand, **kwargs)
        records += mine
        decisions.append(dc.decide(criteria, mine, cand))
    return decisions, an.analyse(criteria, records)


def test_the_amended_regime_is_the_first_of_the_order_meeting_r2_and_r3_and_says_what_it_misses(criteria):
    decisions, screened = _amended(criteria, **{"M10k-K50-lr01": {"gap": 3.0}})
    out = dc.amended_outcome(decisions, criteria.amendment, screened)
    assert (out.kind, out.regime) == ("regime", "M10k-K50-lr01")  # M5k-K50 need not run
    assert "meets R2, R3" in out.text and "R1 (not met)" in out.text
    # the first misses R3: the second decides, and until it has run the outcome waits for it by name
    decisions, screened = _amended(criteria, **{"M10k-K50-lr01": {"gap": 3.0, "sam": 0.0}})
    out = dc.amended_outcome(decisions, criteria.amendment, screened)
    assert out.kind == "undecided" and "M5k-K50" in out.text and "--candidate M5k-K50" in out.text
    decisions, screened = _amended(criteria, **{"M10k-K50-lr01": {"sam": 0.0}, "M5k-K50": {"gap": 4.0}})
    out = dc.amended_outcome(decisions, criteria.amendment, screened)
    assert (out.kind, out.regime) == ("regime", "M5k-K50")
    # R3 without R2 anywhere: the second tier names the first candidate meeting R3
    decisions, screened = _amended(criteria, **{"M10k-K50-lr01": {"drift": 0.0, "drift_noise": WIDE},
                                                "M5k-K50": {"drift": 0.0, "drift_noise": WIDE, "sam": 0.0},
                                                "M10k-K20": {"drift": 0.0, "drift_noise": WIDE}})
    out = dc.amended_outcome(decisions, criteria.amendment, screened)
    assert (out.kind, out.regime) == ("regime", "M10k-K50-lr01") and "meets R3" in out.text \
        and "R2 (not met)" in out.text


def test_no_r3_in_the_amended_order_applies_if_none_in_the_cheapest_r1_r2_candidate(criteria):
    decisions, screened = _amended(criteria, **{c: {"sam": 0.0} for c in ("M10k-K50-lr01", "M5k-K50", "M10k-K20")})
    assert all(d.r3().met is False for d in decisions)
    out = dc.amended_outcome(decisions, criteria.amendment, screened)
    assert out.kind == "if_none" and "not testable at cpu scale" in out.text
    assert out.regime == min((r for r in screened if r.r1() and r.r2()), key=lambda r: r.rerun_hours).name


def test_stage_b_refuses_a_candidate_outside_the_amended_order(capsys):
    from lab.cli import main

    assert main(["regime", "pilot", "--stage", "B", "--candidate", "C10k-K20", "--dry-run"]) == 2
    assert "amendment1.yaml" in capsys.readouterr().err
