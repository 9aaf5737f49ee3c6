"""Tests for the momentum / SWA / look-ahead / variance-suppressed SAM group: MoFedSAM, FedLESAM,
FedSWA, FedMoSWA, FedNSAM and FedVSSAM.

What is checked: exact reductions to FedAvg / FedSAM (``torch.equal`` on every global model and every
client endpoint), hand computations of the server rules (FedNSAM's momentum, MoFedSAM's message,
FedMoSWA's control variates, FedVSSAM's EMA), where each method evaluates its gradients, FedSWA's
in-round lr schedule, that FedMoSWA reaches θ* on a heterogeneous quadratic where FedAvg stalls,
FedVSSAM's variance suppression (its actual steps have γ_l² the variance of their SAM gradients),
communication sizes (from ``tests/cases.py``), hyperparameter validation, and that ``local_step`` gives the same numbers under ``torch.func.vmap``.
"""
from __future__ import annotations

import pytest
import torch
from torch.func import vmap

from cases import BY_LABEL, DEFAULTS
from fedlab.algorithms import RoundInfo, StepInfo, algorithm_class, algorithm_names, get_algorithm
from fedlab.algorithms.fedswa import swa_learning_rate, swa_learning_rate_sum
from fedlab.toy import quadratic_federation, run_functional
from fedlab.models import FlatModel, build_model

GROUP = ("mofedsam", "fedlesam", "fedswa", "fedmoswa", "fednsam", "fedvssam")


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


# --- federations -----------------------------------------------------------------------------------

def _quadratic(n_clients=6, dim=5, noise=0.1, heterogeneity=1.0):
    """float64 quadratic clients f_i = ½(θ − b_i)ᵀA_i(θ − b_i) with gradient noise."""
    grad_fn, batch_fn, theta_star, _ = quadratic_federation(
        n_clients, dim, seed=5, heterogeneity=heterogeneity, noise=noise)
    return grad_fn, batch_fn, torch.zeros(dim, dtype=torch.float64), theta_star


_MLP: dict[str, FlatModel] = {}


def _mlp(dtype=torch.float32):
    """The 60 → 200 → 200 → 10 MLP with random data; batches depend on (client, round, step)."""
    key = str(dtype)
    if key not in _MLP:
        _MLP[key] = FlatModel(build_model("mlp", (60,), 10, seed=0).to(dtype))
    model = _MLP[key]

    def batch_fn(client, round_, step):
        g = torch.Generator().manual_seed(7_919 * client + 131 * round_ + step)
        return torch.randn(8, 60, generator=g, dtype=dtype), torch.randint(0, 10, (8,), generator=g)

    return model.grad_fn, batch_fn, model.theta0()


def _run(alg, fed, *, rounds=3, n_clients=6, participation=0.5, local_steps=3, lr=0.05, wd=1e-3,
         clip=1.0, lr_decay=0.99):
    grad_fn, batch_fn, theta0 = fed[:3]
    return run_functional(alg, theta0, grad_fn, batch_fn, n_clients=n_clients, rounds=rounds,
                          local_steps=local_steps, lr=lr, participation=participation, seed=2,
                          weight_decay=wd, clip_norm=clip, lr_decay=lr_decay)


def _assert_same_run(a, b):
    assert len(a.trajectory) >= 4  # at least 3 rounds
    assert torch.equal(a.trajectory, b.trajectory)
    assert len(a.client_endpoints) == len(b.client_endpoints)
    for ea, eb in zip(a.client_endpoints, b.client_endpoints):
        assert torch.equal(ea, eb)


def _info(t=0, lr=0.05, prev_lr=None, K=3, N=6, m=6, wd=0.0, clip=None):
    return RoundInfo(round=t, lr=lr, prev_lr=lr if prev_lr is None else prev_lr, client_steps=(K,) * m,
                     n_clients=N, weight_decay=wd, clip_norm=clip)


def _step(k=0, K=3, lr=0.05, t=0, wd=0.0, clip=None):
    return StepInfo(k=k, K=K, lr=lr, weight_decay=wd, clip_norm=clip, round=t)


def _recording(grad_fn):
    """Wrap an oracle so that every point it is evaluated at is remembered."""
    points: list[torch.Tensor] = []

    def wrapped(theta, batch):
        points.append(theta.detach().clone())
        return grad_fn(theta, batch)

    return wrapped, points


# --- registry, hyperparameters, communication -------------------------------------------------------

