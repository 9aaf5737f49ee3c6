"""Tests for the drift-correction / dynamic-regularisation group: FedProx, SCAFFOLD, FedDyn, FedACG,
FedGAMMA, FedSpeed, FedSMOO (the paper's method) and FedSMOO-adaptive (the blog's variant).

What is checked: exact reductions to the simpler method (``torch.equal`` on every global model and
every client endpoint), hand-computed single steps and server updates, that drift correction reaches
θ* on a heterogeneous quadratic federation where FedAvg stalls, communication sizes, hyperparameter
validation, and that ``local_step`` gives the same numbers under ``torch.func.vmap``.
"""
from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
import torch

from cases import DEFAULTS
from fedlab.algorithms import RoundInfo, StepInfo, algorithm_names, get_algorithm
from fedlab.algorithms.base import clip_by_norm
from fedlab.engine.sampling import sample_clients
from fedlab.toy import run_functional, quadratic_federation
from fedlab.models import FlatModel, build_model

GROUP = ("fedprox", "scaffold", "feddyn", "fedacg", "fedgamma", "fedspeed", "fedsmoo", "fedsmoo_adaptive")


@pytest.fixture(autouse=True)
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


# --- federations ---------------------------------------------------------------------------------

def _quadratic(n_clients=6, dim=5, noise=0.1, heterogeneity=1.0):
    grad_fn, batch_fn, theta_star, problems = quadratic_federation(
        n_clients, dim, seed=3, heterogeneity=heterogeneity, noise=noise)
    return grad_fn, batch_fn, torch.zeros(dim, dtype=torch.float64), theta_star, problems


_MLP: dict[str, object] = {}


def _mlp():
    """A small float32 MLP (60 → 10) with random data; batches depend on (client, round, step)."""
    if "model" not in _MLP:
        _MLP["model"] = FlatModel(build_model("mlp", (60,), 10, seed=0))
    model = _MLP["model"]

    def batch_fn(client, round_, step):
        g = torch.Generator().manual_seed(10_007 * client + 101 * round_ + step)
        return torch.randn(8, 60, generator=g), torch.randint(0, 10, (8,), generator=g)

    return model.grad_fn, batch_fn, model.theta0()


def _run(alg, fed, *, rounds, n_clients, participation, local_steps=3, lr=0.05, wd=1e-3, clip=1.0):
    grad_fn, batch_fn, theta0 = fed[:3]
    return run_functional(alg, theta0, grad_fn, batch_fn, n_clients=n_clients, rounds=rounds,
                          local_steps=local_steps, lr=lr, participation=participation, seed=1,
                          weight_decay=wd, clip_norm=clip, lr_decay=0.99)


def _assert_same_run(a, b):
    assert torch.equal(a.trajectory, b.trajectory)
    assert len(a.client_endpoints) == len(b.client_endpoints)
    for ea, eb in zip(a.client_endpoints, b.client_endpoints):
        assert torch.equal(ea, eb)


# --- exact reductions ------------------------------------------------------------------------------

REDUCTIONS = [
    # (method, its hyperparameters, the method it must reproduce exactly, that one's hyperparameters)
    ("fedprox", {"mu": 0.0}, "fedavg", {}),
    ("fedacg", {"lam": 0.0, "beta": 0.0}, "fedavg", {}),
    ("fedgamma", {"rho": 0.0}, "scaffold", {}),
    ("fedgamma", {"rho": 0.0, "perturb_with_correction": True}, "scaffold", {}),
    ("fedspeed", {"rho": 0.0, "lam": 0.1}, "feddyn", {"lam": 0.1}),
    ("fedsmoo", {"rho": 0.0, "lam": 0.1}, "feddyn", {"lam": 0.1}),
    ("fedsmoo_adaptive", {"warmup_rounds": 4}, "fedavg", {}),  # warm-up rounds are plain FedAvg
]


@pytest.mark.parametrize("federation", ["quadratic", "mlp"])
@pytest.mark.parametrize("method,params,base,base_params", REDUCTIONS,
                         ids=[f"{r[0]}-{'-'.join(r[1])}" for r in REDUCTIONS])
