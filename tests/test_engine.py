"""The engine: determinism, resume, identities, bad input, results store."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import fedlab
from fedlab import CheckpointError, Config, ConfigError
from fedlab.engine import Simulation, learning_rate, sample_clients

METRIC_COLUMNS = ["round", "lr", "train_loss", "test_acc", "test_loss", "flatness_distance",
                  "uplink_floats", "downlink_floats", "n_sampled"]


def _numbers(df: pd.DataFrame) -> pd.DataFrame:
    return df[METRIC_COLUMNS]


def test_fedlab_is_this_repository():
    repo = Path(__file__).resolve().parent.parent
    assert Path(fedlab.__file__).resolve().is_relative_to(repo / "fedlab")
    assert fedlab.FEDLAB_SAM_MARKER.startswith("fedlab-sam")


def test_metrics_columns_and_values(tiny):
    result = fedlab.run(tiny(), progress=False)
    m = result.metrics
    assert list(m["round"]) == [1, 2, 3, 4]
    assert set(METRIC_COLUMNS + ["wall_seconds"]) <= set(m.columns)
    assert m["test_acc"].isna().tolist() == [True, False, True, False]  # eval_every=2
    assert (m["n_sampled"] == 4).all()
    d = result.theta.numel()
    assert (m["uplink_floats"] == 4 * d).all() and (m["downlink_floats"] == 4 * d).all()
    assert m["lr"].tolist() == pytest.approx([0.05 * 0.998**t for t in range(4)])
    assert (m["flatness_distance"] > 0).all()
    assert result.status == "finished" and 0.0 <= result.final_accuracy <= 1.0


def test_same_config_same_numbers(tiny, tmp_path):
    a = fedlab.run(tiny(runs_dir=str(tmp_path / "a")), progress=False)
    b = fedlab.run(tiny(runs_dir=str(tmp_path / "b")), progress=False)
    pd.testing.assert_frame_equal(_numbers(a.metrics), _numbers(b.metrics))
    assert torch.equal(a.theta, b.theta)
    c = fedlab.run(tiny(runs_dir=str(tmp_path / "c"), seed=1), progress=False)
    assert not torch.equal(a.theta, c.theta)


@pytest.mark.parametrize("algorithm", ["fedavg", "fedsam"])
def test_resume_is_bit_identical(tiny, tmp_path, algorithm):
    full = fedlab.run(tiny(algorithm=algorithm, runs_dir=str(tmp_path / "full"), rounds=5), progress=False)
    cfg = tiny(algorithm=algorithm, runs_dir=str(tmp_path / "cut"), rounds=5, checkpoint_every=1)
    part = fedlab.run(cfg, progress=False, stop_after_rounds=3)
    assert part.status == "running" and len(part.metrics) == 3
    assert json.loads((part.run_dir / "summary.json").read_text())["status"] == "running"
    resumed = fedlab.run(cfg, progress=False)
    assert resumed.status == "finished"
    pd.testing.assert_frame_equal(_numbers(full.metrics), _numbers(resumed.metrics))
    assert torch.equal(full.theta, resumed.theta)


def test_finished_run_loads_from_disk_without_training(tiny, monkeypatch):
    cfg = tiny()
    first = fedlab.run(cfg, progress=False)

    def boom(*args, **kwargs):
        raise AssertionError("a finished run must not train again")

    monkeypatch.setattr("fedlab.engine.loop.run_clients_sequential", boom)
    again = fedlab.run(cfg, progress=False)
    assert again.run_dir == first.run_dir
    assert torch.equal(again.theta, first.theta)
    pd.testing.assert_frame_equal(_numbers(again.metrics), _numbers(first.metrics), check_dtype=False)


def test_the_algorithm_is_built_once_per_run(tiny, monkeypatch):
    """``Config.validate`` builds the algorithm; the run trains with that instance and its key reads that
    instance's resolved hyperparameters, however often the key is asked for (issue 44: it was built by
    validate, again by Simulation.build, and again by every ``hash()``)."""
    from fedlab.algorithms import algorithm_class

    cls = algorithm_class("fedsam")
    made = []
    real_init = cls.__init__

    def counting_init(self, *args, **kwargs):
        made.append(self)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(cls, "__init__", counting_init)
    cfg = tiny(algorithm="fedsam", rounds=1, eval_every=1)
    sim = Simulation.build(cfg)
    sim.train_round(sim.initial_state(), 0)
    fedlab.run(cfg, progress=False)
    cfg.hash(), cfg.hash("other-partition"), cfg.hashed_fields()
    assert made == [cfg.built_algorithm] and sim.algorithm is cfg.built_algorithm
    # a params dict changed in place after validation is not ignored: the instance and the key follow it
    before = cfg.hash()
    cfg.algorithm_params["rho"] = 0.05
    assert cfg.built_algorithm.hp.rho == 0.05 and cfg.hash() != before and len(made) == 2


def test_fedsam_with_rho_zero_equals_fedavg(tiny, tmp_path):
    avg = fedlab.run(tiny(algorithm="fedavg", runs_dir=str(tmp_path / "a")), progress=False)
    sam = fedlab.run(tiny(algorithm="fedsam", algorithm_params={"rho": 0.0}, runs_dir=str(tmp_path / "b")),
                     progress=False)
    assert torch.equal(avg.theta, sam.theta)
    pd.testing.assert_frame_equal(_numbers(avg.metrics), _numbers(sam.metrics))
    sam_on = fedlab.run(tiny(algorithm="fedsam", runs_dir=str(tmp_path / "c")), progress=False)
    assert not torch.equal(avg.theta, sam_on.theta)


def test_single_client_fedavg_is_minibatch_sgd(tiny):
    """FedAvg with N = 1 and full participation is plain SGD (wd, clipping) on that client's data."""
    cfg = tiny(n_clients=1, participation=1.0, partition="iid", rounds=3, local_steps=4, lr_schedule="constant",
               weight_decay=1e-3, clip_norm=1.0)
    sim = Simulation.build(cfg)
    result = sim.run(progress=False)
    module = fedlab.build_model(cfg.model, sim.dataset.input_shape, sim.dataset.n_classes, seed=cfg.seed)
    opt = torch.optim.SGD(module.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    idx = torch.tensor(sim.partition.client_indices[0])
    for t in range(cfg.rounds):
        jobs = sim.client_jobs(t, np.array([0]), [idx])
        for batch_idx in jobs[0].batches:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(module(sim.dataset.x_train[batch_idx]),
                                                     sim.dataset.y_train[batch_idx])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(module.parameters(), cfg.clip_norm)
            opt.step()
    sgd = fedlab.models.flatten_params(module)
    assert torch.allclose(result.theta, sgd, rtol=0, atol=1e-6), (result.theta - sgd).abs().max()


def test_diverged_run_is_recorded_not_continued(tiny):
    result = fedlab.run(tiny(lr=1e6, clip_norm=None, rounds=6, weight_decay=0.0), progress=False)
    assert result.status == "diverged"
    assert len(result.metrics) < 6
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["status"] == "diverged"


def test_corrupted_checkpoint_is_reported_and_kept(tiny):
    cfg = tiny(rounds=4)
    part = fedlab.run(cfg, progress=False, stop_after_rounds=2)
    ckpt = part.run_dir / "checkpoint.pt"
    ckpt.write_bytes(b"not a checkpoint")
    metrics_before = (part.run_dir / "metrics.csv").read_text()
    with pytest.raises(CheckpointError, match="corrupted"):
        fedlab.run(cfg, progress=False)
    assert ckpt.read_bytes() == b"not a checkpoint"
    assert (part.run_dir / "metrics.csv").read_text() == metrics_before


def test_epoch_mode_steps(tiny):
    cfg = tiny(local_steps=None, local_epochs=2, batch_size=32, rounds=1)
    sim = Simulation.build(cfg)
    idx = [torch.tensor(ix) for ix in sim.partition.client_indices]
    jobs = sim.client_jobs(0, np.arange(cfg.n_clients), idx)
    for job in jobs:
        n = len(sim.partition.client_indices[job.client])
        assert len(job.batches) == 2 * math.ceil(n / 32)
        assert sorted(torch.cat(list(job.batches)).tolist()) == sorted(2 * sim.partition.client_indices[job.client].tolist())
    assert sim.run(progress=False).status == "finished"


def test_sampling_modes(tmp_path):
    u = sample_clients(3, 100, 0.1, seed=0)
    assert len(u) == 10 and len(set(u.tolist())) == 10 and list(u) == sorted(u)
    assert np.array_equal(u, sample_clients(3, 100, 0.1, seed=0))
    assert not np.array_equal(u, sample_clients(4, 100, 0.1, seed=0))
    sizes = [len(sample_clients(t, 100, 0.1, seed=0, mode="bernoulli")) for t in range(200)]
    assert 9.0 < np.mean(sizes) < 11.0 and len(set(sizes)) > 3


def test_schedule_replays_client_selection(tiny, tmp_path):
    schedule = [[0, 1], [2, 3], [4, 5], [6, 7]]
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps(schedule))
    cfg = tiny(sampling="schedule", schedule_path=str(path))
    result = fedlab.run(cfg, progress=False)
    assert (result.metrics["n_sampled"] == 2).all()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([[0, 99]] * 4))
    with pytest.raises(ValueError, match="schedule_path"):
        fedlab.run(tiny(sampling="schedule", schedule_path=str(bad)), progress=False)


