"""Independent reference implementations of every fedlab method, for the contract suite.

Written from the update rules of the reference code, as the fedlab developers' notes on reading that
code give them (each method's module docstring in ``fedlab/algorithms/`` and its section of
``notebooks/book/guide/methods.md`` state the same rules), and, where the code leaves a choice to
fedlab, from the choice the docstring documents; *not* from fedlab's code: plain torch autograd in float64 on a 2-hidden-layer MLP whose forward pass is written here, per-client state in
ordinary dicts, one function per method that performs a whole round. Nothing from
``fedlab.algorithms`` is imported; the only inputs shared with fedlab are data — θ⁰, the samples,
the clients of each round, each client's minibatch index lists, the learning rates and the resolved
hyperparameter values.

Conventions (``notebooks/book/guide/methods.md#conventions-and-the-reference-code``): Δ_i = θ_{i,K} − θ_{i,0}
is a descent displacement; clipping is global-norm clipping v·min(1, C/(‖v‖ + 1e-6)) of the direction
the optimiser receives, and weight decay wd·θ is added after the clip. K_i is the number of steps client i actually ran (its number of
minibatches); where a rule divides a *mean* update by K, K̄ is the mean of the K_i of that round's
clients (the correct epoch-mode rule of issue 11, defect 1).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

DTYPE = torch.float64


# ------------------------------------------------------------------------------------------------
# the model: flatten → H → ReLU → H → ReLU → C, parameters in (W1, b1, W2, b2, W3, b3) order
# ------------------------------------------------------------------------------------------------
def mlp_logits(theta: Tensor, x: Tensor, n_in: int, hidden: int, n_out: int) -> Tensor:
    sizes = [(hidden, n_in), (hidden,), (hidden, hidden), (hidden,), (n_out, hidden), (n_out,)]
    parts, at = [], 0
    for shape in sizes:
        n = math.prod(shape)
        parts.append(theta[at:at + n].view(shape))
        at += n
    assert at == theta.numel(), f"θ has {theta.numel()} entries, the MLP {at}"
    w1, b1, w2, b2, w3, b3 = parts
    h = torch.relu(x @ w1.T + b1)
    h = torch.relu(h @ w2.T + b2)
    return h @ w3.T + b3


def clip(v: Tensor, max_norm: float | None) -> Tensor:
    """Global-norm clipping as torch.nn.utils.clip_grad_norm_ (factor min(1, C/(‖v‖ + 1e-6)))."""
    if max_norm is None:
        return v
    return v * min(1.0, max_norm / (float(v.norm()) + 1e-6))


def unit(v: Tensor, eps: float) -> Tensor:
    return v / (v.norm() + eps)


@dataclass
class Context:
    """What one reference run knows: data, hyperparameters, the federation and its state."""

    hp: dict[str, Any]
    x: Tensor
    y: Tensor
    dims: tuple[int, int, int]
    n_clients: int
    wd: float
    clip_norm: float | None
    lrs: Sequence[float]  # η_t per round
    batches: Callable[[int, int], list[Tensor]]  # (round, client) -> the K_i index tensors
    theta: Tensor  # θ^t, the global model
    noise: Callable[[int], Tensor] | None = None  # round -> the run's N(0, I_d) draw (DP methods)
    server: dict[str, Any] = field(default_factory=dict)
    clients: dict[int, dict[str, Any]] = field(default_factory=dict)
    grad_calls: int = 0

    def grad(self, theta: Tensor, idx: Tensor) -> tuple[Tensor, Tensor]:
        """(∇f(θ; ξ), f(θ; ξ)) of the mean cross-entropy on the samples ``idx``."""
        self.grad_calls += 1
        leaf = theta.detach().clone().requires_grad_(True)
        loss = torch.nn.functional.cross_entropy(mlp_logits(leaf, self.x[idx], *self.dims), self.y[idx])
        (g,) = torch.autograd.grad(loss, leaf)
        return g, loss.detach()

    def loss(self, theta: Tensor, idx: Tensor) -> Tensor:
        with torch.no_grad():
            return torch.nn.functional.cross_entropy(mlp_logits(theta, self.x[idx], *self.dims), self.y[idx])

    def sgd(self, theta: Tensor, d: Tensor, lr: float, outside_clip: Tensor | float = 0.0) -> Tensor:
        """θ − η (clip(d, C) + outside_clip + wd·θ)."""
        return theta - lr * (clip(d, self.clip_norm) + outside_clip + self.wd * theta)

    def state(self, i: int, **init: Tensor) -> dict[str, Any]:
        """Client i's persistent state, created with ``init`` on its first participation."""
        if i not in self.clients:
            self.clients[i] = {k: v.clone() for k, v in init.items()}
        return self.clients[i]

    def zeros(self) -> Tensor:
        return torch.zeros_like(self.theta)


Round = tuple[dict[int, Tensor], Tensor]  # (client end points θ_{i,K}, θ^{t+1})
METHODS: dict[str, Callable[[Context, int, list[int]], Round]] = {}


def method(fn: Callable[[Context, int, list[int]], Round]) -> Callable[[Context, int, list[int]], Round]:
    METHODS[fn.__name__] = fn
    return fn


def mean(vs: Sequence[Tensor]) -> Tensor:
    return torch.stack(list(vs)).mean(0)


# ------------------------------------------------------------------------------------------------
# FedAvg family (§2, §13, §14)
# ------------------------------------------------------------------------------------------------
@method
def fedavg(ctx: Context, t: int, S: list[int]) -> Round:
    lr, ends = ctx.lrs[t], {}
    for i in S:
        th = ctx.theta
        for idx in ctx.batches(t, i):
            th = ctx.sgd(th, ctx.grad(th, idx)[0], lr)
        ends[i] = th
    return ends, ctx.theta + ctx.hp["server_lr"] * mean([e - ctx.theta for e in ends.values()])


