"""Distinct models only (issue 41, item 4) and accuracy from the record (item 5), on synthetic runs.

* :func:`lab.evidence.validity.degenerate_arms` classifies arms by the claims' rule, over runs in memory;
* a ``spearman`` finding with ``distinct`` leaves a degenerate arm's rows out (its models are FedAvg's again);
* :func:`lab.evidence.records.recorded` returns the committed record of a run, not a retrained copy.

Exact comparisons throughout (classifications, counts; the Spearman value against scipy on the same rows)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from scipy import stats

import fedlab
from fedlab.results import RunResult
from lab.evidence.integrity import rerecord
from lab.evidence.findings import Finding, evaluate_findings
from lab.evidence.records import recorded, write_record
from lab.evidence.validity import RunPool, degenerate_arms

SEEDS = range(5)


def _run(algorithm: str, seed: int, curve: list[float], **params) -> RunResult:
    cfg = fedlab.Config(algorithm=algorithm, algorithm_params=params, dataset="digits", rounds=5, seed=seed,
                        eval_every=1)
    metrics = pd.DataFrame({"round": range(1, 6), "test_acc": curve, "train_loss": [1.0, 0.8, 0.6, 0.5, 0.4]})
    h = cfg.hash()
    return RunResult(cfg, metrics, None, "finished", Path(f"{algorithm}-{h}"),  # type: ignore[arg-type]
                     {"status": "finished", "config_hash": h, "n_params": 10, "n_classes": 10})


def _curve(seed: int, shift: float = 0.0) -> list[float]:
    return [0.1, 0.3, 0.5, 0.6 + shift, 0.70 + 0.01 * seed + shift]


def _arms() -> dict[str, list[RunResult]]:
    return {"fedavg": [_run("fedavg", s, _curve(s)) for s in SEEDS],
            # declared identity (ρ = 1, α = 1 is FedAvg) and the same floats: in disguise
            "fedswa": [_run("fedswa", s, _curve(s), rho=1.0, alpha=1.0) for s in SEEDS],
            # no identity, but FedAvg's accuracy bit for bit at every seed: in disguise too
            "fedgamma": [_run("fedgamma", s, _curve(s)) for s in SEEDS],
            # a method of its own
            "fedsam": [_run("fedsam", s, _curve(s, 0.02), rho=0.05) for s in SEEDS]}


def test_degenerate_arms_names_the_arms_in_disguise_only():
    found = degenerate_arms(_arms())
    assert sorted(found) == ["fedgamma", "fedswa"]
    assert "where it is FedAvg" in found["fedswa"] and "bit for bit at 5 of 5 seeds" in found["fedgamma"]


def test_a_copy_at_some_seeds_only_is_not_degenerate():
    arms = _arms()
    arms["fedgamma"][2] = _run("fedgamma", 2, _curve(2, 0.001))  # one seed differs: a method of its own
    assert sorted(degenerate_arms(arms)) == ["fedswa"]
    # the references come from the pool given, not from the arms: without FedAvg's runs nothing is undeclared-equal
    pool = RunPool(r for name, rs in arms.items() if name != "fedavg" for r in rs)
    assert sorted(degenerate_arms({"fedgamma": arms["fedgamma"]}, pool)) == []


def _figure(folder: Path, arms: dict[str, list[RunResult]], table: pd.DataFrame) -> None:
    runs = [r for rs in arms.values() for r in rs]
    for r in runs:
        write_record(r, folder / "records")
    (folder / "fig.json").write_text(json.dumps({"figure": "fig", "records": [r.run_dir.name for r in runs]}))
    table.to_csv(folder / "fig.csv", index=False)
    rerecord([folder / "fig.json", folder / "fig.csv"], folder)  # evidence, as save_figure would list it


def test_a_spearman_finding_with_distinct_leaves_the_degenerate_arms_out(tmp_path):
    arms = _arms()
    # per-seed curvature and accuracy: the disguised arms repeat FedAvg's points (they are its models)
    rows = [{"panel": "per_seed", "method": name, "seed": r.config.seed, "x": float(i % 7) + 0.1 * r.config.seed,
             "y": float(r.metrics["test_acc"].iloc[-1])}
            for i, (name, rs) in enumerate(arms.items()) for r in rs]
    _figure(tmp_path, arms, pd.DataFrame(rows))
    spec = {"id": "f", "question": "q", "type": "spearman", "figure": "fig", "where": {"panel": "per_seed"},
            "x": "x", "y": "y"}
    (tmp_path / "findings.yaml").write_text(json.dumps({"findings": [spec, {**spec, "id": "g", "distinct": "method"}]}))
    everything, distinct = evaluate_findings(figures_dir=tmp_path)
    table = pd.DataFrame(rows)
    kept = table[table["method"].isin(["fedavg", "fedsam"])]
    assert everything.rows[0]["n"] == len(table) == 20
    assert distinct.rows[0]["n"] == len(kept) == 10 and distinct.rows[0]["degenerate"] == ["fedgamma", "fedswa"]
    assert distinct.rows[0]["spearman"] == pytest.approx(float(stats.spearmanr(kept["x"], kept["y"]).statistic),
                                                         abs=1e-12)
    assert "10 of degenerate arms excluded (FedGAMMA, FedSWA" in distinct.numbers


def test_recorded_returns_the_committed_record_not_the_retrained_run(tmp_path):
    first = _run("fedavg", 0, _curve(0))
    write_record(first, tmp_path)
    retrained = RunResult(first.config, first.metrics.assign(test_acc=first.metrics["test_acc"] + 0.004), None,
                          "finished", first.run_dir, dict(first.summary))
    got = recorded(retrained, tmp_path)
    assert got.metrics["test_acc"].tolist() == first.metrics["test_acc"].tolist()
    alone = _run("fedavg", 1, _curve(1))  # no record: the run is its own evidence
    assert recorded(alone, tmp_path) is alone


def test_the_finding_spec_keeps_distinct():
    f = Finding.from_dict({"id": "f", "question": "q", "type": "spearman", "figure": "fig", "x": "x", "y": "y",
                           "distinct": "method"})
    assert f.spec["distinct"] == "method"