@pytest.mark.parametrize("name", GROUP)
def test_registered_with_documented_attributes(name):
    assert name in algorithm_names()
    cls = algorithm_class(name)
    assert cls.name == name and cls.paper and cls.state_where
    assert cls.grad_evals_per_step == DEFAULTS[name].grads
    cls.hparams_cls().validate()  # the documented defaults are valid
    for preset in cls.presets:
        get_algorithm(name, preset=preset)  # every preset builds
    doc = __import__(cls.__module__, fromlist=["_"]).__doc__
    assert "Δ" in doc and "down" in doc and "up" in doc  # update rule + communication documented


BAD_VALUES = [
    ("mofedsam", "alpha", 1.5),
    ("mofedsam", "rho", -0.1),
    ("fedlesam", "rho", -1.0),
    ("fedlesam", "variant", "code_with_bug"),
    ("fedswa", "rho", 1.5),
    ("fedswa", "alpha", 0.0),
    ("fedswa", "lr_multiplier", -2.0),
    ("fedmoswa", "gamma", 0.0),
    ("fedmoswa", "clip_correction", "yes"),
    ("fednsam", "gamma", 1.0),
    ("fednsam", "variant", "nesterov"),
    ("fednsam", "extrapolation", "never"),
    ("fednsam", "momentum_overwrite_bug", 1),
    ("fedvssam", "gamma_l", 0.0),
    ("fedvssam", "gamma_g", 1.2),
    ("fedvssam", "server_lr_scale", 0.0),
    ("fedvssam", "h_init", "ones"),
    ("fedvssam", "lu", "no"),
]


@pytest.mark.parametrize("name,field,value", BAD_VALUES)
def test_bad_hyperparameter_is_rejected_by_name(name, field, value):
    with pytest.raises(ValueError, match=field):
        get_algorithm(name, **{field: value})


COMM = [
    # (row of tests/cases.py, persistent client state = a·d + b floats); up/down come from the row
    ("mofedsam", (0, 0)),
    ("fedlesam", (1, 1)),
    ("fedlesam-last_global_update", (0, 0)),
    ("fedswa", (0, 0)),
    ("fedmoswa", (1, 0)),
    ("fednsam", (0, 0)),
    ("fednsam-paper", (0, 0)),
    ("fednsam-every_step", (0, 0)),
    ("fedvssam", (0, 0)),
    ("fedvssam-no_lf-no_lu", (0, 0)),
]


@pytest.mark.parametrize("label,cstate", COMM)
def test_communication_sizes_are_those_of_real_fl(label, cstate):
    case = BY_LABEL[label]
    grad_fn, batch_fn, theta0, _ = _quadratic()
    d = theta0.numel()
    alg = get_algorithm(case.method, case.params)
    server, info = alg.server_init(theta0), _info()
    for t in range(2):  # sizes in round 0 and after a real update
        info = _info(t=t)
        msg = alg.broadcast(server, info)
        assert sum(v.numel() for v in msg.values()) == case.down_in_round(t) * d
        ups = []
        for i in range(3):
            cs = alg.client_init(theta0)
            theta = start = alg.client_start(msg, cs, info)
            for k in range(3):
                theta, cs, _ = alg.local_step(theta, cs, msg, batch_fn(i, t, k), grad_fn, _step(k, t=t))
            up, cs = alg.upload(start, theta, cs, msg, info, 3)
            assert sum(v.numel() for v in up.values()) == case.up * d + case.up_scalars
            assert sum(v.numel() for v in cs.values()) == cstate[0] * d + cstate[1]
            ups.append(up)
        server = alg.aggregate(server, {k: torch.stack([u[k] for u in ups]) for k in ups[0]}, info)


# --- vmap ------------------------------------------------------------------------------------------

VMAP_CASES = [
    ("mofedsam", {}),
    ("fedlesam", {"rho": 0.05}),
    ("fedlesam", {"variant": "last_global_update", "rho": 0.05}),
    ("fedswa", {}),
    ("fedmoswa", {}),
    ("fedmoswa", {"clip_correction": True}),
    ("fednsam", {"variant": "code"}),
    ("fednsam", {"variant": "paper"}),
    ("fednsam", {"variant": "paper", "extrapolation": "every_step"}),
    ("fedvssam", {}),
    ("fedvssam", {"lf": False, "lu": True}),
]