def test_learning_rate_schedules():
    assert learning_rate(10, 0.1, "exponential", 100) == pytest.approx(0.1 * 0.998**10)
    assert learning_rate(0, 0.1, "cosine", 100) == pytest.approx(0.1)
    assert learning_rate(50, 0.1, "cosine", 100) == pytest.approx(0.05)
    assert learning_rate(7, 0.1, "constant", 100) == 0.1


BAD_CONFIGS = [
    (dict(dataset="mnist3d"), "dataset"),
    (dict(model="vgg99"), "model"),
    (dict(algorithm="fedmagic"), "algorithm"),
    (dict(partition="random"), "partition"),
    (dict(alpha=0.0), "alpha"),
    (dict(alpha=-1.0), "alpha"),
    (dict(partition="pathological", classes_per_client=None), "classes_per_client"),
    (dict(participation=0.0), "participation"),
    (dict(participation=1.5), "participation"),
    (dict(rounds=0), "rounds"),
    (dict(local_steps=-2), "local_steps"),
    (dict(batch_size=0), "batch_size"),
    (dict(lr=-0.1), "lr"),
    (dict(lr_schedule="step"), "lr_schedule"),
    (dict(sampling="roundrobin"), "sampling"),
    (dict(algorithm="fedsam", algorithm_params={"rho": -1.0}), "rho"),
    (dict(algorithm="fedsam", algorithm_params={"rhoo": 0.1}), "rhoo"),
    (dict(device="tpu"), "device"),
    (dict(seed=-3), "seed"),
]


@pytest.mark.parametrize("overrides,field", BAD_CONFIGS, ids=[f for _, f in BAD_CONFIGS])
def test_bad_config_rejected_with_field_name(overrides, field):
    with pytest.raises(ConfigError, match=field):
        Config(**overrides)


@pytest.mark.parametrize("overrides,field", [
    (dict(n_clients=5000), "n_clients"),
    (dict(partition="pathological", classes_per_client=11), "classes_per_client"),
])
def test_bad_partition_requests_rejected(tiny, overrides, field):
    with pytest.raises(ConfigError, match=field):
        fedlab.run(tiny(**overrides), progress=False)


def test_hash_ignores_storage_fields_only():
    a = Config()
    assert a.hash() == Config(runs_dir="/elsewhere", checkpoint_every=3, name="x").hash()
    assert a.hash() != Config(lr=0.05).hash()
    assert a.hash() != a.hash(extra="other-partition")
    # resolved hyperparameters: the default written out explicitly is the same experiment
    assert Config(algorithm="fedsam").hash() == Config(algorithm="fedsam", algorithm_params={"rho": 0.1}).hash()
