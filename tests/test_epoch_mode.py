"""Epoch mode (K_i = E·⌈n_i/B⌉): methods normalise by the steps clients really ran, and the two ways
of setting K exclude each other (issue 11, defects 1 and 2)."""
from __future__ import annotations

import math

import pytest
import torch

from fedlab import Config
from fedlab.config import ConfigError
from fedlab.engine import Simulation


def _one_round(tiny, algorithm, **params):
    cfg = tiny(algorithm=algorithm, algorithm_params=params, local_steps=None, local_epochs=2,
               batch_size=16, rounds=2, participation=0.5, clip_norm=None)
    sim = Simulation.build(cfg)
    state = sim.initial_state()
    theta0 = state.server["theta"].clone()
    outcome = sim.train_round(state, 0)
    steps = outcome.info.client_steps
    sizes = [len(sim.partition.client_indices[i]) for i in outcome.clients.tolist()]
    assert steps == tuple(2 * math.ceil(n / 16) for n in sizes)  # K_i = E·⌈n_i/B⌉, in upload order
    assert len(set(steps)) > 1, "the split must give clients different K_i for this test to bite"
    delta_bar = torch.stack([r.theta_final - theta0 for r in outcome.results]).mean(0)
    return sim, state, outcome, delta_bar, sum(steps) / len(steps)


def test_fedvssam_pseudo_gradient_uses_the_mean_of_the_real_steps(tiny):
    sim, state, outcome, delta_bar, k_bar = _one_round(tiny, "fedvssam")
    gamma_g = sim.algorithm.hp.gamma_g
    lr = outcome.info.lr
    # h¹ = (1 − γ_g)·0 + γ_g g¹,  g¹ = −Δ̄ / (η K̄)
    torch.testing.assert_close(state.server["h"], gamma_g * (-delta_bar / (lr * k_bar)), rtol=1e-5, atol=1e-7)


def test_mofedsam_momentum_uses_the_mean_of_the_real_steps(tiny):
    sim, state, outcome, delta_bar, k_bar = _one_round(tiny, "mofedsam")
    msg = sim.algorithm.broadcast(state.server, sim.round_info(1, outcome.info.client_steps))
    torch.testing.assert_close(msg["m"], -delta_bar / (k_bar * outcome.info.lr), rtol=1e-5, atol=1e-7)


def test_scaffold_control_variate_uses_each_clients_own_steps(tiny):
    sim, state, outcome, _, _ = _one_round(tiny, "scaffold")
    lr = outcome.info.lr
    for r, k_i in zip(outcome.results, outcome.info.client_steps):
        theta_start = sim.model.theta0()
        # round 0: c = c_i = 0, so c_i⁺ = −Δ_i / (K_i η)
        expected = -(r.theta_final - theta_start) / (k_i * lr)
        torch.testing.assert_close(state.client_states[r.client]["c_i"], expected, rtol=1e-5, atol=1e-7)


def test_fixed_k_round_info_carries_k_for_every_client(tiny):
    sim = Simulation.build(tiny(local_steps=3))
    outcome = sim.train_round(sim.initial_state(), 0)
    assert outcome.info.client_steps == (3,) * len(outcome.clients)
    assert outcome.info.mean_steps == 3.0 and outcome.info.n_sampled == len(outcome.clients)


def test_local_steps_and_local_epochs_exclude_each_other():
    with pytest.raises(ConfigError, match="local_steps=10 and local_epochs=2"):
        Config(local_epochs=2)  # local_steps keeps its default 10: ambiguous, so refused
    with pytest.raises(ConfigError, match="local_steps=None and local_epochs=None"):
        Config(local_steps=None)
    assert Config(local_steps=None, local_epochs=2).local_epochs == 2
    with pytest.raises(ConfigError, match="local_steps"):
        Config(local_steps=0)
    with pytest.raises(ConfigError, match="local_epochs"):
        Config(local_steps=None, local_epochs=0)


def test_cli_local_epochs_alone_is_epoch_mode():
    from fedlab.cli import _config_from_args, build_parser

    args = build_parser().parse_args(["run", "--local-epochs", "2"])
    cfg = _config_from_args(args)
    assert cfg.local_epochs == 2 and cfg.local_steps is None
    assert _config_from_args(build_parser().parse_args(["run"])).local_steps == Config().local_steps
    with pytest.raises(ConfigError, match="local_steps=4 and local_epochs=2"):
        _config_from_args(build_parser().parse_args(["run", "--local-epochs", "2", "--local-steps", "4"]))