@method
def fedprox(ctx: Context, t: int, S: list[int]) -> Round:
    # FL-Sim: loss CE − μ⟨θ, θ^t⟩ (clipped with g), optimiser weight decay wd + μ (outside the clip)
    mu, lr, ends = ctx.hp["mu"], ctx.lrs[t], {}
    for i in S:
        th = ctx.theta
        for idx in ctx.batches(t, i):
            th = ctx.sgd(th, ctx.grad(th, idx)[0] - mu * ctx.theta, lr, outside_clip=mu * th)
        ends[i] = th
    return ends, ctx.theta + ctx.hp["server_lr"] * mean([e - ctx.theta for e in ends.values()])


@method
def fedacg(ctx: Context, t: int, S: list[int]) -> Round:
    lam, beta, lr = ctx.hp["lam"], ctx.hp["beta"], ctx.lrs[t]
    m = ctx.server.setdefault("m", ctx.zeros())
    start = ctx.theta + lam * m  # θ̃ = θ^t + λ m^{t−1}
    ends = {}
    for i in S:
        th = start
        for idx in ctx.batches(t, i):
            th = ctx.sgd(th, ctx.grad(th, idx)[0] + 2 * beta * (th - start), lr)
        ends[i] = th
    mean_delta = mean([e - start for e in ends.values()])
    ctx.server["m"] = lam * m + mean_delta
    return ends, mean(list(ends.values()))  # θ^{t+1} = mean of the client models


# ------------------------------------------------------------------------------------------------
# SCAFFOLD / FedGAMMA (§11, §5): option II, c ← c + (1/N) Σ_S (c_i⁺ − c_i)
# ------------------------------------------------------------------------------------------------
def _scaffold_round(ctx: Context, t: int, S: list[int], sam: bool) -> Round:
    lr = ctx.lrs[t]
    c = ctx.server.setdefault("c", ctx.zeros())
    rho, eps = ctx.hp.get("rho", 0.0), ctx.hp.get("eps", 0.0)
    ends, dc_sum = {}, ctx.zeros()
    for i in S:
        st = ctx.state(i, c_i=ctx.zeros())
        corr = c - st["c_i"]
        th = ctx.theta
        batches = ctx.batches(t, i)
        for idx in batches:
            g = ctx.grad(th, idx)[0]
            if sam:
                v = g + corr if ctx.hp["perturb_with_correction"] else g
                g = ctx.grad(th + rho * unit(v, eps), idx)[0]
            th = ctx.sgd(th, g + corr, lr)
        ends[i] = th
        c_new = st["c_i"] - c - (th - ctx.theta) / (len(batches) * lr)
        dc_sum = dc_sum + (c_new - st["c_i"])
        st["c_i"] = c_new
    ctx.server["c"] = c + dc_sum / ctx.n_clients
    return ends, ctx.theta + ctx.hp["server_lr"] * mean([e - ctx.theta for e in ends.values()])


@method
def scaffold(ctx: Context, t: int, S: list[int]) -> Round:
    return _scaffold_round(ctx, t, S, sam=False)


@method
def fedgamma(ctx: Context, t: int, S: list[int]) -> Round:
    return _scaffold_round(ctx, t, S, sam=True)


# ------------------------------------------------------------------------------------------------
# FedDyn / FedSpeed / FedSMOO (§12, §17, §6)
# ------------------------------------------------------------------------------------------------
def _dyn_round(ctx: Context, t: int, S: list[int], kind: str) -> Round:
    lam, lr = ctx.hp["lam"], ctx.lrs[t]
    rho, eps = ctx.hp.get("rho", 0.0), ctx.hp.get("eps", 0.0)
    s = ctx.server.setdefault("s", ctx.zeros())
    ends, mus = {}, []
    for i in S:
        st = ctx.state(i, h=ctx.zeros(), mu=ctx.zeros())
        th = ctx.theta
        for idx in ctx.batches(t, i):
            g = ctx.grad(th, idx)[0]
            if kind == "fedspeed":
                g = ctx.grad(th + rho * unit(g, eps), idx)[0]
            elif kind == "fedsmoo":
                g_hat = g - st["mu"] - s
                e = rho * unit(g_hat, eps)
                st["mu"] = st["mu"] + (e - s)
                g = ctx.grad(th + e, idx)[0]
            # loss CE + λ⟨θ, h_i − θ^t⟩ (clipped with g), optimiser weight decay wd + λ
            th = ctx.sgd(th, g + lam * (st["h"] - ctx.theta), lr, outside_clip=lam * th)
        ends[i] = th
        st["h"] = st["h"] + (th - ctx.theta)
        mus.append(st["mu"])
    if kind == "fedsmoo":
        ctx.server["s"] = rho * unit(mean(mus), eps)
    # θ^{t+1} = mean_S θ_{i,K} + mean over ALL N clients of h_i (never-sampled ones count as 0)
    h_all = sum((ctx.clients[i]["h"] for i in ctx.clients), ctx.zeros()) / ctx.n_clients
    return ends, mean(list(ends.values())) + h_all


@method
def feddyn(ctx: Context, t: int, S: list[int]) -> Round:
    return _dyn_round(ctx, t, S, "feddyn")


@method
def fedspeed(ctx: Context, t: int, S: list[int]) -> Round:
    return _dyn_round(ctx, t, S, "fedspeed")