def test_reduction_is_exact(method, params, base, base_params, federation):
    # Weight decay, clipping (active at C = 1) and partial participation are on, so every branch of
    # the shared code runs; 4 rounds with persistent client state.
    fed = _quadratic() if federation == "quadratic" else _mlp()
    a = _run(get_algorithm(method, **params), fed, rounds=4, n_clients=6, participation=0.5)
    b = _run(get_algorithm(base, **base_params), fed, rounds=4, n_clients=6, participation=0.5)
    _assert_same_run(a, b)
    assert not torch.equal(a.trajectory[-1], a.trajectory[0])  # something was trained


@pytest.mark.parametrize("method,params,base", [
    ("fedprox", {"mu": 0.1}, "fedavg"),
    ("fedacg", {}, "fedavg"),
    ("fedgamma", {}, "scaffold"),
    ("fedspeed", {}, "feddyn"),
    ("fedsmoo", {}, "feddyn"),
])
def test_nonzero_parameters_change_the_run(method, params, base):
    # The reductions above are only meaningful if the extra term does something when switched on.
    fed = _quadratic()
    a = _run(get_algorithm(method, **params), fed, rounds=3, n_clients=6, participation=0.5)
    b = _run(get_algorithm(base), fed, rounds=3, n_clients=6, participation=0.5)
    assert not torch.allclose(a.trajectory[-1], b.trajectory[-1], rtol=0, atol=1e-8)


def test_fedsmoo_adaptive_leaves_fedavg_after_warmup():
    fed = _mlp()
    a = _run(get_algorithm("fedsmoo_adaptive", warmup_rounds=2), fed, rounds=3, n_clients=4, participation=1.0)
    b = _run(get_algorithm("fedavg"), fed, rounds=3, n_clients=4, participation=1.0)
    assert torch.equal(a.trajectory[:3], b.trajectory[:3])
    assert not torch.equal(a.trajectory[3], b.trajectory[3])


# --- drift correction ----------------------------------------------------------------------------

def test_drift_correction_reaches_the_optimum_where_fedavg_stalls():
    # 10 clients f_i = ½(θ − b_i)ᵀA_i(θ − b_i), distinct A_i, K = 10, full participation, no noise:
    # FedAvg's fixed point is biased; SCAFFOLD's and FedDyn's fixed points are θ*.
    grad_fn, batch_fn, theta_star, _ = quadratic_federation(10, 5, seed=0, heterogeneity=2.0, noise=0.0)
    theta0 = torch.zeros(5, dtype=torch.float64)

    def distance(alg):
        run = run_functional(alg, theta0, grad_fn, batch_fn, n_clients=10, rounds=100, local_steps=10,
                             lr=0.05)
        return float(torch.linalg.vector_norm(run.trajectory[-1] - theta_star))

    scale = float(torch.linalg.vector_norm(theta_star))
    assert distance(get_algorithm("fedavg")) > 1e-2 * scale
    assert distance(get_algorithm("scaffold")) < 1e-6 * scale
    # FedDyn's rate is set by λ; with the default 0.1 it also converges but needs ~400 rounds here.
    assert distance(get_algorithm("feddyn", lam=1.0)) < 1e-6 * scale


# --- server algebra by hand ------------------------------------------------------------------------