@pytest.mark.parametrize("name,params", VMAP_CASES)
def test_local_step_under_vmap_matches_sequential(name, params):
    fed = _mlp()
    grad_fn, batch_fn, theta0 = fed
    alg = get_algorithm(name, **params)
    # two warm-up rounds so that messages and client states are non-trivial
    run = _run(alg, fed, rounds=2, n_clients=3, participation=1.0, local_steps=2, clip=1.0)
    t = 2
    info = _info(t=t, lr=0.05 * 0.99**t, prev_lr=0.05 * 0.99, K=2, N=3, m=3, wd=1e-3, clip=1.0)
    msg = alg.broadcast(run.server, info)
    states = [run.client_states.get(i) or alg.client_init(theta0) for i in range(3)]
    starts = [alg.client_start(msg, cs, info) for cs in states]
    extra = [v for key, v in msg.items() if key != "theta"] + [v for cs in states for v in cs.values()]
    extra.append(msg["theta"] - run.server["theta"])  # FedNSAM (code) sends the look-ahead point
    assert name == "fedswa" or any(bool(v.abs().sum() > 0) for v in extra)  # state is non-trivial
    for k in range(2):
        step = _step(k, K=2, lr=info.lr, t=t, wd=1e-3, clip=1.0)
        batches = [batch_fn(i, t, k) for i in range(3)]
        seq = [alg.local_step(th, cs, msg, b, grad_fn, step) for th, cs, b in zip(starts, states, batches)]

        def one(theta, cstate, batch):
            return alg.local_step(theta, cstate, msg, batch, grad_fn, step)

        stacked_cs = {key: torch.stack([cs[key] for cs in states]) for key in states[0]}
        stacked_b = (torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches]))
        th_v, cs_v, loss_v = vmap(one)(torch.stack(starts), stacked_cs, stacked_b)
        for i, (th_s, cs_s, loss_s) in enumerate(seq):
            torch.testing.assert_close(th_v[i], th_s, atol=1e-6, rtol=0)
            torch.testing.assert_close(loss_v[i], loss_s, atol=1e-6, rtol=0)
            for key in cs_s:
                torch.testing.assert_close(cs_v[key][i], cs_s[key], atol=1e-6, rtol=0)
        starts = [s[0] for s in seq]
        states = [s[1] for s in seq]


# --- exact reductions ------------------------------------------------------------------------------

REDUCTIONS = [
    # (method, its hparams, the method it reproduces bit for bit, that one's hparams, federation)
    ("fedswa", {"rho": 1.0, "alpha": 1.0}, "fedavg", {}, "quadratic"),
    ("fedswa", {"rho": 1.0, "alpha": 1.0}, "fedavg", {}, "mlp"),
    ("mofedsam", {"alpha": 1.0}, "fedsam", {}, "quadratic"),
    ("mofedsam", {"alpha": 1.0, "rho": 0.05}, "fedsam", {"rho": 0.05}, "mlp"),
    ("fednsam", {"variant": "code", "gamma": 0.0}, "fedsam", {"rho": 0.05}, "quadratic"),
    ("fednsam", {"variant": "code", "gamma": 0.0}, "fedsam", {"rho": 0.05}, "mlp"),
    ("fednsam", {"variant": "paper", "gamma": 0.0, "rho": 0.0}, "fedavg", {}, "quadratic"),
    ("fedlesam", {"rho": 0.0}, "fedavg", {}, "quadratic"),
    ("fedlesam", {"rho": 0.0, "variant": "last_global_update"}, "fedavg", {}, "quadratic"),
    # FedVSSAM "base": γ_l = γ_g = 1 and η_g = η_t K. The server rule is evaluated in the expanded
    # form θ + β(γ_g Δ̄ − (1−γ_g)ηK h) (algebraically θ − η_g h^{t+1}), so the reduction is exact.
    ("fedvssam", {"gamma_l": 1.0, "gamma_g": 1.0, "server_lr_scale": 1.0, "rho": 0.1}, "fedsam",
     {"rho": 0.1}, "quadratic"),
    ("fedvssam", {"preset": "base", "rho": 0.05}, "fedsam", {"rho": 0.05}, "mlp"),
]


@pytest.mark.parametrize("name,params,ref,ref_params,fed", REDUCTIONS)
def test_exact_reduction(name, params, ref, ref_params, fed):
    federation = _quadratic() if fed == "quadratic" else _mlp()
    a = _run(get_algorithm(name, **params), federation)
    b = _run(get_algorithm(ref, **ref_params), federation)
    _assert_same_run(a, b)
    assert not torch.equal(a.trajectory[-1], a.trajectory[0])  # something happened


