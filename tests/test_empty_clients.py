"""Clients without data are never sampled, under every partitioner × sampler × K mode (issue 11, defect 5).

Rule: uniform sampling draws its m = round(p·N) clients among the non-empty ones, bernoulli skips the
empty ones, a schedule that names one is a ConfigError naming round and client (raised before anything
is written), and the partition statistics count them (``PartitionStats.n_empty``).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import fedlab
from fedlab import Config
from fedlab.config import ConfigError
from fedlab.data import DatasetNotFoundError
from fedlab.engine import Simulation, sample_clients
from fedlab.engine.loop import build_dataset, build_partition
from fedlab import numpy_generator

# digits, 20 clients, Dirichlet α = 0.02: clients 0, 8 and 12 hold no sample
EMPTY_SPLIT = dict(dataset="digits", partition="dirichlet", alpha=0.02, n_clients=20)

PARTITIONS = {
    "iid": dict(partition="iid"),
    "dirichlet": dict(partition="dirichlet", alpha=0.02),
    "dirichlet_client": dict(partition="dirichlet_client", alpha=0.05),
    "pathological": dict(partition="pathological", classes_per_client=2),
    "shards": dict(partition="shards"),
    "file": dict(partition="file"),  # the Dirichlet split above, exported with its empty clients
    "natural": dict(dataset="synthetic", partition="natural", n_clients=30, model="mlp"),
}
MODES = {"fixed_k": dict(local_steps=2), "epoch": dict(local_steps=None, local_epochs=1)}


def _empty_split_file(tmp_path):
    cfg = Config(**EMPTY_SPLIT)
    part = build_partition(cfg, build_dataset(cfg))
    path = tmp_path / "split.json"
    part.to_json(path)
    return str(path), part


def test_the_reference_split_has_empty_clients(tmp_path):
    _, part = _empty_split_file(tmp_path)
    assert part.stats.empty_clients.tolist() == [0, 8, 12]
    assert part.stats.n_empty == 3 and part.stats.summary()["n_empty"] == 3


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("sampling", ["uniform", "bernoulli", "schedule"])
@pytest.mark.parametrize("scheme", sorted(PARTITIONS))
def test_every_partitioner_sampler_and_mode_is_safe(tmp_path, scheme, sampling, mode):
    values = dict(dataset="digits", model="cnn", n_clients=20, participation=0.5, rounds=2, batch_size=64,
                  lr=0.05, eval_every=2, eval_subsample=100, runs_dir=str(tmp_path / "runs"))
    values.update(PARTITIONS[scheme], **MODES[mode])
    if scheme == "file":
        path, _ = _empty_split_file(tmp_path)
        values["partition_params"] = {"path": path, "allow_empty": True}
    if sampling == "schedule":
        probe = Config(**values)
        sizes = build_partition(probe, build_dataset(probe)).sizes
        full = np.flatnonzero(sizes > 0).tolist()
        (tmp_path / "schedule.json").write_text(json.dumps([full[:3], full[-4:]]))
        values.update(sampling="schedule", schedule_path=str(tmp_path / "schedule.json"))
    else:
        values["sampling"] = sampling
    sim = Simulation.build(Config(**values))
    sizes = sim.partition.sizes
    assert sim.partition.stats.n_empty == int((sizes == 0).sum())
    if scheme in ("dirichlet", "file"):
        assert sim.partition.stats.n_empty == 3  # the rule is exercised, not just the happy path
    for t in range(2 if sampling == "schedule" else 6):  # the schedule holds the run's 2 rounds
        assert (sizes[sim.sample(t)] > 0).all()
    if sampling == "uniform":
        assert len(sim.sample(0)) == round(0.5 * sim.config.n_clients)  # m counts all N clients
    result = sim.run(progress=False)
    # the run completes (two rounds on 3000 images may still sit at chance: "collapsed" completes too)
    assert result.status in ("finished", "collapsed") and np.isfinite(result.metrics["train_loss"]).all()


def test_schedule_naming_an_empty_client_is_refused_before_anything_is_written(tmp_path):
    runs = tmp_path / "runs"
    (tmp_path / "schedule.json").write_text(json.dumps([[1, 2], [3, 8]]))  # client 8 is empty
    cfg = Config(**EMPTY_SPLIT, sampling="schedule", schedule_path=str(tmp_path / "schedule.json"), rounds=2,
                 runs_dir=str(runs))
    with pytest.raises(ConfigError, match="round 1 names client 8, which holds no data"):
        fedlab.run(cfg, progress=False)
    assert not runs.exists() or not any(runs.iterdir())


def test_uniform_sampling_needs_enough_non_empty_clients(tmp_path):
    cfg = Config(**EMPTY_SPLIT, participation=0.9, runs_dir=str(tmp_path))  # m = 18 > 17 non-empty
    with pytest.raises(ConfigError, match="m=18 clients per round but only 17 of the 20"):
        Simulation.build(cfg)


def test_samplers_keep_their_draws_when_no_client_is_empty():
    for t in range(20):
        old_uniform = np.sort(numpy_generator(0, "sampling", t).choice(100, size=10, replace=False))
        assert np.array_equal(sample_clients(t, 100, 0.1, seed=0), old_uniform)
        assert np.array_equal(sample_clients(t, 100, 0.1, seed=0, eligible=np.arange(100)), old_uniform)
        old_bernoulli = np.flatnonzero(numpy_generator(0, "sampling", t, 0).random(100) < 0.1)
        if old_bernoulli.size:
            assert np.array_equal(sample_clients(t, 100, 0.1, seed=0, mode="bernoulli"), old_bernoulli)


def test_bernoulli_skips_empty_clients_and_leaves_the_others_draws_alone():
    eligible = np.setdiff1d(np.arange(50), [3, 7, 30])
    for t in range(30):
        ids = sample_clients(t, 50, 0.3, seed=1, mode="bernoulli", eligible=eligible)
        assert not set(ids.tolist()) & {3, 7, 30}
        free = sample_clients(t, 50, 0.3, seed=1, mode="bernoulli")
        if set(free.tolist()) - {3, 7, 30}:  # same coins, empty clients removed
            assert ids.tolist() == [i for i in free.tolist() if i not in (3, 7, 30)]


def test_readme_fedsam_example_at_alpha_005_runs(tmp_path):
    """The README's FedSAM command at α = 0.05 drew empty clients 3 and 74 in round 0 and crashed."""
    cfg = Config(algorithm="fedsam", algorithm_params={"rho": 0.05}, dataset="fmnist", partition="dirichlet",
                 alpha=0.05, n_clients=100, participation=0.1, rounds=50, eval_subsample=200,
                 runs_dir=str(tmp_path))
    try:
        sim = Simulation.build(cfg)
    except DatasetNotFoundError:
        pytest.skip("Fashion-MNIST is not on disk")
    assert sim.partition.stats.empty_clients.tolist() == [3, 15, 74]
    sizes = sim.partition.sizes
    for t in range(cfg.rounds):
        clients = sim.sample(t)
        assert len(clients) == 10 and (sizes[clients] > 0).all()
    # round 0's batches are where the empty client crashed (ZeroDivisionError in fixed_step_batches);
    # training all 10 clients takes ~10 s on one core, so the round is run for two of them
    jobs = sim.client_jobs(0, sim.sample(0), sim.client_indices)
    assert all(tuple(job.batches.shape) == (cfg.local_steps, cfg.batch_size) for job in jobs)
    outcome = sim.train_round(sim.initial_state(), 0, clients=sim.sample(0)[:2])
    assert all(np.isfinite(float(r.mean_loss)) for r in outcome.results)