def test_feddyn_server_equals_closed_form_every_round():
    # θ^{t+1} = mean_{i∈S_t} θ_{i,K} + (1/N) Σ_{all i} h_i, with h_i = Σ of client i's past Δ_i.
    # fedlab keeps h̄ incrementally and forms θ^t + mean Δ + h̄, so agreement is to rounding only
    # (float64, rtol 1e-12).
    n, rounds = 6, 5
    grad_fn, batch_fn, theta0, _, _ = _quadratic(n_clients=n)
    alg = get_algorithm("feddyn", lam=0.3)
    run = run_functional(alg, theta0, grad_fn, batch_fn, n_clients=n, rounds=rounds, local_steps=4,
                         lr=0.05, participation=0.5, seed=1)
    h = torch.zeros(n, 5, dtype=torch.float64)
    for t in range(rounds):
        clients = sample_clients(t, n, 0.5, seed=1).tolist()
        ends = run.client_endpoints[t]
        for row, i in enumerate(clients):
            h[i] += ends[row] - run.trajectory[t]
        expected = ends.mean(dim=0) + h.sum(dim=0) / n
        torch.testing.assert_close(run.trajectory[t + 1], expected, rtol=1e-12, atol=1e-13)
    for i, state in run.client_states.items():
        torch.testing.assert_close(state["h"], h[i], rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(run.server["h_mean"], h.mean(dim=0), rtol=1e-12, atol=1e-13)


def test_scaffold_control_variates_by_hand():
    # c_i⁺ = c_i − c − Δ_i/(K η); server c = (1/N) Σ_{all i} c_i at all times (both start at 0).
    n, K, lr = 6, 4, 0.05
    grad_fn, batch_fn, theta0, _, _ = _quadratic(n_clients=n)
    alg = get_algorithm("scaffold")
    run = run_functional(alg, theta0, grad_fn, batch_fn, n_clients=n, rounds=4, local_steps=K, lr=lr,
                         participation=0.5, seed=1)
    c_all = torch.zeros(n, 5, dtype=torch.float64)
    c = torch.zeros(5, dtype=torch.float64)
    for t in range(4):
        clients = sample_clients(t, n, 0.5, seed=1).tolist()
        for row, i in enumerate(clients):
            delta = run.client_endpoints[t][row] - run.trajectory[t]
            c_all[i] = c_all[i] - c - delta / (K * lr)
        c = c_all.sum(dim=0) / n
        torch.testing.assert_close(run.trajectory[t + 1],
                                   run.trajectory[t] + (run.client_endpoints[t] - run.trajectory[t]).mean(0))
    for i, state in run.client_states.items():
        torch.testing.assert_close(state["c_i"], c_all[i], rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(run.server["c"], c, rtol=1e-12, atol=1e-13)
    assert float(torch.linalg.vector_norm(c)) > 0


def test_fedacg_server_is_mean_of_client_models_and_momentum():
    # θ^{t+1} = mean_S θ_{i,K} and m^t = λ m^{t−1} + mean Δ_i, i.e. θ^{t+1} − θ^t = m^t (rounding only).
    grad_fn, batch_fn, theta0, _, _ = _quadratic()
    lam = 0.85
    alg = get_algorithm("fedacg", lam=lam, beta=1e-2)
    run = run_functional(alg, theta0, grad_fn, batch_fn, n_clients=6, rounds=5, local_steps=4, lr=0.05,
                         participation=0.5, seed=1)
    m = torch.zeros(5, dtype=torch.float64)
    for t in range(5):
        ends = run.client_endpoints[t]
        torch.testing.assert_close(run.trajectory[t + 1], ends.mean(0), rtol=1e-12, atol=1e-13)
        start = run.trajectory[t] + lam * m
        m = lam * m + (ends - start).mean(0)
        torch.testing.assert_close(run.trajectory[t + 1] - run.trajectory[t], m, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(run.server["m"], m, rtol=1e-12, atol=1e-13)
    info = _info(round_=5, lr=0.05, K=4, n_clients=6, n_sampled=3)
    torch.testing.assert_close(alg.broadcast(run.server, info)["theta"], run.trajectory[-1] + lam * m)


# --- single steps by hand --------------------------------------------------------------------------

def _quad_setup(dim=5):
    grad_fn, _, _, _, problems = _quadratic(dim=dim)
    a, b = problems[0]
    gen = torch.Generator().manual_seed(7)
    rand = lambda: torch.randn(dim, generator=gen, dtype=torch.float64)  # noqa: E731
    batch = (torch.tensor(0), torch.zeros(dim, dtype=torch.float64))
    grad = lambda th: a @ (th - b)  # noqa: E731
    loss = lambda th: 0.5 * (th - b) @ a @ (th - b)  # noqa: E731
    return grad_fn, batch, grad, loss, rand


def _info(round_=0, lr=0.1, K=1, n_clients=10, n_sampled=2, wd=0.0, clip=None):
    return RoundInfo(round=round_, lr=lr, prev_lr=lr, client_steps=(K,) * n_sampled, n_clients=n_clients,
                     weight_decay=wd, clip_norm=clip)


def _step(k=0, lr=0.1, round_=0, clip=None, wd=0.0):
    return StepInfo(k=k, K=4, lr=lr, weight_decay=wd, clip_norm=clip, round=round_)


def test_fedprox_step_by_hand():
    grad_fn, batch, grad, _, rand = _quad_setup()
    alg = get_algorithm("fedprox", mu=0.2)
    theta, anchor = rand(), rand()
    out, _, _ = alg.local_step(theta, {}, {"theta": anchor}, batch, grad_fn, _step(wd=0.01))
    torch.testing.assert_close(out, theta - 0.1 * (grad(theta) + 0.2 * (theta - anchor) + 0.01 * theta))
    # with clipping, FL-Simulator clips g − μθ^t and adds μθ afterwards
    out, _, _ = alg.local_step(theta, {}, {"theta": anchor}, batch, grad_fn, _step(clip=0.5))
    torch.testing.assert_close(out, theta - 0.1 * (clip_by_norm(grad(theta) - 0.2 * anchor, 0.5) + 0.2 * theta))


@pytest.mark.parametrize("corrected", [False, True])
def test_fedgamma_step_by_hand(corrected):
    grad_fn, batch, grad, _, rand = _quad_setup()
    rho = 0.3
    alg = get_algorithm("fedgamma", rho=rho, perturb_with_correction=corrected)
    theta, c, c_i = rand(), rand(), rand()
    out, _, _ = alg.local_step(theta, {"c_i": c_i}, {"theta": theta, "c": c}, batch, grad_fn, _step())
    v = grad(theta) + (c - c_i) if corrected else grad(theta)
    e = rho * v / torch.linalg.vector_norm(v)
    expected = theta - 0.1 * (grad(theta + e) + c - c_i)
    torch.testing.assert_close(out, expected)
    # the two variants really differ
    other = get_algorithm("fedgamma", rho=rho, perturb_with_correction=not corrected)
    out2, _, _ = other.local_step(theta, {"c_i": c_i}, {"theta": theta, "c": c}, batch, grad_fn, _step())
    assert not torch.allclose(out, out2)


def test_fedspeed_step_by_hand():
    grad_fn, batch, grad, _, rand = _quad_setup()
    alg = get_algorithm("fedspeed", rho=0.3, lam=0.2)
    theta, anchor, h = rand(), rand(), rand()
    out, _, _ = alg.local_step(theta, {"h": h}, {"theta": anchor}, batch, grad_fn, _step(wd=0.01))
    g = grad(theta)
    g_sam = grad(theta + 0.3 * g / torch.linalg.vector_norm(g))
    torch.testing.assert_close(out, theta - 0.1 * (g_sam + 0.2 * (h - anchor) + 0.2 * theta + 0.01 * theta))


def test_fedsmoo_step_and_server_by_hand():
    grad_fn, batch, grad, _, rand = _quad_setup()
    rho, lam = 0.3, 0.2
    alg = get_algorithm("fedsmoo", rho=rho, lam=lam)
    theta, anchor, h, mu, s = rand(), rand(), rand(), rand(), rand()
    out, cstate, _ = alg.local_step(theta, {"h": h, "mu": mu}, {"theta": anchor, "s": s}, batch, grad_fn,
                                    _step())
    v = grad(theta) - mu - s
    e = rho * v / torch.linalg.vector_norm(v)
    torch.testing.assert_close(cstate["mu"], mu + e - s)
    torch.testing.assert_close(cstate["h"], h)
    torch.testing.assert_close(out, theta - 0.1 * (grad(theta + e) + lam * (h - anchor) + lam * theta))
    # upload: Δ_i and μ_i; client keeps h_i + Δ_i
    info = _info()
    up, cs = alg.upload(anchor, out, cstate, {"theta": anchor, "s": s}, info, 1)
    torch.testing.assert_close(up["delta"], out - anchor)
    torch.testing.assert_close(up["mu"], cstate["mu"])
    torch.testing.assert_close(cs["h"], h + out - anchor)
    # server: s = ρ μ̄/‖μ̄‖ over the sampled clients; θ = θ^t + mean Δ + h̄ (h̄ over all N = 10)
    server = alg.server_init(anchor)
    mus, deltas = torch.stack([rand(), rand()]), torch.stack([rand(), rand()])
    new = alg.aggregate(server, {"delta": deltas, "mu": mus}, info)
    mbar = mus.mean(0)
    torch.testing.assert_close(new["s"], rho * mbar / torch.linalg.vector_norm(mbar))
    torch.testing.assert_close(new["h_mean"], deltas.sum(0) / 10)
    torch.testing.assert_close(new["theta"], anchor + deltas.mean(0) + deltas.sum(0) / 10)


def test_fedacg_step_by_hand():
    grad_fn, batch, grad, _, rand = _quad_setup()
    alg = get_algorithm("fedacg", lam=0.85, beta=0.05)
    theta, anchor = rand(), rand()
    out, _, _ = alg.local_step(theta, {}, {"theta": anchor}, batch, grad_fn, _step())
    torch.testing.assert_close(out, theta - 0.1 * (grad(theta) + 2 * 0.05 * (theta - anchor)))


# --- FedSMOO-adaptive --------------------------------------------------------------------------------

@pytest.mark.parametrize("objective", [None, "blog", "perturbed_only"])
def test_fedsmoo_adaptive_lambda_rho_by_hand(objective):
    # objective None = the default, which must be the blog's L(θ) + λ‖θ − θ^t‖² + L(θ + ε)
    grad_fn, batch, grad, loss, rand = _quad_setup()
    alg = get_algorithm("fedsmoo_adaptive", **({} if objective is None else {"objective": objective}))
    clean = 0.0 if objective == "perturbed_only" else 1.0  # weight of the clean gradient ∇L(θ)
    hp = alg.hp
    theta = rand()
    g = grad(theta)
    g_prev = g + 0.4 * torch.linalg.vector_norm(g) * rand() / math.sqrt(5)
    angles = torch.tensor([0.3, 0.5, 0.2, 0.7, 0.4], dtype=torch.float64)
    one = torch.ones((), dtype=torch.float64)
    cstate = {"g_prev": g_prev, "has_prev": one, "angles": angles, "n_angles": 5 * one,
              "lam": 0 * one, "rho": 0 * one}
    msg = {"theta": theta}
    out, cs, _ = alg.local_step(theta, cstate, msg, batch, grad_fn, _step(round_=hp.warmup_rounds))

    cos = float(g @ g_prev / (torch.linalg.vector_norm(g) * torch.linalg.vector_norm(g_prev)))
    probe = theta + hp.rho_max * g / torch.linalg.vector_norm(g)
    sigma = max(0.0, float(loss(probe) - loss(theta)))
    tau = float(np.std(angles.numpy()))
    lam = hp.a * (1 - cos) + hp.b * sigma + hp.c * tau
    assert hp.lam_min < lam < hp.lam_max  # an interior value, so the formula (not the clip) is tested
    rho = max(hp.rho_min, hp.rho_max * math.exp(-lam))
    # rel 1e-7: the code adds 1e-8 to ‖g‖‖g_prev‖ in γ_k and 1e-12 to ‖g‖ in the probe; the hand
    # formulas do not.
    assert float(cs["lam"]) == pytest.approx(lam, rel=1e-7)
    assert float(cs["rho"]) == pytest.approx(rho, rel=1e-7)
    torch.testing.assert_close(cs["g_prev"], g)
    torch.testing.assert_close(cs["angles"], torch.cat((angles[1:], torch.tensor([math.acos(cos)],
                                                                                 dtype=torch.float64))))
    e = rho * g / torch.linalg.vector_norm(g)
    # prox term is 0 at θ = θ^t
    torch.testing.assert_close(out, theta - 0.1 * (clean * grad(theta) + grad(theta + e)))
    # a later step reuses λ_k, ρ_k and adds the proximal gradient 2λ_k(θ − θ^t)
    out2, cs2, _ = alg.local_step(out, cs, msg, batch, grad_fn, _step(k=1, round_=hp.warmup_rounds))
    g1 = grad(out)
    expected = out - 0.1 * (clean * g1 + grad(out + rho * g1 / torch.linalg.vector_norm(g1))
                            + 2 * lam * (out - theta))
    torch.testing.assert_close(out2, expected)
    assert torch.equal(cs2["lam"], cs["lam"]) and torch.equal(cs2["rho"], cs["rho"])


def test_fedsmoo_adaptive_first_visit_and_clipping():
    # First visit: γ = 1, τ = 0 (buffer not full), no angle recorded; a huge σ clips λ at λ_max.
    grad_fn, batch, grad, _, rand = _quad_setup()
    alg = get_algorithm("fedsmoo_adaptive", b=100.0, rho_max=0.5)
    theta = rand()
    cs0 = alg.client_init(theta)
    _, cs, _ = alg.local_step(theta, cs0, {"theta": theta}, batch, grad_fn, _step(round_=5))
    assert float(cs["n_angles"]) == 0 and torch.equal(cs["angles"], cs0["angles"])
    assert float(cs["has_prev"]) == 1
    assert float(cs["lam"]) == pytest.approx(alg.hp.lam_max)
    assert float(cs["rho"]) == pytest.approx(max(alg.hp.rho_min, 0.5 * math.exp(-alg.hp.lam_max)))


def test_fedsmoo_adaptive_bounds_and_round_metrics():
    # After warm-up every client's λ_k ∈ [0.01, 0.3] and ρ_k ∈ [ρ_min, ρ_max] with
    # ρ_k = max(ρ_min, ρ_max e^{−λ_k}); the server logs the means of the uploaded values.
    fed = _mlp()
    alg = get_algorithm("fedsmoo_adaptive", warmup_rounds=1, window=2)
    warm = _run(alg, fed, rounds=1, n_clients=4, participation=1.0)
    assert alg.round_metrics(warm.server) == {"lambda_k_mean": 0.0, "rho_k_mean": 0.0}
    run = _run(alg, fed, rounds=5, n_clients=4, participation=1.0)
    hp = alg.hp
    lams = torch.stack([s["lam"] for s in run.client_states.values()])
    rhos = torch.stack([s["rho"] for s in run.client_states.values()])
    assert len(lams) == 4
    assert bool(((lams >= hp.lam_min) & (lams <= hp.lam_max)).all())
    assert bool(((rhos >= hp.rho_min) & (rhos <= hp.rho_max)).all())
    torch.testing.assert_close(rhos, torch.clamp(hp.rho_max * torch.exp(-lams), min=hp.rho_min))
    assert all(float(s["n_angles"]) == 2 for s in run.client_states.values())  # τ branch was used
    metrics = alg.round_metrics(run.server)
    assert metrics["lambda_k_mean"] == pytest.approx(float(lams.mean()), rel=1e-6)
    assert metrics["rho_k_mean"] == pytest.approx(float(rhos.mean()), rel=1e-6)


# --- communication, hyperparameters, registry ---------------------------------------------------

@pytest.mark.parametrize("method", GROUP)
def test_communication_sizes(method):
    grad_fn, batch, _, _, rand = _quad_setup(dim=7)
    alg = get_algorithm(method)
    theta0 = rand()
    info = _info(round_=4, K=2, n_sampled=3)
    server = alg.server_init(theta0)
    msg = alg.broadcast(server, info)
    cstate = alg.client_init(theta0)
    start = alg.client_start(msg, cstate, info)
    theta = start
    for k in range(2):
        theta, cstate, _ = alg.local_step(theta, cstate, msg, batch, grad_fn, _step(k=k, round_=4))
    up, _ = alg.upload(start, theta, cstate, msg, info, 2)
    case = DEFAULTS[method]  # the one table of cases (tests/cases.py)
    assert sum(v.numel() for v in msg.values()) == case.down * 7
    assert sum(v.numel() for v in up.values()) == case.up * 7 + case.up_scalars
    assert "theta" in server


BAD_VALUES = [
    ("fedprox", "mu", -0.1), ("fedprox", "server_lr", 0.0),
    ("scaffold", "server_lr", -1.0),
    ("feddyn", "lam", -0.1),
    ("fedacg", "lam", 1.0), ("fedacg", "beta", -1e-3),
    ("fedgamma", "rho", -0.01), ("fedgamma", "perturb_with_correction", "yes"),
    ("fedspeed", "rho", float("nan")), ("fedspeed", "lam", -1.0),
    ("fedsmoo", "eps", -1.0), ("fedsmoo", "rho", -0.1),
    ("fedsmoo_adaptive", "rho_max", 0.0005), ("fedsmoo_adaptive", "lam_max", 0.001),
    ("fedsmoo_adaptive", "window", 1), ("fedsmoo_adaptive", "warmup_rounds", 1.5),
    ("fedsmoo_adaptive", "a", -0.4), ("fedsmoo_adaptive", "objective", "paper"),
]


@pytest.mark.parametrize("method,field,value", BAD_VALUES)
def test_hparams_reject_bad_values(method, field, value):
    with pytest.raises(ValueError, match=field):
        get_algorithm(method, **{field: value})


@pytest.mark.parametrize("method", GROUP)
def test_registered_with_metadata(method):
    assert method in algorithm_names()
    alg = get_algorithm(method)
    cls = type(alg)
    assert cls.paper and cls.state_where and cls.grad_evals_per_step in (1, 2)
    assert cls.grad_evals_per_step == DEFAULTS[method].grads
    for preset in cls.presets:
        get_algorithm(method, preset=preset)


def test_fedsmoo_docstrings_say_which_is_which():
    paper = importlib.import_module("fedlab.algorithms.fedsmoo").__doc__
    blog = importlib.import_module("fedlab.algorithms.fedsmoo_adaptive").__doc__
    assert "paper's method" in paper and "fedsmoo_adaptive" in paper
    assert "not the paper's method" in blog and "``fedsmoo``" in blog


# --- vmap ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("method", GROUP)
def test_local_step_vmaps_over_clients(method):
    grad_fn, batch_fn, theta0 = _mlp()
    params = {"warmup_rounds": 1, "window": 2} if method == "fedsmoo_adaptive" else {}
    alg = get_algorithm(method, **params)
    # three rounds first, so that client and server states are non-trivial (h_i, c_i, μ_i, m, s, history)
    prior = run_functional(alg, theta0, grad_fn, batch_fn, n_clients=3, rounds=3, local_steps=2, lr=0.05)
    info = _info(round_=3, lr=0.05, K=2, n_clients=3, n_sampled=3, wd=1e-3, clip=1.0)
    msg = alg.broadcast(prior.server, info)
    states = [prior.client_states.get(i) or alg.client_init(theta0) for i in range(3)]
    gen = torch.Generator().manual_seed(5)
    starts = [alg.client_start(msg, s, info) + 0.01 * torch.randn(theta0.shape, generator=gen) for s in states]
    batches = [batch_fn(i, 3, 0) for i in range(3)]
    for k in (0, 1):  # k = 0 runs FedSMOO-adaptive's once-per-round statistics
        step = StepInfo(k=k, K=2, lr=0.05, weight_decay=1e-3, clip_norm=1.0, round=3)
        seq = [alg.local_step(th, s, msg, b, grad_fn, step) for th, s, b in zip(starts, states, batches)]

        def one(th, s, x, y):
            return alg.local_step(th, s, msg, (x, y), grad_fn, step)

        stacked = {key: torch.stack([s[key] for s in states]) for key in states[0]}
        th_v, s_v, loss_v = torch.func.vmap(one)(torch.stack(starts), stacked,
                                                 torch.stack([b[0] for b in batches]),
                                                 torch.stack([b[1] for b in batches]))
        torch.testing.assert_close(th_v, torch.stack([r[0] for r in seq]), rtol=0, atol=1e-6)
        torch.testing.assert_close(loss_v, torch.stack([r[2] for r in seq]), rtol=0, atol=1e-6)
        assert set(s_v) == set(seq[0][1])
        for key in s_v:
            torch.testing.assert_close(s_v[key], torch.stack([r[1][key] for r in seq]), rtol=0, atol=1e-6)
        starts = [r[0] for r in seq]
        states = [r[1] for r in seq]