def test_fedvssam_server_rule_is_the_papers_formula():
    # The expanded evaluation agrees with θ − η_g h^{t+1}, h^{t+1} = (1−γ_g)h + γ_g·(θ − mean θ_K)/(ηK),
    # to rounding (rtol 1e-12 in float64: the two forms differ only in the order of float operations).
    alg = get_algorithm("fedvssam", gamma_l=0.4, gamma_g=0.6, server_lr_scale=0.7)
    gen = torch.Generator().manual_seed(0)
    theta, h = torch.randn(7, generator=gen, dtype=torch.float64), torch.randn(7, generator=gen, dtype=torch.float64)
    ends = theta + 0.1 * torch.randn(4, 7, generator=gen, dtype=torch.float64)
    info = _info(t=3, lr=0.03, K=5)
    new = alg.aggregate({"theta": theta, "h": h}, {"delta": ends - theta}, info)
    g = (theta - ends.mean(0)) / (0.03 * 5)
    h_expected = 0.4 * h + 0.6 * g
    torch.testing.assert_close(new["h"], h_expected, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(new["theta"], theta - 0.7 * 0.03 * 5 * h_expected, rtol=1e-12, atol=1e-14)
    # gu=False: the server steps along the raw pseudo-gradient and h^{t+1} = g^{t+1}
    off = get_algorithm("fedvssam", gu=False, server_lr_scale=0.7).aggregate(
        {"theta": theta, "h": h}, {"delta": ends - theta}, info)
    torch.testing.assert_close(off["h"], g, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(off["theta"], theta - 0.7 * 0.03 * 5 * g, rtol=1e-12, atol=1e-14)


def test_fedlesam_variants_coincide_under_full_participation():
    # θ_old,i = θ^{t−1} for every client, and θ^{t−1} − θ^t = −(θ^t − θ^{t−1}) exactly in IEEE arithmetic
    fed = _quadratic()
    a = _run(get_algorithm("fedlesam", rho=0.2), fed, participation=1.0, rounds=4)
    b = _run(get_algorithm("fedlesam", rho=0.2, variant="last_global_update"), fed, participation=1.0, rounds=4)
    _assert_same_run(a, b)
    c = _run(get_algorithm("fedavg"), fed, participation=1.0, rounds=4)
    assert not torch.equal(a.trajectory[-1], c.trajectory[-1])  # the perturbation is active


# --- where the gradients are evaluated -------------------------------------------------------------

def test_fedlesam_perturbs_along_the_clients_own_history():
    grad_fn, batch_fn, theta0, _ = _quadratic()
    alg = get_algorithm("fedlesam", rho=0.3)
    rec, points = _recording(grad_fn)
    cs = alg.client_init(theta0)
    msg0 = {"theta": theta0 + 1.0}
    # first participation: no perturbation, one gradient per step
    th, cs, loss = alg.local_step(msg0["theta"], cs, msg0, batch_fn(0, 0, 0), rec, _step())
    assert len(points) == 1 and torch.equal(points[0], msg0["theta"])
    _, cs = alg.upload(msg0["theta"], th, cs, msg0, _info(), 1)
    assert torch.equal(cs["theta_old"], msg0["theta"]) and float(cs["seen"]) == 1.0
    # later participation: δ = ρ(θ_old − θ^t)/‖θ_old − θ^t‖; the loss reported is the perturbed one
    msg1 = {"theta": theta0 - 0.5 * torch.arange(5, dtype=torch.float64)}
    points.clear()
    th, _, loss = alg.local_step(msg1["theta"], cs, msg1, batch_fn(0, 3, 0), rec, _step(t=3))
    diff = msg0["theta"] - msg1["theta"]
    expected = msg1["theta"] + 0.3 * diff / diff.norm()
    assert len(points) == 1
    torch.testing.assert_close(points[0], expected, rtol=1e-12, atol=1e-14)
    assert torch.equal(loss, grad_fn(points[0], batch_fn(0, 3, 0))[1])


@pytest.mark.parametrize("extrapolation", ["round_start", "every_step"])
def test_fednsam_paper_variant_perturbs_along_minus_momentum(extrapolation):
    grad_fn, batch_fn, theta0, _ = _quadratic()
    alg = get_algorithm("fednsam", variant="paper", extrapolation=extrapolation, rho=0.2, gamma=0.5)
    assert alg.grad_evals_per_step == 1 and get_algorithm("fednsam").grad_evals_per_step == 2
    m = torch.tensor([0.3, -0.1, 0.0, 0.2, 0.4], dtype=torch.float64)
    server = {"theta": theta0 + 1.0, "m": m}
    msg = alg.broadcast(server, _info(t=1))
    start = alg.client_start(msg, {}, _info(t=1))
    rec, points = _recording(grad_fn)
    alg.local_step(start, {}, msg, batch_fn(0, 1, 0), rec, _step(t=1))
    assert len(points) == 1
    if extrapolation == "round_start":
        torch.testing.assert_close(start, server["theta"] + 0.5 * m, rtol=0, atol=0)
        expected = start - 0.2 * m / m.norm()
    else:
        assert torch.equal(start, server["theta"])
        expected = start + 0.5 * m - 0.2 * m / m.norm()
    torch.testing.assert_close(points[0], expected, rtol=1e-12, atol=1e-14)


def test_mofedsam_sends_minus_last_update_over_K_prev_lr():
    fed = _quadratic()
    alg = get_algorithm("mofedsam", alpha=0.3)
    assert torch.equal(alg.broadcast(alg.server_init(fed[2]), _info())["m"], torch.zeros(5, dtype=torch.float64))
    run = _run(alg, fed, rounds=1, participation=1.0, lr=0.05, lr_decay=0.9, wd=0.0, clip=None)
    delta_bar = (run.client_endpoints[0] - fed[2]).mean(0)
    msg = alg.broadcast(run.server, _info(t=1, lr=0.045, prev_lr=0.05, K=3))
    torch.testing.assert_close(msg["m"], -delta_bar / (3 * 0.05), rtol=1e-12, atol=0)
    # one local step: θ − η (α g̃ + (1 − α) m) with g̃ the SAM gradient of FedSAM
    grad_fn, batch_fn, _, _ = fed
    theta, batch = msg["theta"], batch_fn(0, 1, 0)
    th, _, _ = alg.local_step(theta, {}, msg, batch, grad_fn, _step(lr=0.045, t=1))
    g = grad_fn(theta, batch)[0]
    g_sam = grad_fn(theta + 0.1 * g / (g.norm() + 1e-12), batch)[0]
    torch.testing.assert_close(th, theta - 0.045 * (0.3 * g_sam + 0.7 * msg["m"]), rtol=1e-12, atol=1e-14)


# --- FedNSAM's server momentum ---------------------------------------------------------------------

@pytest.mark.parametrize("bug", [False, True])
def test_fednsam_momentum_by_hand_over_three_rounds(bug):
    fed = _quadratic()
    grad_fn, batch_fn, theta0, _ = fed
    gamma, K, lr = 0.5, 3, 0.05
    alg = get_algorithm("fednsam", variant="code", gamma=gamma, rho=0.05, momentum_overwrite_bug=bug)
    run = _run(alg, fed, rounds=3, participation=1.0, local_steps=K, lr=lr, lr_decay=1.0, wd=0.0, clip=None)
    sam = get_algorithm("fedsam", rho=0.05)
    theta, m = theta0.clone(), torch.zeros_like(theta0)
    deltas = []
    for t in range(3):
        start = theta + gamma * m  # every client starts at the look-ahead point
        ends = []
        for i in range(6):
            th = start
            for k in range(K):
                th, _, _ = sam.local_step(th, {}, {}, batch_fn(i, t, k), grad_fn, _step(k, K, lr, t))
            ends.append(th)
        ends = torch.stack(ends)
        assert torch.equal(ends, run.client_endpoints[t])  # clients = FedSAM from θ^t + γ m^{t−1}
        delta_bar = (ends - start).mean(0)
        deltas.append(delta_bar)
        # official repo: round 0 takes the empty-momentum branch (m = Δ̄), later rounds overwrite
        m = ((1 + gamma) * delta_bar if t > 0 else delta_bar) if bug else gamma * m + delta_bar
        theta = theta + m
        torch.testing.assert_close(run.trajectory[t + 1], theta, rtol=1e-12, atol=1e-14)
        if not bug or t == 0:  # θ^{t+1} = θ_start + Δ̄ = mean of the client models
            torch.testing.assert_close(run.trajectory[t + 1], ends.mean(0), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(run.server["m"], m, rtol=1e-12, atol=1e-14)
    accumulated = gamma**2 * deltas[0] + gamma * deltas[1] + deltas[2]
    overwritten = (1 + gamma) * deltas[2]
    expected, other = (overwritten, accumulated) if bug else (accumulated, overwritten)
    torch.testing.assert_close(run.server["m"], expected, rtol=1e-12, atol=1e-14)
    assert (run.server["m"] - other).norm() > 1e-3


def test_fednsam_official_repo_round_zero_takes_the_empty_momentum_branch():
    """Official code: m^0 = Δ̄^0 (not (1+γ)Δ̄^0), so θ¹ is the same as in the accumulating form."""
    fed = _quadratic()
    runs = {preset: _run(get_algorithm("fednsam", preset=preset), fed, rounds=2, participation=1.0,
                         lr_decay=1.0, wd=0.0, clip=None) for preset in ("code", "official_repo")}
    code, official = runs["code"], runs["official_repo"]
    delta0 = (official.client_endpoints[0] - fed[2]).mean(0)
    torch.testing.assert_close(official.trajectory[1], fed[2] + delta0, rtol=1e-12, atol=1e-14)
    assert torch.equal(official.trajectory[1], code.trajectory[1])
    # round 1 overwrites: m¹ = (1+γ)Δ̄¹, with Δ̄¹ relative to the look-ahead start θ¹ + γ m⁰
    start1 = official.trajectory[1] + 0.85 * delta0
    delta1 = (official.client_endpoints[1] - start1).mean(0)
    torch.testing.assert_close(official.server["m"], 1.85 * delta1, rtol=1e-12, atol=1e-14)
    assert not torch.allclose(official.trajectory[2], code.trajectory[2])


# --- FedSWA / FedMoSWA -----------------------------------------------------------------------------

@pytest.mark.parametrize("preset,rho,mult", [(None, 0.1, 1.0), (None, 0.5, 1.0), ("code", 0.0, 2.0)])
def test_fedswa_in_round_lr_falls_linearly(preset, rho, mult):
    params = {"preset": preset} if preset else {"rho": rho}
    alg = get_algorithm("fedswa", **params)
    ones = torch.ones(3, dtype=torch.float64)

    def constant_grad(theta, batch):  # the step length is then the step size itself
        return ones, (theta * 0).sum()

    lr, K = 0.2, 8
    theta = torch.zeros(3, dtype=torch.float64)
    sizes = []
    for k in range(K):
        nxt, _, _ = alg.local_step(theta, {}, {"theta": theta}, None, constant_grad, _step(k, K, lr))
        sizes.append(float((theta - nxt)[0]))
        theta = nxt
    assert sizes[0] == pytest.approx(mult * lr, rel=1e-12)  # first step at full (multiplied) lr
    steps = [b - a for a, b in zip(sizes, sizes[1:])]
    assert all(s == pytest.approx(steps[0], rel=1e-9) for s in steps)  # linear
    assert sizes[-1] + steps[0] == pytest.approx(mult * rho * lr, rel=1e-9, abs=1e-15)  # reaches ρη at k = K
    assert sum(sizes) == pytest.approx(swa_learning_rate_sum(lr, K, rho, mult), rel=1e-12)
    assert swa_learning_rate(lr, 3, K, 1.0) == lr  # ρ = 1: constant lr, exactly


def test_fedmoswa_round_zero_and_control_variates_by_hand():
    fed = _quadratic()
    K, lr = 3, 0.05
    kw = dict(rounds=1, participation=1.0, local_steps=K, lr=lr, wd=0.0, clip=None)
    avg = _run(get_algorithm("fedavg"), fed, **kw)
    for first_mean in (False, True):
        alg = get_algorithm("fedmoswa", rho=1.0, gamma=0.2, c_first_round_mean=first_mean)
        run = _run(alg, fed, **kw)
        # c = c_i = 0 in round 0, so with ρ = 1 the local steps are FedAvg's bit for bit
        assert torch.equal(run.client_endpoints[0], avg.client_endpoints[0])
        c_new = torch.stack([run.client_states[i]["c_i"] for i in range(6)])
        deltas = run.client_endpoints[0] - fed[2]
        torch.testing.assert_close(c_new, -deltas / (K * lr), rtol=1e-12, atol=1e-14)  # option II
        gamma = 1.0 if first_mean else 0.2
        torch.testing.assert_close(run.server["c"], gamma * c_new.mean(0), rtol=1e-12, atol=1e-14)
    # with the SWA schedule the variate divides by the exact Σ_k η_k
    alg = get_algorithm("fedmoswa", rho=0.1)
    run = _run(alg, fed, **kw)
    deltas = run.client_endpoints[0] - fed[2]
    c0 = run.client_states[0]["c_i"]
    torch.testing.assert_close(c0, -deltas[0] / swa_learning_rate_sum(lr, K, 0.1), rtol=1e-12, atol=1e-14)


def test_fedmoswa_local_step_by_hand():
    grad_fn, batch_fn, theta0, _ = _quadratic()
    gen = torch.Generator().manual_seed(1)
    c, c_i = torch.randn(5, generator=gen, dtype=torch.float64), torch.randn(5, generator=gen, dtype=torch.float64)
    theta, batch = theta0 + 0.3, batch_fn(1, 0, 2)
    step = _step(k=2, K=4, lr=0.1, wd=1e-3, clip=0.5)
    g = grad_fn(theta, batch)[0]
    lr_k = 0.1 * (1 - 0.9 * 2 / 4)
    clip = lambda v: v * min(1.0, 0.5 / (float(v.norm()) + 1e-6))  # noqa: E731
    for clip_corr, d in ((False, clip(g) + (c - c_i)), (True, clip(g + c - c_i))):
        alg = get_algorithm("fedmoswa", rho=0.1, clip_correction=clip_corr)
        th, _, _ = alg.local_step(theta, {"c_i": c_i}, {"theta": theta, "c": c}, batch, grad_fn, step)
        torch.testing.assert_close(th, theta - lr_k * (d + 1e-3 * theta), rtol=1e-12, atol=1e-14)


def test_fedmoswa_reaches_the_global_optimum_where_fedavg_stalls():
    # heterogeneous quadratic, full participation, no noise: the control variates remove client drift
    fed = _quadratic(n_clients=8, noise=0.0, heterogeneity=1.0)
    theta_star = fed[3]
    kw = dict(rounds=150, n_clients=8, participation=1.0, local_steps=10, lr=0.05, wd=0.0, clip=None,
              lr_decay=1.0)
    dist = {name: float((_run(get_algorithm(name), fed, **kw).trajectory[-1] - theta_star).norm())
            for name in ("fedmoswa", "fedavg", "fedswa")}
    assert dist["fedmoswa"] < 1e-6
    assert dist["fedavg"] > 1e-2 and dist["fedswa"] > 1e-2


# --- FedVSSAM ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("lf", [True, False])
@pytest.mark.parametrize("lu", [True, False])
def test_fedvssam_switches_by_hand(lf, lu):
    grad_fn, batch_fn, theta0, _ = _quadratic()
    gl, rho = 0.3, 0.2
    alg = get_algorithm("fedvssam", gamma_l=gl, rho=rho, lf=lf, lu=lu)
    h = torch.tensor([1.0, -2.0, 0.5, 0.0, 0.3], dtype=torch.float64)
    theta, batch = theta0 + 0.7, batch_fn(2, 1, 0)
    msg = alg.broadcast({"theta": theta, "h": h}, _info(t=1))
    rec, points = _recording(grad_fn)
    th, _, loss = alg.local_step(theta, {}, msg, batch, rec, _step(lr=0.1, t=1))
    g, f = grad_fn(theta, batch)
    ascent = (1 - gl) * h + gl * g if lf else g
    g_sam = grad_fn(theta + rho * ascent / ascent.norm(), batch)[0]
    u = (1 - gl) * h + gl * g_sam if lu else g_sam
    assert len(points) == 2 and torch.equal(loss, f)  # two gradients; the loss is the unperturbed one
    torch.testing.assert_close(points[1], theta + rho * ascent / ascent.norm(), rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(th, theta - 0.1 * u, rtol=1e-12, atol=1e-14)


def test_fedvssam_first_round_init_is_a_fedsam_round():
    fed = _quadratic()
    kw = dict(rounds=1, participation=1.0, wd=0.0, clip=None)
    run = _run(get_algorithm("fedvssam", h_init="first_round"), fed, **kw)
    ref = _run(get_algorithm("fedsam", rho=0.05), fed, **kw)
    assert torch.equal(run.client_endpoints[0], ref.client_endpoints[0])
    assert torch.equal(run.trajectory, ref.trajectory)  # θ¹ = θ⁰ − η_g g¹ with β = 1
    g1 = -(ref.client_endpoints[0] - fed[2]).mean(0) / (0.05 * 3)
    torch.testing.assert_close(run.server["h"], g1, rtol=1e-12, atol=1e-14)  # h¹ = g¹
    zero = _run(get_algorithm("fedvssam"), fed, **kw)
    torch.testing.assert_close(zero.server["h"], 0.6 * -(zero.client_endpoints[0] - fed[2]).mean(0) / (0.05 * 3),
                               rtol=1e-12, atol=1e-14)  # h⁰ = 0: h¹ = γ_g g¹


def test_fedvssam_local_steps_have_gamma_l_squared_the_variance_of_their_sam_gradients():
    # What the method *does*: the step (θ − θ')/η that fedlab's ``local_step`` takes (wd = 0, no clip)
    # from one point θ with a fixed global direction h, over 48 minibatches ξ_b of one client (float64
    # MLP, 256 random samples). Against the spec computed here from plain oracle calls,
    # h_b = (1−γ_l)h + γ_l g_b and g̃_b = ∇f(θ + ρ h_b/‖h_b‖; ξ_b):
    # (i) every step equals (1−γ_l)h + γ_l g̃_b (rel. 1e-9: float64 rounding); hence
    # (ii) Var_b[step] = γ_l² Var_b[g̃_b], while the ablation lu=False steps along g̃_b itself, and FedSAM's
    # steps (perturbed along g_b) are far noisier. A step that ignored h, mixed with the wrong weights,
    # perturbed along another direction or used another batch fails (i) and (ii).
    grad_fn, _, theta = _mlp(torch.float64)
    gen = torch.Generator().manual_seed(3)
    x, y = torch.randn(256, 60, generator=gen, dtype=torch.float64), torch.randint(0, 10, (256,), generator=gen)
    full_grad = grad_fn(theta, (x, y))[0]
    h = full_grad + 0.1 * full_grad.norm() * torch.randn(theta.numel(), generator=gen, dtype=torch.float64) \
        / theta.numel() ** 0.5
    batches = [(x[idx], y[idx]) for idx in torch.randperm(256, generator=gen).repeat(2)[: 48 * 8].view(48, 8)]
    lr, rho = 0.05, 0.05
    step = _step(lr=lr, t=1)  # wd = 0, no clipping: the step is η times the direction

    def steps(alg):
        msg = alg.broadcast({"theta": theta, "h": h}, _info(t=1))
        return torch.stack([(theta - alg.local_step(theta, {}, msg, b, grad_fn, step)[0]) / lr for b in batches])

    def total_variance(v):
        return float(((v - v.mean(0)) ** 2).sum(1).mean())

    var_sam = total_variance(steps(get_algorithm("fedsam", rho=rho)))
    var_u = {}
    for gl in (0.7, 0.4, 0.1):
        u = steps(get_algorithm("fedvssam", gamma_l=gl, rho=rho))
        g_tilde = []
        for b in batches:
            h_b = (1 - gl) * h + gl * grad_fn(theta, b)[0]
            g_tilde.append(grad_fn(theta + rho * h_b / h_b.norm(), b)[0])
        g_tilde = torch.stack(g_tilde)
        torch.testing.assert_close(u, (1 - gl) * h + gl * g_tilde, rtol=1e-9, atol=1e-12)
        var_u[gl] = total_variance(u)
        assert var_u[gl] == pytest.approx(gl**2 * total_variance(g_tilde), rel=1e-9)
        no_lu = steps(get_algorithm("fedvssam", gamma_l=gl, rho=rho, lu=False))
        torch.testing.assert_close(no_lu, g_tilde, rtol=1e-9, atol=1e-12)
        assert var_u[gl] < 2 * gl**2 * var_sam  # suppressed relative to FedSAM's steps
    assert var_u[0.7] > var_u[0.4] > var_u[0.1]


def test_fedlesam_has_one_class_per_declared_variant():
    import typing

    from fedlab.algorithms.fedlesam import _BY_VARIANT, FedLESAMParams

    declared = typing.get_args(typing.get_type_hints(FedLESAMParams)["variant"])
    assert set(declared) == set(_BY_VARIANT) and all(c.variant == v for v, c in _BY_VARIANT.items())


@pytest.mark.parametrize("variant", ["paper", "last_global_update"])
def test_fedlesam_variant_selects_its_own_class(variant):
    from fedlab.algorithms.fedlesam import FedLESAM

    alg = get_algorithm("fedlesam", variant=variant)
    assert isinstance(alg, FedLESAM) and type(alg) is not FedLESAM and type(alg).variant == variant
    assert type(FedLESAM(variant=variant)) is type(alg)  # the class itself dispatches like the registry
    other = "paper" if variant == "last_global_update" else "last_global_update"
    with pytest.raises(ValueError, match="variant"):
        type(alg)(variant=other)  # a variant class refuses the other variant's hyperparameters
