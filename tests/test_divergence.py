"""The divergence rule (lab.evidence.divergence): each branch on synthetic metrics, and the committed rerun's
records — every FedGF run at Dirichlet 0.1 diverged (five of six are labelled ``finished``), no FedAvg or FedSAM run."""
from __future__ import annotations

import gzip
import json
import math

import pandas as pd
import pytest

import fedlab
from fedlab.results import RunResult
from lab.evidence.divergence import DIVERGENCE, diverged, divergence_reason, run_divergence
from lab.evidence.records import SUFFIX, load_record
from lab.repro import FIGURES_DIR


def _run(loss: list[float], acc: float = 0.8, status: str = "finished", n_classes: int | None = 10) -> RunResult:
    rounds = len(loss)
    cfg = fedlab.Config(dataset="digits", rounds=rounds, eval_every=1, eval_subsample=None)
    metrics = pd.DataFrame({"round": range(1, rounds + 1), "train_loss": loss, "test_acc": [acc] * rounds})
    summary = {} if n_classes is None else {"n_classes": n_classes}
    return RunResult(cfg, metrics, None, status, None, summary)


def test_each_branch_of_the_rule_on_synthetic_metrics():
    healthy = [1.0, 0.8, 0.6, 0.5, 0.4, 0.35, 0.3, 0.3, 0.3, 0.3]
    assert run_divergence(_run(healthy)) is None and not diverged(_run(healthy))
    assert run_divergence(_run(healthy, status="diverged")) == "status diverged"
    assert run_divergence(_run(healthy[:4] + [math.nan] + healthy[5:])) == "training loss not finite in round 5"
    assert run_divergence(_run(healthy[:2] + [math.inf] + healthy[3:])) == "training loss not finite in round 3"
    # exactly 10 × the round-1 loss is allowed, above it is not
    assert run_divergence(_run([1.0, 10.0] + healthy[2:])) is None
    assert run_divergence(_run([1.0, 10.5] + healthy[2:])) == \
        "training loss 10.5 in round 2, above 10 × its round-1 value 1"
    # a final metric at 1.5 × chance or below (15 % with 10 classes; 30 % with 5)
    assert run_divergence(_run(healthy, acc=0.15)) == "final metric 15.0 % ≤ 1.5 × chance (15 %)"
    assert run_divergence(_run(healthy, acc=0.151)) is None
    assert run_divergence(_run(healthy, acc=0.29, n_classes=5)) == "final metric 29.0 % ≤ 1.5 × chance (30 %)"
    assert run_divergence(_run(healthy, acc=0.10, n_classes=None)) is None  # classes unknown: branch not judged
    assert run_divergence(_run(healthy, acc=math.nan)) == "final metric not finite"
    # the first branch that applies is the one given; the thresholds are parameters of the rule
    assert run_divergence(_run([1.0, 50.0] + healthy[2:], acc=0.1)).startswith("training loss 50")
    assert divergence_reason("finished", [1, 2], [1.0, 4.0], 0.8, 10, {**DIVERGENCE, "loss_factor": 3.0})
    assert DIVERGENCE == {"loss_factor": 10.0, "chance_factor": 1.5}


def _rerun_keys(algorithm: str, alpha: float) -> list[str]:
    """The committed rerun records (``meta.rerun`` set) of ``algorithm`` on the Dirichlet-``alpha`` split."""
    keys = []
    for path in sorted((FIGURES_DIR / "records").glob(f"{algorithm}-*{SUFFIX}")):
        payload = json.loads(gzip.decompress(path.read_bytes()))
        cfg = payload["config"]["config"]
        if (payload.get("meta") or {}).get("rerun") and cfg["partition"] == "dirichlet" and cfg["alpha"] == alpha:
            keys.append(path.name.removesuffix(SUFFIX))
    return keys


def test_every_committed_fedgf_run_of_the_rerun_at_dirichlet_01_diverged():
    keys = _rerun_keys("fedgf", 0.1)
    runs = [load_record(k) for k in keys]
    assert sorted(r.config.seed for r in runs) == [0, 1, 2, 3, 4, 5]
    assert sum(r.status == "finished" for r in runs) == 5  # the engine's labels: they are not the verdict
    reasons = {k: run_divergence(r) for k, r in zip(keys, runs)}
    assert all(reasons.values()), reasons
    assert all(why.startswith("training loss") and "in round 2," in why for why in reasons.values()), reasons


@pytest.mark.parametrize("algorithm", ["fedavg", "fedsam"])
def test_no_committed_fedavg_or_fedsam_run_of_the_rerun_diverged(algorithm):
    keys = _rerun_keys(algorithm, 0.1) + _rerun_keys(algorithm, 0.5)
    assert len(keys) >= 12
    reasons = {k: run_divergence(load_record(k)) for k in keys}
    assert not any(reasons.values()), {k: v for k, v in reasons.items() if v}