@method
def fedsmoo(ctx: Context, t: int, S: list[int]) -> Round:
    return _dyn_round(ctx, t, S, "fedsmoo")


# ------------------------------------------------------------------------------------------------
# local SAM (§3), MoFedSAM (§4), FedLESAM (§15), FedSMOO-adaptive (blog; fedlab docstring)
# ------------------------------------------------------------------------------------------------
@method
def fedsam(ctx: Context, t: int, S: list[int]) -> Round:
    rho, eps, lr, ends = ctx.hp["rho"], ctx.hp["eps"], ctx.lrs[t], {}
    for i in S:
        th = ctx.theta
        for idx in ctx.batches(t, i):
            g = ctx.grad(th, idx)[0]
            th = ctx.sgd(th, ctx.grad(th + rho * unit(g, eps), idx)[0], lr)
        ends[i] = th
    return ends, ctx.theta + ctx.hp["server_lr"] * mean([e - ctx.theta for e in ends.values()])


@method
def mofedsam(ctx: Context, t: int, S: list[int]) -> Round:
    rho, eps, alpha, lr = ctx.hp["rho"], ctx.hp["eps"], ctx.hp["alpha"], ctx.lrs[t]
    if t == 0:
        m = ctx.zeros()  # no update exists before round 0
    else:  # m = −Δ̄^{t−1} / (K̄^{t−1} η_{t−1})
        m = -ctx.server["delta_bar"] / (ctx.server["K_bar"] * ctx.lrs[t - 1])
    ends, ks = {}, []
    for i in S:
        th = ctx.theta
        batches = ctx.batches(t, i)
        ks.append(len(batches))
        for idx in batches:
            g = ctx.grad(th, idx)[0]
            g_sam = ctx.grad(th + rho * unit(g, eps), idx)[0]
            th = ctx.sgd(th, alpha * g_sam + (1 - alpha) * m, lr)
        ends[i] = th
    delta_bar = mean([e - ctx.theta for e in ends.values()])
    ctx.server.update(delta_bar=delta_bar, K_bar=sum(ks) / len(ks))
    return ends, ctx.theta + ctx.hp["server_lr"] * delta_bar


@method
def fedlesam(ctx: Context, t: int, S: list[int]) -> Round:
    rho, eps, lr = ctx.hp["rho"], ctx.hp["eps"], ctx.lrs[t]
    paper = ctx.hp["variant"] == "paper"
    ends = {}
    for i in S:
        if paper:  # δ along θ_old,i − θ^t, the model the client received at its last participation
            st = ctx.clients.get(i)
            delta = ctx.zeros() if st is None else rho * unit(st["theta_old"] - ctx.theta, eps)
        else:  # the code's intent: δ = −ρ Δ^{t−1}/‖Δ^{t−1}‖, Δ^{t−1} = θ^t − θ^{t−1} (0 in round 0)
            last = ctx.server.get("last_update")
            delta = ctx.zeros() if last is None else -rho * unit(last, eps)
        th = ctx.theta
        for idx in ctx.batches(t, i):
            th = ctx.sgd(th, ctx.grad(th + delta, idx)[0], lr)
        ends[i] = th
        if paper:
            ctx.clients[i] = {"theta_old": ctx.theta.clone()}
    new = ctx.theta + ctx.hp["server_lr"] * mean([e - ctx.theta for e in ends.values()])
    ctx.server["last_update"] = new - ctx.theta
    return ends, new


@method
def fedsmoo_adaptive(ctx: Context, t: int, S: list[int]) -> Round:
    """Per client: λ_k, ρ_k from (γ_k, σ_k, τ_k) at step 0, then descend on the blog's objective
    L(θ) + λ_k‖θ − θ^t‖² + L(θ + ρ_k g/‖g‖): direction ∇L(θ) + ∇L(θ + ε) + 2λ_k(θ − θ^t), clipped."""
    hp, lr = ctx.hp, ctx.lrs[t]
    warm = t < hp["warmup_rounds"]
    ends = {}
    for i in S:
        st = ctx.clients.setdefault(i, {"g_prev": None, "angles": []})
        batches = ctx.batches(t, i)
        g0, loss0 = ctx.grad(ctx.theta, batches[0])
        if st["g_prev"] is None:
            gamma, cos = 1.0, None
        else:
            dot = float(g0 @ st["g_prev"])
            cos = max(-1.0, min(1.0, dot / (float(g0.norm()) * float(st["g_prev"].norm()) + hp["cos_eps"])))
            gamma = cos
        angles = st["angles"]
        tau = float(torch.tensor(angles, dtype=DTYPE).std(correction=0)) if len(angles) >= hp["window"] else 0.0
        if cos is not None:
            st["angles"] = (angles + [math.acos(cos)])[-hp["window"]:]
        st["g_prev"] = g0
        if warm:
            lam = rho = 0.0
        else:
            probe = ctx.loss(ctx.theta + hp["rho_max"] * unit(g0, hp["eps"]), batches[0])
            ctx.grad_calls += 1  # the probe is one more evaluation at step 0
            sigma = max(0.0, float(probe - loss0))
            lam = min(hp["lam_max"], max(hp["lam_min"], hp["a"] * (1 - gamma) + hp["b"] * sigma + hp["c"] * tau))
            rho = max(hp["rho_min"], hp["rho_max"] * math.exp(-lam))
        th = ctx.theta
        for k, idx in enumerate(batches):
            g = g0 if k == 0 else ctx.grad(th, idx)[0]
            if warm:  # plain FedAvg during warm-up
                th = ctx.sgd(th, g, lr)
                continue
            g_sam = ctx.grad(th + rho * unit(g, hp["eps"]), idx)[0]
            th = ctx.sgd(th, g + g_sam + 2 * lam * (th - ctx.theta), lr)
        ends[i] = th
    return ends, ctx.theta + hp["server_lr"] * mean([e - ctx.theta for e in ends.values()])


