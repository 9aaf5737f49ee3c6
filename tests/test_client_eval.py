"""Per-client evaluation (Config.client_eval): splits that follow each client's label proportions, drawn
from the run's seed, in the key only when enabled; statistics that match a direct evaluation."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

import fedlab
from fedlab import Config, ConfigError
from fedlab.engine.client_eval import STATS, class_counts, client_test_split
from fedlab.engine.evaluate import evaluate
from fedlab.engine.state import personal_models


def _labels() -> np.ndarray:
    return np.repeat(np.arange(4), [30, 25, 40, 20])  # a test set of 4 classes


COUNTS = np.array([[10, 0, 0, 0], [5, 5, 0, 0], [1, 2, 3, 4], [0, 0, 0, 0], [7, 0, 2, 1]])


def test_split_follows_each_clients_label_proportions():
    y = _labels()
    ids, split = client_test_split(y, COUNTS, 20, seed=3)
    assert ids.tolist() == [0, 1, 2, 4]  # the empty client 3 has no distribution and no split
    for row, i in enumerate(ids):
        got = np.bincount(y[split[row]], minlength=4)
        want = 20 * COUNTS[i] / COUNTS[i].sum()
        assert got.sum() == 20 and np.all(np.abs(got - want) < 1), (i, got, want)
        assert np.all(got[COUNTS[i] == 0] == 0)
        assert len(set(split[row].tolist())) == 20  # without replacement within a client
    assert class_counts(np.array([1.0, 1.0, 1.0]), 10).tolist() == [4, 3, 3]  # remainder to the smaller id


def test_split_is_seeded_and_differs_across_seeds_and_clients():
    y = _labels()
    a = client_test_split(y, COUNTS, 20, seed=3)[1]
    assert np.array_equal(a, client_test_split(y, COUNTS, 20, seed=3)[1])
    assert not np.array_equal(a, client_test_split(y, COUNTS, 20, seed=4)[1])
    same = np.array([[5, 5, 0, 0], [5, 5, 0, 0]])  # same proportions, own generators: different samples
    b = client_test_split(y, same, 10, seed=3)[1]
    assert not np.array_equal(np.sort(b[0]), np.sort(b[1]))


def test_a_split_the_test_set_cannot_hold_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match="client_eval_size"):
        client_test_split(_labels(), COUNTS, 21 + 20, seed=0)  # client 0 needs 41 of class 0 (30 held)
    with pytest.raises(ConfigError, match="client_eval_size"):
        Config(client_eval=True, client_eval_size=0)
    with pytest.raises(ConfigError, match="client_eval"):
        Config(client_eval="yes")


def test_client_eval_enters_the_key_only_when_enabled(monkeypatch):
    base = Config()
    assert "client_eval" not in base.hashed_fields() and "client_eval_size" not in base.hashed_fields()
    assert base.hash() == Config(client_eval_size=7).hash()  # off: its size changes nothing
    on = Config(client_eval=True)
    assert on.hashed_fields()["client_eval"] is True and on.hash() != base.hash()
    assert on.hash() != Config(client_eval=True, client_eval_size=50).hash()
    # the keys of existing configs are those the code before client_eval gave (code digest and version
    # held fixed; values computed at commit 4ad040a)
    monkeypatch.setattr("fedlab.store.code_digest.code_digest", lambda: "pinned-code")
    monkeypatch.setattr("fedlab.config.__version__", "pinned-version")
    assert Config().hash("fp") == "571d46a732b1"
    assert Config(algorithm="scaffold", dataset="digits", n_clients=8, rounds=3, seed=5).hash("fp|data:x") == \
        "4cb955eeac45"


def test_per_client_statistics_match_a_direct_evaluation_and_change_no_other_number(tiny, tmp_path):
    plain = fedlab.run(tiny(runs_dir=str(tmp_path / "a")), progress=False)
    cfg = tiny(runs_dir=str(tmp_path / "b"), client_eval=True, client_eval_size=20)
    res = fedlab.run(cfg, progress=False)
    assert torch.equal(res.theta, plain.theta)
    numbers = [c for c in plain.metrics.columns if c != "wall_seconds"]
    pd.testing.assert_frame_equal(res.metrics[numbers], plain.metrics[numbers])
    m = res.metrics
    assert m["client_acc_mean"].isna().tolist() == m["test_acc"].isna().tolist()  # at evaluation rounds only
    # recompute the last round's statistics client by client with the plain evaluator
    sim = fedlab.Simulation.build(cfg)
    y = sim.dataset.y_test.numpy()
    ids, split = client_test_split(y, sim.partition.stats.counts.to_numpy(), 20, cfg.seed)
    accs, losses = [], []
    for row in split:
        idx = torch.as_tensor(row)
        acc, loss = evaluate(sim.model, res.theta, sim.dataset.x_test[idx], sim.dataset.y_test[idx])
        accs.append(acc)
        losses.append(loss)
    accs, losses = np.array(accs), np.array(losses)
    k = math.ceil(0.1 * len(ids))
    last = m.iloc[-1]
    assert last["client_acc_mean"] == pytest.approx(accs.mean())
    assert last["client_acc_std"] == pytest.approx(accs.std())
    assert last["client_acc_worst10"] == pytest.approx(np.sort(accs)[:k].mean())
    assert last["client_loss_mean"] == pytest.approx(losses.mean(), rel=1e-5)
    assert last["client_loss_worst10"] == pytest.approx(np.sort(losses)[-k:].mean(), rel=1e-5)
    assert last["client_loss_std"] == pytest.approx(losses.std(), rel=1e-4)
    # every client's own values are stored beside their summaries, NaN where the round was not evaluated
    vector_acc = np.array([last[f"client_acc/{i}"] for i in ids])
    vector_loss = np.array([last[f"client_loss/{i}"] for i in ids])
    np.testing.assert_allclose(vector_acc, accs)
    np.testing.assert_allclose(vector_loss, losses, rtol=1e-5)
    assert [c for c in m.columns if c.startswith("client_acc/")] == [f"client_acc/{i}" for i in ids]
    assert m[f"client_acc/{ids[0]}"].isna().tolist() == m["test_acc"].isna().tolist()
    assert res.summary["final_client_acc_worst10"] == last["client_acc_worst10"]
    assert set(f"final_{s}" for s in STATS) <= set(res.summary)
    assert res.summary["client_eval_clients"] == len(ids) and len(res.summary["client_eval_split"]) == 64
    with pytest.raises(ConfigError, match="client_eval_size"):
        fedlab.Simulation.build(cfg.replace(client_eval_size=500))  # digits: ~36 test images a class


def test_a_personalised_method_is_measured_with_each_clients_own_model(tiny, tmp_path):
    """FedFSA (issue 45): client i's split is measured with the model it ended its last round with (θ⁰ if it
    was never sampled), not with the global model; a method without personal models gets None (global θ)."""
    cfg = tiny(algorithm="fedfsa", runs_dir=str(tmp_path / "r"), client_eval=True, client_eval_size=20)
    res = fedlab.run(cfg, progress=False)
    sim = fedlab.Simulation.build(cfg)
    state = sim.initial_state()
    for t in range(cfg.rounds):
        sim.train_round(state, t)
    assert torch.equal(sim.algorithm.global_model(state.server), res.theta)
    ids, split = client_test_split(sim.dataset.y_test.numpy(), sim.partition.stats.counts.to_numpy(), 20, cfg.seed)
    never = [i for i in ids if i not in state.client_states]
    own = {i: state.client_states[i]["own"] if i not in never else state.theta0 for i in ids}
    accs, global_accs = [], []
    for i, row in zip(ids, split):
        idx = torch.as_tensor(row)
        x, y = sim.dataset.x_test[idx], sim.dataset.y_test[idx]
        accs.append(evaluate(sim.model, own[i], x, y)[0])
        global_accs.append(evaluate(sim.model, res.theta, x, y)[0])
    last = res.metrics.iloc[-1]
    np.testing.assert_allclose([last[f"client_acc/{i}"] for i in ids], accs)
    assert last["client_acc_mean"] == pytest.approx(np.mean(accs))
    assert not np.allclose(accs, global_accs)  # the columns are not the global model's
    assert any(not torch.equal(own[i], res.theta) for i in ids)
    assert personal_models(sim.algorithm, state) is not None
    plain = fedlab.Simulation.build(tiny(algorithm="fedsam"))
    assert personal_models(plain.algorithm, plain.initial_state()) is None  # other methods: the global model
    assert torch.equal(plain.algorithm.personal_model({}, {"theta": res.theta}), res.theta)
