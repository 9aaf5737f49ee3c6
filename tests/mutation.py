"""Mutation check of the contract suite (not part of CI): does ``tests/test_contract.py`` fail for
deliberate single-line bugs in each method?

    OMP_NUM_THREADS=1 python tests/mutation.py                  # every method (~10 min on one core)
    OMP_NUM_THREADS=1 python tests/mutation.py --method fedsam  # one method (repeatable)
    OMP_NUM_THREADS=1 python tests/mutation.py --jobs 2         # two mutants at a time
    python tests/mutation.py --list                             # show the declared mutations

Each mutation replaces one line fragment of one module under ``fedlab/`` (a flipped sign, a changed
coefficient, a dropped term, the wrong K or learning rate). For every mutant the script copies
``fedlab/``, ``tests/`` and ``pyproject.toml`` to a fresh temporary directory, edits the copy (the
working tree is never touched), and runs the contract tests of that method — every row of
``tests/cases.py`` for the method through the sequential executor in fixed-K and epoch mode (the
mutants are arithmetic bugs, which every executor shares; the executors are compared with each other
by the full suite), its communication and gradient counts, the reductions from or onto it, and its default row over the
four-round schedule (a third participation) —
with ``-x`` in a subprocess
whose ``PYTHONPATH`` and working directory are the copy. A mutant is *killed* when that run fails.

The baseline (no mutant) must pass before a method's mutants count. ``REPAIRS`` can hold one-line
stand-ins for fixes not yet landed, applied to the copy only (it held the issue-11 fixes of FedNSAM
and FedSMOO-adaptive before they landed; it is empty now). Mutants whose text is absent from the
source are reported as "n/a".
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOBS = 1  # mutants run at once (--jobs)
sys.path.insert(0, str(ROOT / "tests"))

from cases import CASES  # noqa: E402


@dataclass(frozen=True)
class Mutation:
    """Replace ``old`` by ``new`` in ``file`` (under fedlab/algorithms/ unless it contains a slash).

    ``old`` must occur exactly once. Where the issue-11 fixes rewrite the mutated line, ``old`` and
    ``new`` are tuples of alternatives (today's text first, the fixed text second); the first
    alternative found is applied.
    """

    file: str
    old: str | tuple[str, ...]
    new: str | tuple[str, ...]
    what: str

    def pairs(self) -> list[tuple[str, str]]:
        olds = (self.old,) if isinstance(self.old, str) else self.old
        news = (self.new,) if isinstance(self.new, str) else self.new
        assert len(olds) == len(news), f"{self.what}: alternatives of old and new differ in number"
        return list(zip(olds, news))


M = Mutation
MUTATIONS: dict[str, list[Mutation]] = {
    "fedavg": [
        M("fedavg.py", 'server["theta"] + self.hp.server_lr * stacked_mean', 'server["theta"] - self.hp.server_lr * stacked_mean', "sign of the server step"),
        M("fedavg.py", '"theta": server["theta"] + self.hp.server_lr * stacked_mean(uploads, "delta")', '"theta": server["theta"] + stacked_mean(uploads, "delta")', "server_lr dropped"),
    ],
    "fedprox": [
        M("fedprox.py", 'g - mu * msg["theta"]', 'g + mu * msg["theta"]', "sign of the proximal anchor"),
        M("fedprox.py", "unclipped=mu * theta", "unclipped=2 * mu * theta", "coefficient of μθ"),
        M("fedprox.py", 'descend(theta, g - mu * msg["theta"], step, unclipped=mu * theta)', 'descend(theta, g, step, unclipped=mu * theta)', "anchor term dropped"),
        M("fedprox.py", 'descend(theta, g - mu * msg["theta"], step, unclipped=mu * theta)', 'descend(theta, g - mu * msg["theta"] + mu * theta, step)', "proximal gradient clipped with g"),
    ],
    "scaffold": [
        M("scaffold.py", 'correction = msg["c"] - cstate["c_i"]', 'correction = cstate["c_i"] - msg["c"]', "sign of the correction"),
        M("scaffold.py", "delta / (K * info.lr)", 'delta / (getattr(info, "mean_steps", None) or info.local_steps) / info.lr',
          "the round's K instead of the client's own K_i"),
        M("scaffold.py", 'uploads["delta_c"].sum(dim=0) / info.n_clients', 'uploads["delta_c"].sum(dim=0) / info.n_sampled', "1/m instead of 1/N for c"),
        M("scaffold.py", 'server["theta"] + self.hp.server_lr * stacked_mean(uploads, "delta")', 'server["theta"] + stacked_mean(uploads, "delta")', "server_lr dropped"),
    ],
    "fedgamma": [
        M("fedgamma.py", "direction = g + correction if", "direction = g - correction if", "sign of the corrected perturbation"),
        M("fedgamma.py", "sam_gradient(theta, direction, self.hp.rho", "sam_gradient(theta, -direction, self.hp.rho", "descent instead of ascent"),
        M("fedgamma.py", "        return g_sam\n", "        return g\n", "SAM gradient dropped"),
    ],
    "feddyn": [
        M("feddyn.py", 'data_grad + lam * (cstate["h"] - msg["theta"])', 'data_grad + lam * (cstate["h"] + msg["theta"])', "sign of θ^t in the linear term"),
        M("feddyn.py", "step, unclipped=lam * theta)", "step, unclipped=0.5 * lam * theta)", "coefficient of λθ"),
        M("feddyn.py", '{**cstate, "h": cstate["h"] + delta}', '{**cstate, "h": cstate["h"] - delta}', "sign of the dual update"),
        M("feddyn.py", 'uploads["delta"].sum(dim=0) / info.n_clients', 'uploads["delta"].sum(dim=0) / info.n_sampled', "h averaged over sampled clients only"),
        M("feddyn.py", 'stacked_mean(uploads, "delta") + h_mean', 'stacked_mean(uploads, "delta")', "h̄ dropped from the server model"),
    ],
    "fedspeed": [
        M("fedspeed.py", "sam_gradient(theta, g, self.hp.rho", "sam_gradient(theta, -g, self.hp.rho", "descent instead of ascent"),
        M("fedspeed.py", "self._dyn_descent(theta, g_sam, cstate", "self._dyn_descent(theta, g, cstate", "SAM gradient dropped"),
        M("fedspeed.py", "sam_gradient(theta, g, self.hp.rho", "sam_gradient(theta, g, 2 * self.hp.rho", "coefficient of ρ"),
    ],
    "fedsmoo": [
        M("fedsmoo.py", 'direction = g - cstate["mu"] - s', 'direction = g + cstate["mu"] - s', "sign of μ_i in the ascent"),
        M("fedsmoo.py", "self.hp.rho, self.hp.eps) - s)", "self.hp.rho, self.hp.eps) + s)", "sign of s in the dual update"),
        M("fedsmoo.py", '{**cstate, "mu": mu}, loss', "cstate, loss", "μ_i never updated"),
        M("fedsmoo.py", 'sam_perturbation(stacked_mean(uploads, "mu")', 'sam_perturbation(-stacked_mean(uploads, "mu")', "sign of the server perturbation"),
    ],
    "fedsam": [
        M("fedsam.py", "sam_gradient(theta, g, self.hp.rho", "sam_gradient(theta, -g, self.hp.rho", "descent instead of ascent"),
        M("fedsam.py", "return descend(theta, g_sam, step)", "return descend(theta, g, step)", "SAM gradient dropped"),
        M("fedsam.py", "sam_gradient(theta, g, self.hp.rho", "sam_gradient(theta, g, 2 * self.hp.rho", "coefficient of ρ"),
    ],
    "mofedsam": [
        M("mofedsam.py", ('/ (-(info.local_steps * info.prev_lr))', "delta_bar / (-(info.mean_steps * info.lr))"),
          ('/ (info.local_steps * info.prev_lr)', "delta_bar / (info.mean_steps * info.lr)"), "sign of the momentum"),
        M("mofedsam.py", ("info.local_steps * info.prev_lr", "info.mean_steps * info.lr"),
          ("info.local_steps * info.lr", "info.mean_steps * info.prev_lr"), "the wrong round's learning rate"),
        M("mofedsam.py", "self.hp.alpha * g_sam +", "self.hp.alpha * g +", "SAM gradient dropped"),
        M("mofedsam.py", ('"delta_bar": delta_bar}', '"m": m}'), ('"delta_bar": self.hp.server_lr * delta_bar}',
                                                             '"m": self.hp.server_lr * m}'), "momentum scaled by η_g"),
        M("mofedsam.py", ("info.local_steps * info.prev_lr", "info.mean_steps * info.lr"),
          ("2 * info.local_steps * info.prev_lr", "info.client_steps[0] * info.lr"), "the wrong K (client 0's)"),
    ],
    "fedsmoo_adaptive": [
        M("fedsmoo_adaptive.py", "hp.a * (1.0 - gamma)", "hp.a * (1.0 + gamma)", "sign of the consistency term"),
        M("fedsmoo_adaptive.py", "torch.clamp(probe_loss - loss, min=0.0)", "torch.clamp(loss - probe_loss, min=0.0)", "sign of the sharpness"),
        M("fedsmoo_adaptive.py", "hp.rho_max * torch.exp(-lam)", "hp.rho_max * torch.exp(lam)", "sign in ρ_k = ρ_max e^{−λ_k}"),
        M("fedsmoo_adaptive.py", "warm = step.round < self.hp.warmup_rounds", "warm = step.round <= self.hp.warmup_rounds", "warm-up one round too long"),
        M("fedsmoo_adaptive.py", "sam_gradient(theta, g, rho,", "sam_gradient(theta, -g, rho,", "descent instead of ascent"),
        M("fedsmoo_adaptive.py", ('d = g + g_sam + 2.0 * lam', 'data = g + g_sam if'), ('d = g_sam + 2.0 * lam', 'data = g_sam if'),
          "clean loss dropped (issue 11 defect 4)"),
    ],
    "fedlesam": [
        M("fedlesam.py", 'cstate["seen"] * (cstate["theta_old"] - msg["theta"])', 'cstate["seen"] * (msg["theta"] - cstate["theta_old"])', "sign of the paper's perturbation"),
        M("fedlesam.py", 'return -msg["last_update"]', 'return msg["last_update"]', "sign of the code's perturbation"),
        M("fedlesam.py", '{"theta_old": msg["theta"].clone()', '{"theta_old": thetaK.clone()', "client keeps its end point, not the received model"),
    ],
    "fedswa": [
        M("fedswa.py", "multiplier * lr * (1.0 - (1.0 - rho) * k / K)", "multiplier * lr * (1.0 - rho * k / K)", "coefficient of the in-round decay"),
        M("fedswa.py", "multiplier * lr * (1.0 - (1.0 - rho) * k / K)", "multiplier * lr * (1.0 - (1.0 - rho) * (k + 1) / K)", "decay counted after the step"),
        M("fedswa.py", 'server["theta"] + self.hp.alpha * stacked_mean', 'server["theta"] + stacked_mean', "server α dropped"),
        M("fedswa.py", "descend(theta, g, step, lr=self.step_lr(step))", "descend(theta, g, step)", "constant lr inside the round"),
    ],
    "fedmoswa": [
        M("fedmoswa.py", 'correction = msg["c"] - cstate["c_i"]', 'correction = cstate["c_i"] - msg["c"]', "sign of the correction"),
        M("fedmoswa.py", "(theta0 - thetaK) / total_lr", "(theta0 - thetaK) / (K * info.lr)", "K·η_t instead of Σ_k η_k"),
        M("fedmoswa.py", "gamma = 1.0 if (self.hp.c_first_round_mean and info.round == 0) else self.hp.gamma", "gamma = self.hp.gamma", "first-round mean ignored"),
        M("fedmoswa.py", 'server["c"] + gamma * stacked_mean(uploads, "dc")', 'server["c"] + stacked_mean(uploads, "dc")', "momentum γ dropped"),
        # equal to the right rule in round 0 (c = c_i = 0); the c it produces is first read in round 2
        # (it survived while the contract ran two rounds)
        M("fedmoswa.py", '"dc": c_new - msg["c"]', '"dc": c_new - cstate["c_i"]', "uploads c_i⁺ − c_i instead of c_i⁺ − c"),
    ],
    "fednsam": [
        M("fednsam.py", 'return server["theta"] + self.hp.gamma * server["m"]', 'return server["theta"] - self.hp.gamma * server["m"]', "sign of the extrapolation"),
        M("fednsam.py", 'm = self.hp.gamma * server["m"] + delta_bar', 'm = server["m"] + delta_bar', "momentum γ dropped"),
        M("fednsam.py", 'sam_gradient(point, -msg["m"]', 'sam_gradient(point, msg["m"]', "paper ascent along +m"),
        M("fednsam.py", 'point = theta + self.hp.gamma * msg["m"] if self._every_step else theta', "point = theta", "every-step look-ahead dropped"),
        M("fednsam.py", '"theta": server["theta"] + m, "m": m}', '"theta": server["theta"] + delta_bar, "m": m}', "server steps by Δ̄ instead of m"),
    ],
    "fedvssam": [
        M("fedvssam.py", "return (1.0 - weight) * h + weight * x", "return weight * h + (1.0 - weight) * x", "mixing weights swapped"),
        M("fedvssam.py", "ascent = mix(h, g, gamma_l) if self.hp.lf else g", "ascent = g", "LF switch ignored (perturb along g)"),
        M("fedvssam.py", ("lr_k = info.lr * info.local_steps", "lr_k = info.lr * info.mean_steps"),
          ("lr_k = info.lr", "lr_k = info.lr"), "K dropped from η_t K"),
        M("fedvssam.py", ("lr_k = info.lr * info.local_steps", "lr_k = info.lr * info.mean_steps"),
          ("lr_k = info.lr * info.local_steps * 1.5", "lr_k = info.lr * max(info.client_steps)"),
          "the wrong K (the largest client's)"),
        M("fedvssam.py", "- ((1.0 - gamma_g) * lr_k) * server[\"h\"])", "+ ((1.0 - gamma_g) * lr_k) * server[\"h\"])", "sign of the stale direction in the server step"),
        M("fedvssam.py", "return 1.0 if (self._warmup(round_) or not self.hp.gu) else self.hp.gamma_g", "return 1.0 if self._warmup(round_) else self.hp.gamma_g", "GU switch ignored"),
    ],
    "fedgf": [
        M("fedgf.py", 'point = c * msg["perturbed"] + (1.0 - c) * point', 'point = (1.0 - c) * msg["perturbed"] + c * point', "mixing weights swapped"),
        M("fedgf.py", 'sam_perturbation(server["p"], self.rho_global', 'sam_perturbation(-server["p"], self.rho_global', "global descent instead of ascent"),
        M("fedgf.py", '"c": window.sum() / filled}', '"c": window.sum() / self.hp.window}', "c over W, not the rounds seen"),
        M("fedgf.py", "bit = (divergence > self.hp.divergence_threshold)", "bit = (divergence < self.hp.divergence_threshold)", "divergence test reversed"),
        M("fedgf.py", "return self.hp.rho if self.hp.rho_global is None else self.hp.rho_global", "return self.hp.rho", "ρ_g ignored"),
        M("fedgf.py", 'perturbed = server["theta"] + sam_perturbation', 'perturbed = server["theta"] - server["p"] + sam_perturbation', "perturbation around θ^{t−1}"),
    ],
    "fedgloss": [
        M("fedgloss.py", 'sam_perturbation(server["pseudo_grad"]', 'sam_perturbation(-server["pseudo_grad"]', "server descent instead of ascent"),
        M("fedgloss.py", 'g_sam - cstate["lam"] +', 'g_sam + cstate["lam"] +', "sign of λ_i in the local step"),
        M("fedgloss.py", '(theta - msg["theta"]) / self.hp.beta', '(theta - msg["theta"]) / (2 * self.hp.beta)', "coefficient of the prox term"),
        M("fedgloss.py", '{"lam": cstate["lam"] - delta / self.hp.beta}', '{"lam": cstate["lam"] + delta / self.hp.beta}', "sign of the client dual update"),
        M("fedgloss.py", "delta_bar / (self.hp.beta * info.n_clients)", "delta_bar / (self.hp.beta * info.n_sampled)", "σ divided by m instead of N"),
        M("fedgloss.py", "theta = theta - self.hp.beta * sigma", "theta = theta - sigma", "β dropped from the server correction"),
        M("fedgloss.py", "return rho0 + t * (rho - rho0) / T_s", "return rho0 + (t + 1) * (rho - rho0) / T_s", "ramp one round ahead"),
        M("fedgloss.py", "return self.hp.rho + (self.hp.rho_server", "return self.hp.rho_server + (self.hp.rho_server", "code warm-up built from the server ρ"),
    ],
    "fedwmsam": [
        M("fedwmsam.py", '* (msg["c"] - cstate["c_i"])', '* (cstate["c_i"] - msg["c"])', "sign of the personalised correction"),
        M("fedwmsam.py", "target = msg[\"theta\"] + step.k * p", "target = msg[\"theta\"] + (step.k + 1) * p", "predicted point one step ahead"),
        M("fedwmsam.py", "theta + e if self.hp.perturb == \"toward\" else theta - e", "theta - e if self.hp.perturb == \"toward\" else theta + e", "perturbation away from the predicted point"),
        M("fedwmsam.py", '- msg["c"] - delta / (K * info.lr)}', '- msg["c"] + delta / (K * info.lr)}', "sign of Δ_i in the client control"),
        M("fedwmsam.py", '(info.n_sampled * server["c"] + scaled', '(scaled', "c^t dropped from the server control update"),
        # v = 1 + cos(Δ_i, m) lies below the clamp's 0.1 in this federation (cos ≈ −0.92 … −0.99), so a
        # change inside [0.1, 0.9] (1 + cos → cos) survives; what the suite sees is the round-0 rule and the EMA
        M("fedwmsam.py", "torch.where(norms > 0, cos + 1.0, torch.zeros_like(cos))", "cos + 1.0", "v = 1 (not 0) where m = 0"),
        M("fedwmsam.py", "ALPHA_KEEP, ALPHA_LO, ALPHA_HI = 0.99, 0.1, 0.9", "ALPHA_KEEP, ALPHA_LO, ALPHA_HI = 0.9, 0.1, 0.9", "EMA weight of α"),
        M("fedwmsam.py", "info.mean_steps * info.lr / self.hp.momentum_scale", "info.mean_steps * info.prev_lr / self.hp.momentum_scale", "the wrong round's learning rate in m"),
        M("fedwmsam.py", "descend(theta, alpha * g + (1.0 - alpha) * p, step)", "descend(theta, alpha * g + alpha * p, step)", "weight of the momentum"),
    ],
    "fedacg": [
        M("fedacg.py", "d = g + 2.0 * self.hp.beta *", "d = g + self.hp.beta *", "coefficient of the prox gradient"),
        M("fedacg.py", 'return server["theta"] + self.hp.lam * server["m"]', 'return server["theta"] - self.hp.lam * server["m"]', "sign of the look-ahead"),
        # m⁰ = 0, so m¹ = Δ̄⁰ either way; the accumulated m² is first read in round 2 (it survived
        # while the contract ran two rounds)
        M("fedacg.py", 'm = self.hp.lam * server["m"] + mean_delta', "m = mean_delta", "momentum accumulation dropped"),
        M("fedacg.py", "theta = self._lookahead(server) + mean_delta", 'theta = server["theta"] + mean_delta', "server forgets the look-ahead"),
    ],
    "fedgmt": [
        M("fedgmt.py", 'self.hp.alpha * server["teacher"] + (1.0 - self.hp.alpha) * theta', '(1.0 - self.hp.alpha) * server["teacher"] + self.hp.alpha * theta', "EMA weights swapped"),
        M("fedgmt.py", '(1.0 - self.hp.alpha) * theta', '(1.0 - self.hp.alpha) * server["theta"]', "EMA of the previous global model"),
        M("fedgmt.py", "hp.gamma * hp.tau**2", "hp.gamma", "τ² dropped from the KL weight"),
        M("fedgmt.py", 'Distill(msg["teacher"], hp.tau,', 'Distill(msg["teacher"], 1.0,', "no temperature in the softmaxes"),
        M("fedgmt.py", 'Distill(msg["teacher"]', 'Distill(msg["theta"]', "teacher = θ^t, not the trajectory"),
        M("fedgmt.py", 'g = g + cstate["h"] / hp.beta', 'g = g - cstate["h"] / hp.beta', "sign of the dual term"),
        M("fedgmt.py", '{"h": cstate["h"] + delta}', '{"h": cstate["h"] + delta / self.hp.beta}', "client dual scaled by 1/β (FedGloSS's convention)"),
        # survived the three-round schedule (no client takes part three times there); killed by the
        # fourth round of test_client_state_read_at_a_third_participation
        M("fedgmt.py", '{"h": cstate["h"] + delta}', '{"h": delta}', "client dual not accumulated, h_i ← Δ_i"),
        M("fedgmt.py", 'uploads["delta"].sum(dim=0) / info.n_clients', 'uploads["delta"].sum(dim=0) / info.n_sampled', "h̄ over the m sampled clients, not all N"),
    ],
    "fedsol": [
        M("fedsol.py", "g, _ = grad_fn(theta + e, batch)", "g, _ = grad_fn(theta - e, batch)", "descent of the proximal loss instead of ascent"),
        M("fedsol.py", "1.0, with_ce=False))", "1.0, with_ce=True))", "perturbation along CE + KL (FedSAM-like)"),
        M("fedsol.py", "Distill(anchor, self.hp.tau,", "Distill(anchor, 1.0,", "temperature ignored"),
        M("fedsol.py", "e = torch.where(moved, e, torch.zeros_like(e))", "e = e", "rounding noise normalised at θ = θ^t (the code's first step)"),
        M("fedsol.py", "return descend(theta, g, step), cstate, loss", "return descend(theta + e, g, step), cstate, loss", "descent from the perturbed point"),
    ],
    # issue 45
    "fedlesam_s": [
        M("fedlesam_s.py", 'd = g + self.hp.correction_scale * (msg["c"] - cstate["c_i"])', 'd = g + (msg["c"] - cstate["c_i"])', "correction scale ignored"),
        M("fedlesam_s.py", 'g, loss = self.perturbed_gradient(theta, cstate, msg, batch, grad_fn)', 'g, loss = grad_fn(theta, batch)', "no perturbation"),
    ],
    "fedlesam_d": [
        M("fedlesam_d.py", 'g, loss = self.perturbed_gradient(theta, cstate, msg, batch, grad_fn)', 'g, loss = grad_fn(theta, batch)', "no perturbation"),
    ],
    "fedscar": [
        # read only at a third participation (a nonzero b_i that sat a round out)
        M("fedscar.py", 'hp.gamma ** (t - cstate["last_round"]) * cstate["b"]', 'hp.gamma * cstate["b"]', "b_i decayed once, not once per round away"),
        M("fedscar.py", 'normalized(msg["theta"] - cstate["last_end"], hp.eps)', 'normalized(cstate["last_end"] - msg["theta"], hp.eps)', "bias step away from the new global model"),
        M("fedscar.py", '+ (msg["b_mean"] - b)', '+ (b - msg["b_mean"])', "sign of the bias correction b̄ − b_i"),
        M("fedscar.py", "self.hp.beta * (h_mean - b_mean)", "self.hp.beta * h_mean", "b̄ dropped from the server model"),
    ],
    "dp_fedavg": [
        M("dp_fedavg.py", "self.hp.update_clip / info.n_sampled", "self.hp.update_clip / info.n_sampled**0.5", "noise σC/√m on the mean (the per-client scale)"),
        M("dp_fedavg.py", '"delta": clip_by_norm(thetaK - theta0, self.hp.update_clip)', '"delta": thetaK - theta0', "updates not clipped"),
        M("dp_fedavg.py", 'torch_generator(info.seed, "dp-noise", info.round)', 'torch_generator(info.seed, "dp-noise", 0)', "the same noise every round"),
    ],
    "dp_fedsam": [
        M("dp_fedsam.py", "scale * sam_perturbation(scale * g,", "sam_perturbation(scale * g,", "ASAM's outer |θ| dropped"),
        M("dp_fedsam.py", "g_sam, _ = sam_gradient(theta, g, self.hp.rho, batch, grad_fn, self.hp.eps)", "g_sam = g", "no SAM step"),
    ],
}
# shared building blocks, checked on the methods listed
SHARED = {
    "_lesam.py": (["fedlesam_s", "fedlesam_d"], [
        M("_lesam.py", 'cstate["seen"] * (cstate["theta_old"] - msg["theta"])', 'cstate["seen"] * (msg["theta"] - cstate["theta_old"])', "perturbation toward the new model"),
        M("_lesam.py", '"last_update": new["theta"] - server["theta"]', '"last_update": server["theta"] - new["theta"]', "sign of the last global update"),
        M("_lesam.py", '"theta_old": msg["theta"].clone()', '"theta_old": thetaK.clone()', "θ_old = the client's own end point"),
    ]),
    "base.py": (["fedavg", "fedprox", "fedsam"], [
        M("base.py", "keepdim=True) + 1e-6), max=1.0)", "keepdim=True) + 1e-6), max=1.5)", "clip scales short vectors up"),
        M("base.py", "d = d + step.weight_decay * theta", "d = d - step.weight_decay * theta", "sign of weight decay"),
        M("base.py", "d = clip_by_norm(direction, step.clip_norm)\n    if unclipped is not None:\n        d = d + unclipped",
          "d = direction\n    if unclipped is not None:\n        d = d + unclipped", "no clipping"),
    ]),
    "models/functional.py": (["fedgmt", "fedsol"], [
        M("models/functional.py", "target = F.softmax(self._train_logits(distill.teacher, x)", "target = F.softmax(self._train_logits(theta, x)", "teacher logits from the student"),
        M("models/functional.py", 'target, reduction="batchmean")', 'target, reduction="mean")', "KL averaged over classes too"),
        M("models/functional.py", "objective = distill.weight * kl\n", "objective = kl\n", "KL weight ignored"),
    ]),
    "sam.py": (["fedsam", "fedspeed"], [
        M("sam.py", "return rho * normalized(direction, eps)", "return -rho * normalized(direction, eps)", "SAM perturbation flipped"),
    ]),
}
REPAIRS: dict[str, list[Mutation]] = {}


def _path(root: Path, file: str) -> Path:
    return root / "fedlab" / ("algorithms/" + file if "/" not in file else file)


def apply(root: Path, mut: Mutation) -> bool:
    """Replace ``mut.old`` by ``mut.new`` in the copy under ``root``; False if the text is absent."""
    path = _path(root, mut.file)
    text = path.read_text(encoding="utf-8")
    for old, new in mut.pairs():
        n = text.count(old)
        if n > 1:
            raise SystemExit(f"mutation {mut.what!r}: {old!r} occurs {n} times in {mut.file}; make it unique")
        if n == 1:
            path.write_text(text.replace(old, new), encoding="utf-8")
            return True
    return False


def node_ids(methods: list[str]) -> list[str]:
    """Contract tests of the rows of ``methods`` (and reductions onto them), reference checks first."""
    labels = [c.label for c in CASES if c.method in methods]
    reducing = [c.label for c in CASES if c.reduces_to and (c.method in methods or c.reduces_to.target in methods)]
    out = []
    for c in CASES:
        if c.label not in labels:
            continue
        for mode in ("fixed", "epoch"):
            # the mutants are arithmetic, not execution, bugs: the sequential executor sees them all
            out.append(f"tests/test_contract.py::test_engine_matches_independent_reference[{c.label}-{mode}-sequential]")
    out += [f"tests/test_contract.py::test_communication_and_gradient_evaluations_through_the_engine[{lab}]"
            for lab in labels]
    out += [f"tests/test_contract.py::test_reduction_is_exact[{lab}]" for lab in reducing]
    out += [f"tests/test_contract.py::test_client_state_read_at_a_third_participation[{c.label}]"
            for c in CASES if c.label in labels and c.is_default]
    return out


def run_suite(root: Path, ids: list[str], runxfail: bool) -> tuple[bool, float]:
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "--no-header", "-o", "addopts="]
    if runxfail:
        cmd.append("--runxfail")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd + ids, cwd=root, env=env, capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"pytest could not run (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc.returncode == 0, time.perf_counter() - t0


def fresh_copy(tmp: Path) -> Path:
    root = Path(tempfile.mkdtemp(dir=tmp))
    shutil.copytree(ROOT / "fedlab", root / "fedlab", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "tests", root / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def check_group(name: str, targets: list[str], mutations: list[Mutation], tmp: Path) -> tuple[int, int]:
    ids = node_ids(targets)
    repairs = [r for t in targets for r in REPAIRS.get(t, [])]
    runxfail = False
    if repairs:
        root = fresh_copy(tmp)
        applied = [r for r in repairs if apply(root, r)]
        runxfail = True
        ok, secs = run_suite(root, ids, runxfail)
        label = ", ".join(r.what for r in applied) or "already fixed"
        print(f"  baseline with repair ({label}): {'passes' if ok else 'FAILS'} ({secs:.0f} s)", flush=True)
        if not ok:
            return 0, 0

    def one(mut: Mutation) -> bool | None:
        root = fresh_copy(tmp)
        for r in repairs:
            apply(root, r)
        if not apply(root, mut):
            print(f"  n/a       {name}: {mut.what} (text not found in {mut.file})", flush=True)
            return None
        passed, secs = run_suite(root, ids, runxfail)
        print(f"  {'killed  ' if not passed else 'SURVIVED'}  {name}: {mut.what}  ({secs:.0f} s)", flush=True)
        shutil.rmtree(root, ignore_errors=True)
        return not passed

    with ThreadPoolExecutor(max_workers=JOBS) as pool:  # each mutant runs in its own subprocess
        outcomes = [o for o in pool.map(one, mutations) if o is not None]
    return sum(outcomes), len(outcomes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", action="append", help="only these methods (repeatable); 'base.py'/'sam.py' for shared code")
    parser.add_argument("--list", action="store_true", help="print the mutations and exit")
    parser.add_argument("--jobs", type=int, default=1, help="mutants tested at once (one subprocess each)")
    args = parser.parse_args()
    global JOBS
    JOBS = max(1, args.jobs)
    groups = {m: ([m], muts) for m, muts in MUTATIONS.items()}
    groups.update(SHARED)
    chosen = args.method or list(groups)
    unknown = sorted(set(chosen) - set(groups))
    if unknown:
        raise SystemExit(f"--method {unknown} unknown; allowed: {', '.join(groups)}")
    if args.list:
        for g in chosen:
            for mut in groups[g][1]:
                print(f"{g:18s} {mut.file:22s} {mut.what}")
        return
    results = {}
    with tempfile.TemporaryDirectory(prefix="fedlab-mutants-") as tmp:
        for g in chosen:
            targets, muts = groups[g]
            print(f"{g}: {len(muts)} mutants, contract tests of {', '.join(targets)}", flush=True)
            results[g] = check_group(g, targets, muts, Path(tmp))
    print("\nmethod              killed / total")
    for g, (k, n) in results.items():
        print(f"{g:18s}  {k:3d} / {n}")
    k_all, n_all = sum(k for k, _ in results.values()), sum(n for _, n in results.values())
    print(f"{'all':18s}  {k_all:3d} / {n_all}")


if __name__ == "__main__":
    main()