# ------------------------------------------------------------------------------------------------
# FedSWA / FedMoSWA (§7, §8)
# ------------------------------------------------------------------------------------------------
def swa_lr(ctx: Context, lr: float, k: int, K: int) -> float:
    """η_k: linear from λη (k = 0) towards λρη (k = K); the count *before* the step."""
    hp = ctx.hp
    return hp["lr_multiplier"] * ((1 - k / K) * lr + (k / K) * hp["rho"] * lr)


@method
def fedswa(ctx: Context, t: int, S: list[int]) -> Round:
    ends = {}
    for i in S:
        th, batches = ctx.theta, ctx.batches(t, i)
        for k, idx in enumerate(batches):
            th = ctx.sgd(th, ctx.grad(th, idx)[0], swa_lr(ctx, ctx.lrs[t], k, len(batches)))
        ends[i] = th
    return ends, ctx.theta + ctx.hp["alpha"] * mean([e - ctx.theta for e in ends.values()])


@method
def fedmoswa(ctx: Context, t: int, S: list[int]) -> Round:
    hp = ctx.hp
    c = ctx.server.setdefault("c", ctx.zeros())
    ends, dcs = {}, []
    for i in S:
        st = ctx.state(i, c_i=ctx.zeros())
        corr = c - st["c_i"]
        th, batches = ctx.theta, ctx.batches(t, i)
        K = len(batches)
        total = 0.0
        for k, idx in enumerate(batches):
            g, lr_k = ctx.grad(th, idx)[0], swa_lr(ctx, ctx.lrs[t], k, K)
            total += lr_k
            if hp["clip_correction"]:
                th = ctx.sgd(th, g + corr, lr_k)
            else:
                th = ctx.sgd(th, g, lr_k, outside_clip=corr)
        ends[i] = th
        c_new = st["c_i"] - c + (ctx.theta - th) / total  # option II over the exact Σ_k η_k
        dcs.append(c_new - c)
        st["c_i"] = c_new
    gamma = 1.0 if (hp["c_first_round_mean"] and t == 0) else hp["gamma"]
    ctx.server["c"] = c + gamma * mean(dcs)  # = (1 − γ) c + γ mean_S c_i⁺
    return ends, ctx.theta + hp["alpha"] * mean([e - ctx.theta for e in ends.values()])


# ------------------------------------------------------------------------------------------------
# FedNSAM (§9) and FedVSSAM (§10)
# ------------------------------------------------------------------------------------------------
@method
def fednsam(ctx: Context, t: int, S: list[int]) -> Round:
    hp, lr = ctx.hp, ctx.lrs[t]
    gamma, rho, eps = hp["gamma"], hp["rho"], hp["eps"]
    m = ctx.server.setdefault("m", ctx.zeros())
    every = hp["extrapolation"] == "every_step"
    start = ctx.theta if every else ctx.theta + gamma * m
    ends = {}
    for i in S:
        th = start
        for idx in ctx.batches(t, i):
            point = th + gamma * m if every else th  # every_step: look-ahead gradients, iterate unmoved
            if hp["variant"] == "code":
                g = ctx.grad(point, idx)[0]
                g_sam = ctx.grad(point + rho * unit(g, eps), idx)[0]
            else:  # paper: ascent along −m (uphill), one gradient per step
                g_sam = ctx.grad(point + rho * unit(-m, eps), idx)[0]
            th = ctx.sgd(th, g_sam, lr)
        ends[i] = th
    delta_bar = mean([e - start for e in ends.values()])
    if hp["momentum_overwrite_bug"]:
        # official repo: empty-momentum branch in round 0 (m = Δ̄), then m = (1 + γ)Δ̄, never accumulated
        new_m = delta_bar if t == 0 else (1 + gamma) * delta_bar
    else:
        new_m = gamma * m + delta_bar
    ctx.server["m"] = new_m
    return ends, ctx.theta + new_m


@method
def fedvssam(ctx: Context, t: int, S: list[int]) -> Round:
    hp, lr = ctx.hp, ctx.lrs[t]
    h = ctx.server.setdefault("h", ctx.zeros())  # h⁰ = 0
    warm = hp["h_init"] == "first_round" and t == 0  # a plain FedSAM round 0
    gl = 1.0 if warm else hp["gamma_l"]
    gg = 1.0 if (warm or not hp["gu"]) else hp["gamma_g"]
    ends, ks = {}, []
    for i in S:
        th, batches = ctx.theta, ctx.batches(t, i)
        ks.append(len(batches))
        for idx in batches:
            g = ctx.grad(th, idx)[0]
            h_i = (1 - gl) * h + gl * g if hp["lf"] else g
            g_t = ctx.grad(th + hp["rho"] * unit(h_i, hp["eps"]), idx)[0]
            u = (1 - gl) * h + gl * g_t if hp["lu"] else g_t
            th = ctx.sgd(th, u, lr)
        ends[i] = th
    K_bar = sum(ks) / len(ks)
    pseudo = (ctx.theta - mean(list(ends.values()))) / (lr * K_bar)  # g^{t+1}
    h_new = (1 - gg) * h + gg * pseudo
    ctx.server["h"] = h_new
    return ends, ctx.theta - hp["server_lr_scale"] * lr * K_bar * h_new  # η_g = β η_t K̄


