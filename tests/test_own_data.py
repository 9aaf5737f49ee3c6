"""Bring your own data and split: user tensors, a partition file, a client schedule and θ₀ (issue 11).

The run key covers the dataset's tensors (``Dataset.digest``) and a user θ₀, so the store never
returns a run trained on other data or from another start.
"""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

import fedlab
from fedlab import Config, ConfigError
from fedlab.data import from_tensors, load_dataset
from fedlab.engine import Simulation


def _small(tmp_path, **overrides):
    values = dict(dataset="digits", model="cnn", n_clients=4, participation=0.5, rounds=2, local_steps=2,
                  batch_size=16, lr=0.05, partition="iid", eval_every=2, runs_dir=str(tmp_path / "runs"))
    values.update(overrides)
    return Config(**values)


def test_a_supplied_dataset_is_part_of_the_run_key(tmp_path):
    """Same config, other tensors: a new run, not the cached one (today: the first run came back)."""
    ds = load_dataset("digits")
    other = dataclasses.replace(ds, x_train=ds.x_train.flip(-1))  # mirrored images: other data
    cfg = _small(tmp_path)
    first = fedlab.run(cfg, dataset=ds, progress=False)
    second = fedlab.run(cfg, dataset=other, progress=False)
    assert first.run_dir != second.run_dir
    assert not torch.equal(first.theta, second.theta)
    again = fedlab.run(cfg, dataset=dataclasses.replace(ds), progress=False)  # equal tensors, new object
    assert again.run_dir == first.run_dir and torch.equal(again.theta, first.theta)


def test_dataset_digest_covers_tensors_and_classes_not_labels():
    ds = load_dataset("digits")
    assert ds.digest == dataclasses.replace(ds).digest == dataclasses.replace(ds, name="x", mean=(9.0,)).digest
    changed = ds.x_test.clone()
    changed[0, 0, 0, 0] += 1e-3
    for variant in (dataclasses.replace(ds, x_test=changed), dataclasses.replace(ds, n_classes=11),
                    dataclasses.replace(ds, augment="crop_flip"), dataclasses.replace(ds, y_train=ds.y_train.flip(0))):
        assert variant.digest != ds.digest


def test_from_tensors_validates_and_converts():
    x, y = np.random.default_rng(0).normal(size=(20, 1, 4, 4)), np.arange(20) % 3
    ds = from_tensors(x, y, x[:6], y[:6], name="toy")
    assert ds.x_train.dtype == torch.float32 and ds.y_train.dtype == torch.int64 and ds.n_classes == 3
    assert ds.input_shape == (1, 4, 4) and ds.augment is None and ds.name == "toy"
    bad = [
        (dict(x_train=x[:, 0, 0, 0]), "x_train must have shape"),
        (dict(x_test=x[:6, :, :2]), "x_test samples have shape"),
        (dict(y_train=y[:5]), "y_train has 5 labels but x_train has 20"),
        (dict(y_test=y[:6].astype(float)), "y_test must be a 1-D tensor of integer"),
        (dict(x_train=np.where(x > 2, np.nan, x)), "x_train contains NaN"),
        (dict(x_train=(x > 0).astype(np.int64)), "x_train must hold floating-point"),
        (dict(n_classes=2), "n_classes=2 must be"),
        (dict(augment="cutout"), "augment='cutout' is invalid"),
        (dict(y_train=-y), "y_train must hold class ids ≥ 0"),
    ]
    for change, message in bad:
        args = {**dict(x_train=x, y_train=y, x_test=x[:6], y_test=y[:6]), **change}
        n_classes = args.pop("n_classes", None)
        augment = args.pop("augment", None)
        with pytest.raises(ValueError, match=message):
            from_tensors(**args, n_classes=n_classes, augment=augment)


def test_custom_dataset_needs_tensors(tmp_path):
    with pytest.raises(ConfigError, match="dataset='custom' trains on tensors you supply"):
        fedlab.run(_small(tmp_path, dataset="custom"), progress=False)


def test_theta0_is_the_start_and_part_of_the_key(tmp_path):
    cfg = _small(tmp_path)
    d = Simulation.build(cfg).model.dim
    theta0 = 0.01 * torch.randn(d, generator=torch.Generator().manual_seed(3))
    sim = Simulation.build(cfg, theta0=theta0)
    assert torch.equal(sim.initial_state().server["theta"], theta0) and torch.equal(sim.model.theta0(), theta0)
    default, own = fedlab.run(cfg, progress=False), fedlab.run(cfg, theta0=theta0, progress=False)
    assert default.run_dir != own.run_dir and not torch.equal(default.theta, own.theta)
    assert json.loads((own.run_dir / "config.json").read_text())["theta0_digest"] == sim.theta0_digest
    assert fedlab.run(cfg, theta0=theta0.clone(), progress=False).run_dir == own.run_dir
    with pytest.raises(ConfigError, match=rf"theta0 has shape \(5,\) but model 'cnn'.* has d={d} parameters"):
        Simulation.build(cfg, theta0=torch.zeros(5))
    with pytest.raises(ConfigError, match="theta0 must hold finite"):
        Simulation.build(cfg, theta0=torch.full((d,), float("nan")))


def test_replaying_an_exported_split_reproduces_the_run(tmp_path):
    """Export a run's split, schedule, tensors and θ₀ as another code base would hand them over; the
    replay with partition="file", sampling="schedule", dataset="custom" gives the same θ bit for bit."""
    cfg = _small(tmp_path, partition="dirichlet", alpha=0.5, n_clients=6, rounds=3, eval_every=3)
    original = Simulation.build(cfg)
    result = original.run(progress=False)
    original.partition.to_json(tmp_path / "split.json")
    schedule = [original.sample(t).tolist() for t in range(cfg.rounds)]
    (tmp_path / "schedule.json").write_text(json.dumps(schedule))
    ds = original.dataset
    theirs = from_tensors(ds.x_train.numpy(), ds.y_train.numpy(), ds.x_test.numpy(), ds.y_test.numpy(),
                          n_classes=10, name="exported")
    replay_cfg = cfg.replace(dataset="custom", partition="file", alpha=None,
                             partition_params={"path": str(tmp_path / "split.json")},
                             sampling="schedule", schedule_path=str(tmp_path / "schedule.json"))
    replay = fedlab.run(replay_cfg, dataset=theirs, theta0=original.model.theta0(), progress=False)
    assert replay.run_dir != result.run_dir
    assert torch.equal(replay.theta, result.theta)
    assert replay.final_accuracy == result.final_accuracy