# ------------------------------------------------------------------------------------------------
# Successors (issue 27): FedWMSAM
# ------------------------------------------------------------------------------------------------
@method
def fedwmsam(ctx: Context, t: int, S: list[int]) -> Round:
    """As server/FedWMSAM.py keeps it: every c_i on the server, a personalised momentum per client,
    α re-weighted from 1 + cos(Δ_i, m) after the round; the code's scalar-per-tensor δ not reproduced."""
    hp, lr = ctx.hp, ctx.lrs[t]
    srv = ctx.server
    if not srv:
        srv.update(m=ctx.zeros(), c=ctx.zeros(), alpha=hp["alpha"])
    m, c, alpha = srv["m"], srv["c"], srv["alpha"]
    sign = 1.0 if hp["perturb"] == "toward" else -1.0
    ends, deltas, values, dc = {}, [], [], ctx.zeros()
    for i in S:
        c_i = ctx.state(i, c_i=ctx.zeros())["c_i"]
        p = m + alpha / (1 - alpha) * (c - c_i) if hp["personalised"] else m
        th, target = ctx.theta, ctx.theta.clone()
        batches = ctx.batches(t, i)
        for idx in batches:
            away = target - th
            g = ctx.grad(th + sign * hp["rho"] * away / (away.norm() + hp["eps"]), idx)[0]
            th = ctx.sgd(th, alpha * g + (1 - alpha) * p, lr)
            target = target + p
        ends[i] = th
        delta = th - ctx.theta
        deltas.append(delta)
        den = float(delta.norm() * m.norm())
        values.append(float(delta @ m) / den + 1.0 if den > 0 else 0.0)
        c_new = c_i - c - delta / (len(batches) * lr)
        dc = dc + (c_new - c_i)
        ctx.clients[i]["c_i"] = c_new
    K_bar = sum(len(ctx.batches(t, i)) for i in S) / len(S)
    if hp["adaptive"]:
        srv["alpha"] = 0.99 * alpha + 0.01 * max(0.1, min(sum(values) / len(values), 0.9))
    if hp["personalised"]:
        srv["c"] = c + dc / ctx.n_clients
    srv["m"] = -hp["momentum_scale"] * mean(deltas) / (K_bar * lr)
    return ends, ctx.theta + hp["server_lr"] * mean(deltas)


def _gloss_rho_lists(hp: dict[str, Any], T: int) -> tuple[list[float], list[float]]:
    """The client and server ρ per round, built as fedgloss_server.py builds them (``server_ramp="code"``)
    or as the ramp it means (``"ramp"``)."""
    T_s, rho0 = hp["ramp_rounds"], hp["rho0"]
    if T_s <= 1:
        return [hp["rho"]] * T, [hp["rho_server"]] * T
    local = [rho0]
    for _ in range(T_s):
        local.append(local[-1] + (hp["rho"] - rho0) / T_s)
    local += [hp["rho"]] * (T - len(local))
    server = [rho0]
    for _ in range(T_s):
        base = local[-1] if hp["server_ramp"] == "code" else server[-1]  # the code reads the client list
        server.append(base + (hp["rho_server"] - rho0) / T_s)
    server += [hp["rho_server"]] * (T - len(server))
    return local, server


@method
def fedgloss(ctx: Context, t: int, S: list[int]) -> Round:
    """As fedgloss_server.py / fedgloss_client.py do it: perturb the stored model, train from it,
    subtract the perturbation again, step, then the ADMM correction; one epoch = one round."""
    hp, lr = ctx.hp, ctx.lrs[t]
    rhos_l, rhos_s = _gloss_rho_lists(hp, hp["ramp_rounds"] + 5)
    srv = ctx.server
    pg = srv.get("pseudo_grad")  # None before round 1: no ascent
    eps_t = ctx.zeros() if pg is None else rhos_s[t] * pg / (pg.norm() + hp["eps"])
    start = ctx.theta + eps_t
    ends, deltas = {}, []
    for i in S:
        st = ctx.state(i, lam=ctx.zeros())
        th = start
        for idx in ctx.batches(t, i):
            g = ctx.grad(th, idx)[0]
            g_sam = ctx.grad(th + rhos_l[t] * g / (g.norm() + hp["eps"]), idx)[0]
            if hp["dual"]:
                g_sam = g_sam - st["lam"] + (th - start) / hp["beta"]
            th = ctx.sgd(th, g_sam, lr)
        ends[i] = th
        deltas.append(th - start)
        if hp["dual"]:
            st["lam"] = st["lam"] - (th - start) / hp["beta"]
    model = start - eps_t  # remove the perturbation
    model = model + hp["server_lr"] * mean(deltas)
    srv["pseudo_grad"] = -mean(deltas)
    if hp["dual"]:
        srv["sigma"] = srv.get("sigma", ctx.zeros()) - sum(deltas) / (hp["beta"] * ctx.n_clients * len(S))
        model = model - hp["beta"] * srv["sigma"]
    return ends, model


@method
def fedgf(ctx: Context, t: int, S: list[int]) -> Round:
    """As fedgf.py does it: the ascent point c·w̃ + (1 − c)·(local SAM point), the gradient there, the
    step from the unperturbed iterate; the server's window of divergence bits (a list)."""
    hp, lr = ctx.hp, ctx.lrs[t]
    srv = ctx.server
    srv.setdefault("window", [])
    perturbed, c = srv.get("perturbed"), srv.get("c", 0.0)
    ends = {}
    for i in S:
        th = ctx.theta
        for idx in ctx.batches(t, i):
            g = ctx.grad(th, idx)[0]
            ascent = th + hp["rho"] * g / (g.norm() + hp["eps"])
            if perturbed is not None:
                ascent = perturbed * c + ascent * (1 - c)
            th = ctx.sgd(th, ctx.grad(ascent, idx)[0], lr)
        ends[i] = th
    divergence = sum(float((ctx.theta - e).norm()) for e in ends.values()) / len(ends)
    srv["window"] = (srv["window"] + [1 if divergence > hp["divergence_threshold"] else 0])[-hp["window"]:]
    srv["c"] = sum(srv["window"]) / len(srv["window"])
    new = ctx.theta + hp["server_lr"] * mean([e - ctx.theta for e in ends.values()])
    pg = ctx.theta - new
    rho_g = hp["rho"] if hp["rho_global"] is None else hp["rho_global"]
    srv["perturbed"] = new + rho_g * pg / (pg.norm() + hp["eps"])
    return ends, new


# ------------------------------------------------------------------------------------------------
# Successors (issue 27): FedGMT and FedSOL distil from a teacher model on the same minibatch
# ------------------------------------------------------------------------------------------------
def distill_grad(ctx: Context, theta: Tensor, teacher: Tensor, idx: Tensor, tau: float, weight: float,
                 with_ce: bool) -> Tensor:
    """∇ of [CE] + weight · (1/B) Σ_b Σ_c q_bc (log q_bc − log p_bc), q = softmax(z(θ_T)/τ) a constant,
    p = softmax(z(θ)/τ): nn.KLDivLoss(reduction="batchmean") of the authors' codes, in float64."""
    ctx.grad_calls += 1
    x, y = ctx.x[idx], ctx.y[idx]
    with torch.no_grad():
        q = torch.softmax(mlp_logits(teacher, x, *ctx.dims) / tau, dim=1)
    leaf = theta.detach().clone().requires_grad_(True)
    z = mlp_logits(leaf, x, *ctx.dims)
    kl = (q * (torch.log(q) - torch.log_softmax(z / tau, dim=1))).sum() / x.shape[0]
    loss = weight * kl + (torch.nn.functional.cross_entropy(z, y) if with_ce else 0.0)
    (g,) = torch.autograd.grad(loss, leaf)
    return g


@method
def fedgmt(ctx: Context, t: int, S: list[int]) -> Round:
    """As clientgmt.py / servergmt.py do it: loss CE + γτ²KL(EMA teacher ‖ model) − ⟨θ, −h_i/β⟩ with
    h_i the client's summed updates (dual_variable_list), server mean of the models plus the mean of
    h over all N clients, then the EMA of the new global model."""
    hp, lr = ctx.hp, ctx.lrs[t]
    teacher = ctx.server.setdefault("ema", ctx.theta.clone())  # EMA_model starts as the initial model
    ends = {}
    for i in S:
        st = ctx.state(i, h=ctx.zeros())
        th = ctx.theta
        for idx in ctx.batches(t, i):
            if hp["gamma"] > 0:
                g = distill_grad(ctx, th, teacher, idx, hp["tau"], hp["gamma"] * hp["tau"] ** 2, True)
            else:
                g = ctx.grad(th, idx)[0]
            if hp["dual"]:
                g = g + st["h"] / hp["beta"]
            th = ctx.sgd(th, g, lr)
        ends[i] = th
        st["h"] = st["h"] + (th - ctx.theta)
    new = mean(list(ends.values()))
    if hp["dual"]:
        new = new + sum((c["h"] for c in ctx.clients.values()), ctx.zeros()) / ctx.n_clients
    ctx.server["ema"] = hp["alpha"] * teacher + (1 - hp["alpha"]) * new
    return ends, new


@method
def fedsol(ctx: Context, t: int, S: list[int]) -> Round:
    """fedsol_fixed: ascent ρ ∇L_p/‖∇L_p‖ along the KL to the received global model, CE gradient there,
    SGD from the unperturbed weights. Where the model still equals the global one (each client's first
    step) ∇L_p is exactly 0 and there is no ascent (fedlab's documented choice; the code normalises the
    rounding noise of that zero)."""
    hp, lr, ends = ctx.hp, ctx.lrs[t], {}
    for i in S:
        th = ctx.theta
        for idx in ctx.batches(t, i):
            if torch.equal(th, ctx.theta):
                ctx.grad_calls += 1  # g_p is still evaluated
                e = ctx.zeros()
            else:
                g_p = distill_grad(ctx, th, ctx.theta, idx, hp["tau"], 1.0, False)
                e = hp["rho"] * g_p / (g_p.norm() + hp["eps"])
            th = ctx.sgd(th, ctx.grad(th + e, idx)[0], lr)
        ends[i] = th
    return ends, ctx.theta + hp["server_lr"] * mean([e - ctx.theta for e in ends.values()])


# ------------------------------------------------------------------------------------------------
# Issue 45: FedLESAM-S / FedLESAM-D (§15; the code's client/fedlesam_s.py, client/fedlesam_d.py) and
# client-level DP (DP-FedSAM paper, Algorithm 1; fedml_api/dpfedsam)
# ------------------------------------------------------------------------------------------------
def _lesam_delta(ctx: Context, i: int) -> Tensor:
    """δ = ρ·unit(θ_old,i − θ^t) (paper; 0 at the first participation) or −ρ·unit(Δ^{t−1}) (the code)."""
    rho, eps = ctx.hp["rho"], ctx.hp["eps"]
    if ctx.hp["variant"] == "paper":
        old = ctx.clients.get(i, {}).get("theta_old")
        return ctx.zeros() if old is None else rho * unit(old - ctx.theta, eps)
    last = ctx.server.get("last_update")  # θ^t − θ^{t−1}; none before round 1
    return ctx.zeros() if last is None else -rho * unit(last, eps)


@method
def fedlesam_s(ctx: Context, t: int, S: list[int]) -> Round:
    lr, lam_c = ctx.lrs[t], ctx.hp["correction_scale"]
    c = ctx.server.setdefault("c", ctx.zeros())
    ends, dc_sum = {}, ctx.zeros()
    for i in S:
        delta = _lesam_delta(ctx, i)
        st = ctx.state(i, c_i=ctx.zeros())
        th, batches = ctx.theta, ctx.batches(t, i)
        for idx in batches:
            # loss CE(θ + δ) + λ_c⟨θ + δ, c − c_i⟩ backpropagated and clipped as a whole; SGD's wd at θ
            th = ctx.sgd(th, ctx.grad(th + delta, idx)[0] + lam_c * (c - st["c_i"]), lr)
        ends[i] = th
        c_new = st["c_i"] - c - (th - ctx.theta) / (len(batches) * lr)  # option II, not scaled
        dc_sum = dc_sum + (c_new - st["c_i"])
        st.update(c_i=c_new, theta_old=ctx.theta.clone())
    ctx.server["c"] = c + dc_sum / ctx.n_clients
    new = ctx.theta + ctx.hp["server_lr"] * mean([e - ctx.theta for e in ends.values()])
    ctx.server["last_update"] = new - ctx.theta
    return ends, new


@method
def fedlesam_d(ctx: Context, t: int, S: list[int]) -> Round:
    lam, lr, ends = ctx.hp["lam"], ctx.lrs[t], {}
    for i in S:
        delta = _lesam_delta(ctx, i)
        st = ctx.state(i, h=ctx.zeros())
        th = ctx.theta
        for idx in ctx.batches(t, i):
            # loss CE(θ + δ) + λ⟨θ + δ, h_i − θ^t⟩ (clipped), SGD weight decay wd + λ at the unperturbed θ
            th = ctx.sgd(th, ctx.grad(th + delta, idx)[0] + lam * (st["h"] - ctx.theta), lr, outside_clip=lam * th)
        ends[i] = th
        st.update(h=st["h"] + (th - ctx.theta), theta_old=ctx.theta.clone())
    h_all = sum((ctx.clients[i]["h"] for i in ctx.clients), ctx.zeros()) / ctx.n_clients
    new = mean(list(ends.values())) + h_all  # the code's global_update is this new − θ^t
    ctx.server["last_update"] = new - ctx.theta
    return ends, new


def _dp_server(ctx: Context, t: int, ends: dict[int, Tensor]) -> Tensor:
    """Each Δ_i clipped to C, plus N(0, σ²C²/m) per client, averaged: the m per-client draws summed are
    one N(0, σ²C²) draw, i.e. σC/m times the run's standard normal draw of round t on the mean."""
    C, sigma, m = ctx.hp["update_clip"], ctx.hp["noise_multiplier"], len(ends)
    avg = mean([clip(e - ctx.theta, C) for e in ends.values()])
    if sigma > 0:
        avg = avg + sigma * C / m * ctx.noise(t)
    return ctx.theta + ctx.hp["server_lr"] * avg


@method
def dp_fedavg(ctx: Context, t: int, S: list[int]) -> Round:
    lr, ends = ctx.lrs[t], {}
    for i in S:
        th = ctx.theta
        for idx in ctx.batches(t, i):
            th = ctx.sgd(th, ctx.grad(th, idx)[0], lr)
        ends[i] = th
    return ends, _dp_server(ctx, t, ends)


@method
def dp_fedsam(ctx: Context, t: int, S: list[int]) -> Round:
    rho, eps, lr, ends = ctx.hp["rho"], ctx.hp["eps"], ctx.lrs[t], {}
    for i in S:
        th = ctx.theta
        for idx in ctx.batches(t, i):
            g = ctx.grad(th, idx)[0]
            if ctx.hp["adaptive"]:  # the released SAM with adaptive=True: e = ρ θ²g / ‖|θ| g‖
                e = rho * th * th * g / ((th.abs() * g).norm() + eps)
            else:
                e = rho * unit(g, eps)
            th = ctx.sgd(th, ctx.grad(th + e, idx)[0], lr)
        ends[i] = th
    return ends, _dp_server(ctx, t, ends)


# ------------------------------------------------------------------------------------------------
# Issue 45: FedScar (§26; the code's clientscar.py / serverscar.py)
# ------------------------------------------------------------------------------------------------
@method
def fedscar(ctx: Context, t: int, S: list[int]) -> Round:
    """As serverscar.py keeps it: a table of every client's bias and dual (N rows, all biases × γ at the
    start of each round), each client's last model on the server; a returning client's bias gains
    α·(θ^t − its last model)/‖·‖ and it trains from θ^t + b_i. Steps: ESAM's gradient, then the loss
    β/2‖θ − last_para‖ + β⟨θ, dual_i + b_i⟩ backpropagated at θ, then (b̄ − b_i) added to the gradient.
    b̄ is the mean bias before this round's additions (fedlab's documented contract difference)."""
    hp, lr, n = ctx.hp, ctx.lrs[t], ctx.n_clients
    rho, alpha, gamma, beta, eps = hp["rho"], hp["alpha"], hp["gamma"], hp["beta"], hp["eps"]
    bias = ctx.server.setdefault("bias", [ctx.zeros() for _ in range(n)])
    dual = ctx.server.setdefault("dual", [ctx.zeros() for _ in range(n)])
    models = ctx.server.setdefault("models", {})  # client id -> its model when it last finished
    for j in range(n):
        bias[j] = gamma * bias[j]
    b_bar = sum(bias, ctx.zeros()) / n
    ends = {}
    for i in S:
        if i in models:
            v = ctx.theta - models[i]
            bias[i] = bias[i] + v * (alpha / (v.norm() + eps))
        start = ctx.theta + bias[i]
        last_para = models.get(i, start)
        main, drift = dual[i] + bias[i], b_bar - bias[i]
        th = start
        for idx in ctx.batches(t, i):
            g = ctx.grad(th, idx)[0]
            g_sam = ctx.grad(th + rho * unit(g, eps), idx)[0]
            leaf = th.detach().clone().requires_grad_(True)
            reg = beta / 2 * torch.sqrt(((leaf - last_para) ** 2).sum()) + beta * (leaf * main).sum()
            (g_reg,) = torch.autograd.grad(reg, leaf)
            if torch.equal(th, last_para):  # autograd's subgradient 0 of the norm at its kink
                g_reg = beta * main
            th = ctx.sgd(th, g_sam + g_reg + drift, lr)
        ends[i] = th
        dual[i] = dual[i] + (th - start)
        models[i] = th
    b_new = sum(bias, ctx.zeros()) / n
    new = mean(list(ends.values())) + beta * (sum(dual, ctx.zeros()) / n - b_new)
    return ends, new


# ------------------------------------------------------------------------------------------------
# Issue 45: FedFSA (the code's training/FedFSA.py and samOptimizers/FSA.py)
# ------------------------------------------------------------------------------------------------
def _mlp_tensors(ctx: Context, theta: Tensor) -> list[tuple[str, Tensor]]:
    """θ cut into the MLP's named tensors, as ``named_parameters`` lists them (fc1.weight, fc1.bias, ...)."""
    n_in, hidden, n_out = ctx.dims
    shapes = [(hidden, n_in), (hidden,), (hidden, hidden), (hidden,), (n_out, hidden), (n_out,)]
    out, at = [], 0
    for k, shape in enumerate(shapes):
        n = math.prod(shape)
        out.append((f"fc{k // 2 + 1}.{'weight' if len(shape) == 2 else 'bias'}", theta[at:at + n]))
        at += n
    return out


def _fsa_next_layers(ctx: Context, start: Tensor, end: Tensor, top_c: int) -> list[int]:
    """FSA.nextDisruptLayer: per tensor mean((minmax(after) − minmax(before))²), 0 for biases and norms;
    the list min-max normalised; Python's stable sort, largest first, NaN as −inf; the first top_c indices."""
    def minmax(v: Tensor) -> Tensor:
        return (v - torch.min(v)) / (torch.max(v) - torch.min(v))

    raw = []
    for (name, after), (_, before) in zip(_mlp_tensors(ctx, end), _mlp_tensors(ctx, start)):
        skip = any(w in name.lower() for w in ("bn", "downsample", "shortcut", "norm", "bias"))
        raw.append(torch.tensor(0.0, dtype=DTYPE) if skip else torch.mean((minmax(after) - minmax(before)) ** 2))
    normed = minmax(torch.stack(raw))
    ranked = sorted(enumerate(normed.tolist()), key=lambda p: float("-inf") if math.isnan(p[1]) else p[1],
                    reverse=True)
    return [idx for idx, _ in ranked[:top_c]]


@method
def fedfsa(ctx: Context, t: int, S: list[int]) -> Round:
    """MoFedSAM's round (the server's Client_momentum = −Δ̄/(K̄η) of the last round, 0 in round 0) with FSA's
    ascent: e_l = ρ_l g_l/(‖g‖ + ε) per tensor, ρ_larger on the tensors the client chose after its last
    round, ρ_default elsewhere. Each client keeps its chosen tensors and its last model (its own model)."""
    hp, lr = ctx.hp, ctx.lrs[t]
    alpha, eps = hp["alpha"], hp["eps"]
    m = ctx.zeros() if t == 0 else -ctx.server["delta_bar"] / (ctx.server["K_bar"] * ctx.lrs[t - 1])
    ends, ks = {}, []
    for i in S:
        st = ctx.state(i, own=ctx.theta)
        chosen = st.get("layers", [])
        th = ctx.theta
        batches = ctx.batches(t, i)
        ks.append(len(batches))
        for idx in batches:
            g = ctx.grad(th, idx)[0]
            scale = 1.0 / (g.norm() + eps)
            e = torch.cat([gl * (hp["rho_larger"] if k in chosen else hp["rho"]) * scale
                           for k, (_, gl) in enumerate(_mlp_tensors(ctx, g))])
            g_sam = ctx.grad(th + e, idx)[0]
            th = ctx.sgd(th, alpha * g_sam + (1 - alpha) * m, lr)
        ends[i] = th
        st["layers"] = _fsa_next_layers(ctx, ctx.theta, th, hp["top_c"])
        st["own"] = th
    delta_bar = mean([e - ctx.theta for e in ends.values()])
    ctx.server.update(delta_bar=delta_bar, K_bar=sum(ks) / len(ks))
    return ends, ctx.theta + hp["server_lr"] * delta_bar


# ------------------------------------------------------------------------------------------------
def run_reference(name: str, ctx: Context, schedule: Sequence[Sequence[int]]) -> list[Round]:
    """Every round of ``schedule`` with method ``name``; returns (end points, θ^{t+1}) per round."""
    fn = METHODS[name]
    out = []
    for t, clients in enumerate(schedule):
        ends, new = fn(ctx, t, sorted(clients))
        ctx.theta = new
        out.append((ends, new))
    return out
