# %% [markdown]
# # 02 · Flatness incompatibility: why locally flat is not globally flat
#
# Sharpness-aware minimisation (SAM, Foret et al. ICLR'21) looks for parameters whose loss stays low
# in a whole ρ-ball. **FedSAM** (Qu et al. ICML'22; Caldarola et al. ECCV'22) runs SAM inside every
# client: with minibatch ξ of client i,
#
# $$g = \nabla f_i(\theta;\xi),\qquad \hat\varepsilon_i = \rho\,\frac{g}{\lVert g\rVert},\qquad
# \theta \leftarrow \theta - \eta\,\nabla f_i(\theta + \hat\varepsilon_i;\xi),$$
#
# and the server averages the local models as FedAvg does, $\theta^{t+1} = \theta^t + \frac1m\sum_{i\in S_t}\Delta_i$
# with $\Delta_i = \theta_{i,K} - \theta^t$.
# The objective the federation cares about is the *global* one, $F(\theta) = \frac1N\sum_i F_i(\theta)$,
# whose SAM perturbation would be $\varepsilon^\star = \rho\,\nabla F/\lVert\nabla F\rVert$. Each client
# perturbs along its own gradient instead, so it measures the sharpness of a direction F does not care
# about, and finds a region that is flat *for its own data*. **FedVSSAM** (Xiao et al. NeurIPS'26) names
# this *flatness incompatibility*; FedSWA/FedMoSWA (Liu et al. ICML'25) and FedNSAM (Liu et al. MM'25)
# describe the same failure ("locally flat, not globally flat") and FedNSAM measures it with the
# *flatness distance* $\Delta_D = \frac1m\sum_i\lVert\theta_{i,K} - \theta^{t+1}\rVert^2$.
#
# This notebook shows the failure twice:
# 1. on a **2-D toy federation** whose losses are written down in closed form, where we can see every
#    basin, and where the real fedlab algorithm objects run on it (`fedlab.engine.toy.run_functional`);
# 2. on a **real network** (the GroupNorm CNN on Fashion-MNIST after a few FedAvg rounds), with the
#    measurements of `fedlab.analysis`: misalignment of the local perturbations, missed sharpness, the
#    γ_l mixing of FedVSSAM, the top Hessian eigenvalue as heterogeneity grows, and Δ_D per round.
#
# Sizes: the defaults are the `ci` profile (a minute or two on a laptop CPU; the network analyses then use
# a few clients and a few dozen samples each, so their numbers are noisy). `params/02_flatness_incompatibility.cpu.yaml`
# uses all 60 000 images and 100 clients and writes the citable figures to `figures/`.

# %% tags=["parameters"]
profile = "ci"  # ci | cpu | paper: where figures go (ci → figures/_scratch, others → figures/)
seed = 0  # drives partition, init, sampling, batches and the analysis samples
client_threads = 1  # CPU: clients trained at once, one core each (same numbers as 1, not hashed)
# --- part 1: the 2-D toy federation (closed form; the same at every profile) ---
toy_rounds = 60  # communication rounds in the toy
toy_local_steps = 20  # K in the toy
toy_lr = 0.2  # local learning rate in the toy
toy_rho = 0.3  # SAM radius in the toy (its basins are about one unit wide)
toy_start = [0.5, 0.8]  # where all three methods start in the toy
# --- part 2: a real network ---
dataset = "fmnist"  # any of fedlab.DATASETS
model = "cnn"  # any of fedlab.MODELS
train_size = 2000  # class-balanced training subset (None: all 60 000 images)
test_size = 500  # class-balanced test subset (None: all 10 000)
n_clients = 10  # N
participation = 0.3  # fraction of clients per round
alpha = 0.1  # Dirichlet concentration of the main federation (small: heterogeneous)
rounds = 8  # communication rounds of every training run
local_steps = 5  # K
batch_size = 32  # B
lr = 0.05  # local learning rate η_l
eval_every = 4  # evaluate the global model every this many rounds
eval_subsample = None  # evaluate on a class-balanced subset of the test set (None: all of it)
rho = 0.05  # SAM radius: FedSAM's ρ in training and the ρ of every measured perturbation
alphas = [0.1, 1.0]  # heterogeneity sweep for FedAvg vs FedSAM (one run each)
analysis_clients = 6  # clients used by the perturbation analyses
max_per_client = 64  # samples per client in the perturbation analyses
analysis_batches = 2  # minibatches g_{i,b} per client
eval_batches = None  # minibatches of 64 per client on which F is evaluated (None: each client's analysis samples)
gammas = [0.0, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0]  # FedVSSAM local mixing weights γ_l to sweep
sharpness_sample = 200  # class-balanced training images on which λ_max is measured
eig_iters = 10  # power iterations for λ_max
device = "cpu"  # cpu | cuda (the paper profile needs a GPU)

# %%
import warnings

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from torch.func import grad_and_value

import fedlab
from fedlab.analysis import (
    client_gradients,
    federation_from_config,
    flatness_incompatibility,
    global_loss_fn,
    mixing_sweep,
    top_eigenvalues,
)
from fedlab.data.datasets import balanced_subset
from fedlab.engine.toy import run_functional
from fedlab.tools.plots import method_color, method_label, use_house_style
from fedlab.tools.figures import save_figure
from fedlab.tools.repro import torch_generator

use_house_style()
# A Dirichlet split can leave a client without data; the analyses leave such clients out of F (they have
# no F_i) and announce it with a UserWarning. The number of clients used is printed below instead.
warnings.filterwarnings("ignore", message="client_data: left out", category=UserWarning)

# %% [markdown]
# ## 1. A toy federation in which locally flat points average to a sharp one
#
# Two clients live in the plane, θ ∈ ℝ². Every loss is a sum of Gaussian wells
# $w(\theta; c, \sigma, a) = -a\,\exp(-\lVert\theta - c\rVert^2 / 2\sigma^2)$ (a wide well is flat, a narrow one is
# sharp) plus a weak bowl that keeps everything bounded:
#
# $$f_i(\theta) = b\lVert\theta\rVert^2 + w(\theta; c_i, 1.5, 1.5) + w(\theta; 0, 0.3, 0.8) + w(\theta; G, 1.0, 0.8),
# \qquad c_{1,2} = (\mp 2, 0),\; G = (0, 2.5).$$
#
# * Each client has **its own wide, deep well** at $c_i$: its locally flat minimum.
# * Both share a **narrow well at the origin** — exactly where the average of $c_1$ and $c_2$ lies.
# * Both share a **moderately wide well at G**. For one client it is shallower than its own well; in the
#   global loss $F = \frac12(f_1 + f_2)$ each client well counts only half, so the well at G becomes
#   F's deepest *flat* minimum.
#
# A "batch" in this toy is just the client id; `grad_fn(θ, i)` returns $(\nabla f_i(\theta), f_i(\theta))$ —
# the same oracle signature the engine builds for a network, so `run_functional` drives the
# unchanged FedAvg, FedSAM and FedVSSAM classes.

# %%
TOY = dict(bowl=0.01, client_centres=((-2.0, 0.0), (2.0, 0.0)), client_width=1.5, client_depth=1.5,
           sharp_width=0.3, sharp_depth=0.8, shared_centre=(0.0, 2.5), shared_width=1.0, shared_depth=0.8)
f64 = torch.float64
C = torch.tensor(TOY["client_centres"], dtype=f64)
G = torch.tensor(TOY["shared_centre"], dtype=f64)
ORIGIN = torch.zeros(2, dtype=f64)


def well(theta, centre, width, depth):
    """-depth · exp(-‖θ − centre‖² / 2 width²), for θ of shape (..., 2)."""
    return -depth * torch.exp(-((theta - centre) ** 2).sum(-1) / (2 * width**2))


def toy_client_loss(theta, i):
    """f_i(θ) of the toy federation (client i = 0 or 1)."""
    return (TOY["bowl"] * (theta**2).sum(-1) + well(theta, C[i], TOY["client_width"], TOY["client_depth"])
            + well(theta, ORIGIN, TOY["sharp_width"], TOY["sharp_depth"])
            + well(theta, G, TOY["shared_width"], TOY["shared_depth"]))


def toy_global_loss(theta):
    """F(θ) = (f_1 + f_2) / 2."""
    return 0.5 * (toy_client_loss(theta, 0) + toy_client_loss(theta, 1))


_toy_grad = grad_and_value(toy_client_loss)


def toy_grad_fn(theta, batch):
    """(∇f_i(θ), f_i(θ)) — the grad_fn contract of fedlab algorithms; the batch is the client id."""
    return _toy_grad(theta, batch)


def toy_batch_fn(client, round_, step):
    return client  # full-batch, noise-free clients


def hessian_2d(fn, x):
    """The 2×2 Hessian of fn at x, reverse over reverse (forward mode is not needed in two dimensions)."""
    return torch.func.jacrev(torch.func.grad(fn))(x)


def newton_minimum(fn, start, steps=100):
    """A local minimum of a smooth 2-D function by damped Newton steps from ``start``."""
    x = start.clone()
    for _ in range(steps):
        g = torch.func.grad(fn)(x)
        h = hessian_2d(fn, x)
        lam = torch.linalg.eigvalsh(h)[0]
        shift = torch.clamp(1e-3 - lam, min=0.0)  # keep the Newton matrix positive definite
        x = x - torch.linalg.solve(h + shift * torch.eye(2, dtype=f64), g)
    return x


def point(v):
    """'(+x.xx, +y.yy)' with −0.00 printed as +0.00 (the sign of a rounding residue is not a fact)."""
    return "(" + ", ".join(f"{round(float(c), 2) + 0.0:+.2f}" for c in v) + ")"


def top_curvature(fn, x):
    """λ_max of the 2×2 Hessian of fn at x."""
    return float(torch.linalg.eigvalsh(hessian_2d(fn, x))[-1])


client_minima = [newton_minimum(lambda t, i=i: toy_client_loss(t, i), C[i]) for i in range(2)]
flat_min = newton_minimum(toy_global_loss, G)
sharp_min = newton_minimum(toy_global_loss, ORIGIN + 0.01)
average_of_client_minima = (client_minima[0] + client_minima[1]) / 2

# %% [markdown]
# The minima below are found by Newton's method in float64, so they are exact to the digits printed.
# λ_max is the largest eigenvalue of the Hessian of F there: the sharpness.

# %%
# NBVAL_CHECK_OUTPUT
for i, m in enumerate(client_minima):
    print(f"client {i + 1}: flat minimum at {point(m)}, f_i = {float(toy_client_loss(m, i)):.2f}, "
          f"curvature {top_curvature(lambda t, i=i: toy_client_loss(t, i), m):.2f}")
print(f"global F: flat minimum at {point(flat_min)}, F = {float(toy_global_loss(flat_min)):.2f}, "
      f"λ_max = {top_curvature(toy_global_loss, flat_min):.2f}")
print(f"global F: sharp minimum at {point(sharp_min)}, F = {float(toy_global_loss(sharp_min)):.2f}, "
      f"λ_max = {top_curvature(toy_global_loss, sharp_min):.2f}")
print(f"average of the clients' flat minima: {point(average_of_client_minima)}, "
      f"λ_max of F there = {top_curvature(toy_global_loss, average_of_client_minima):.2f}")
print("the average of the locally flat minima lies in F's sharp well:",
      bool(torch.linalg.vector_norm(average_of_client_minima - sharp_min) < 0.1))

# %% [markdown]
# ### Running FedAvg, FedSAM and FedVSSAM on it
#
# Both clients take part in every round and take K local steps of size η. FedSAM perturbs along the
# client's own gradient; **FedVSSAM** (defaults (γ_l, γ_g) = (0.4, 0.6)) keeps a server direction $h^t$, an
# EMA of the pseudo-gradients, and mixes it into both the perturbation and the step:
#
# $$h_i = (1-\gamma_l)h^t + \gamma_l g,\quad \tilde g = \nabla f_i(\theta + \rho\,h_i/\lVert h_i\rVert),\quad
# \theta \leftarrow \theta - \eta\big((1-\gamma_l)h^t + \gamma_l\tilde g\big),$$
#
# $$h^{t+1} = (1-\gamma_g)h^t + \gamma_g\,\frac{\theta^t - \overline{\theta_{i,K}}}{\eta K},\qquad
# \theta^{t+1} = \theta^t - \eta_g h^{t+1}\quad(\eta_g = \eta K).$$
#
# All three start from the same point (`toy_start`) between the shared wells.

# %%
theta_start = torch.tensor(toy_start, dtype=f64)
toy_algorithms = {
    "fedavg": fedlab.get_algorithm("fedavg"),
    "fedsam": fedlab.get_algorithm("fedsam", rho=toy_rho),
    "fedvssam": fedlab.get_algorithm("fedvssam", rho=toy_rho),
}
toy_runs = {name: run_functional(alg, theta_start, toy_grad_fn, toy_batch_fn, n_clients=2, rounds=toy_rounds,
                                 local_steps=toy_local_steps, lr=toy_lr, seed=seed)
            for name, alg in toy_algorithms.items()}
toy_end = {name: r.trajectory[-1] for name, r in toy_runs.items()}
toy_table = pd.DataFrame({
    "end point": [point(e) for e in toy_end.values()],
    "distance to F's flat minimum": [float(torch.linalg.vector_norm(e - flat_min)) for e in toy_end.values()],
    "distance to F's sharp minimum": [float(torch.linalg.vector_norm(e - sharp_min)) for e in toy_end.values()],
    "F": [float(toy_global_loss(e)) for e in toy_end.values()],
    "λ_max of F": [top_curvature(toy_global_loss, e) for e in toy_end.values()],
}, index=[method_label(n) for n in toy_end])
print(toy_table.round(3).to_string())

# %% [markdown]
# The claims that hold with a wide margin are checked; the exact end points of FedAvg and FedSAM are
# not (FedSAM keeps hopping around the origin, and its path there depends on the last bits of the
# floating-point arithmetic).

# %%
# NBVAL_CHECK_OUTPUT
d_flat = {n: float(torch.linalg.vector_norm(e - flat_min)) for n, e in toy_end.items()}
d_sharp = {n: float(torch.linalg.vector_norm(e - sharp_min)) for n, e in toy_end.items()}
print("FedVSSAM ends within 0.5 of F's flat minimum:", d_flat["fedvssam"] < 0.5)
print("FedAvg and FedSAM end within 1 unit of F's sharp minimum:", d_sharp["fedavg"] < 1.0 and d_sharp["fedsam"] < 1.0)
print("FedVSSAM is nearest to the flat minimum by more than 1 unit:",
      d_flat["fedvssam"] + 1.0 < min(d_flat["fedavg"], d_flat["fedsam"]))

# %%
lo, hi = np.array([-4.0, -2.0]), np.array([4.0, 4.5])
xs, ys = np.linspace(lo[0], hi[0], 241), np.linspace(lo[1], hi[1], 196)
grid = torch.tensor(np.stack(np.meshgrid(xs, ys), axis=-1), dtype=f64)
surfaces = [toy_client_loss(grid, 0), toy_client_loss(grid, 1), toy_global_loss(grid)]
levels = np.linspace(min(float(s.min()) for s in surfaces), 0.4, 25)
fig, axes = plt.subplots(1, 3, figsize=(16, 4.3), sharey=True)
titles = ["client 1: f₁", "client 2: f₂", "global F = (f₁ + f₂)/2 and the three methods"]
for ax, surf, title in zip(axes, surfaces, titles):
    cs = ax.contourf(xs, ys, surf.numpy(), levels=levels, cmap="viridis")
    ax.contour(xs, ys, surf.numpy(), levels=levels, colors="k", linewidths=0.3, alpha=0.4)
    ax.set_title(title)
    ax.set_xlabel("θ₁")
    ax.set_aspect("equal")
    ax.grid(False)
for i, (ax, m) in enumerate(zip(axes[:2], client_minima)):
    ax.plot(*m.numpy(), marker="o", ms=10, color="white", mec="black", label=f"client {i + 1}'s flat minimum")
    ax.legend(loc="upper left")
ax = axes[2]
for i, m in enumerate(client_minima):
    ax.plot(*m.numpy(), marker="o", ms=9, color="white", mec="black", label="clients' flat minima" if i == 0 else None)
ax.plot(*flat_min.numpy(), marker="*", ms=16, color="white", mec="black", label="F's flat minimum")
ax.plot(*sharp_min.numpy(), marker="X", ms=11, color="red", mec="black", label="F's sharp minimum")
for name, r in toy_runs.items():
    path = r.trajectory.numpy()
    wide = name == "fedavg"  # drawn wide underneath: FedSAM's path runs over it
    ax.plot(path[:, 0], path[:, 1], "-o", ms=4 if wide else 2, lw=3.5 if wide else 1.2, alpha=0.8,
            color=method_color(name), label=method_label(name))
sam_clients = toy_runs["fedsam"].client_endpoints[-1].numpy()
ax.plot(sam_clients[:, 0], sam_clients[:, 1], "s", ms=6, mfc="none", mec=method_color("fedsam"),
        label=r"FedSAM's local models $\theta_{i,K}$ (last round)")
ax.plot(*theta_start.numpy(), marker="^", ms=9, color="white", mec="black", label="start")
handles, labels = ax.get_legend_handles_labels()
fig.legend(handles, labels, loc="upper center", ncol=5, bbox_to_anchor=(0.42, 0.04), fontsize=8)
axes[0].set_ylabel("θ₂")
fig.colorbar(cs, ax=axes, shrink=0.85, label="loss")
save_figure(fig, "02_toy_landscape", notebook="02_flatness_incompatibility", profile=profile,
            caption="A two-client toy federation: each client's flat minimum (left, centre) lies elsewhere, their "
                    "average is F's sharp minimum; FedAvg and FedSAM end there, FedVSSAM at F's flat minimum (right).",
            parameters=dict(toy=TOY, toy_rounds=toy_rounds, toy_local_steps=toy_local_steps, toy_lr=toy_lr,
                            toy_rho=toy_rho, seed=seed))
plt.show()

# %% [markdown]
# **What to look at.** Left and centre: each client's landscape has its deepest, widest well on its own
# side. Right: the global loss. FedAvg's clients drift towards their own wells during the K local steps,
# and the average of the two drifted models lands between them — in the narrow well at the origin.
# FedSAM's clients do what SAM promises *locally*: SAM penalises the narrow well, so they step out of it
# and head for the flat wells of their own losses (the squares are their local models in the last
# round), yet the server averages them back to the sharp spot of F, round after round. FedVSSAM's local
# steps are anchored to the shared direction $h^t$ (weight 1 − γ_l = 0.6), so the clients drift much
# less, and the server, stepping along the EMA h, walks to the flat minimum of F. The next figure follows
# the sharpness of F along the way.

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
for name, r in toy_runs.items():
    lam = [top_curvature(toy_global_loss, th) for th in r.trajectory]
    dist = torch.linalg.vector_norm(r.trajectory - flat_min, dim=1).numpy()
    ax1.plot(range(len(lam)), lam, color=method_color(name), label=method_label(name))
    ax2.plot(range(len(dist)), dist, color=method_color(name), label=method_label(name))
ax1.set_yscale("symlog", linthresh=1.0)
ax1.set_ylabel(r"$\lambda_{max}(\nabla^2 F)$ at the global model")
ax2.set_ylabel("distance to F's flat minimum")
for ax in (ax1, ax2):
    ax.set_xlabel("round")
ax1.legend()
fig.suptitle("toy federation: where the global model goes")
save_figure(fig, "02_toy_sharpness", notebook="02_flatness_incompatibility", profile=profile,
            caption="Toy federation: top Hessian eigenvalue of F at the global model and distance to F's flat "
                    "minimum per round, for FedAvg, FedSAM and FedVSSAM.",
            parameters=dict(toy=TOY, toy_rounds=toy_rounds, toy_local_steps=toy_local_steps, toy_lr=toy_lr,
                            toy_rho=toy_rho, seed=seed))
plt.show()

# %% [markdown]
# The toy is built to show the mechanism, not to rank methods: with a shorter K, a smaller η or a
# start point inside the shared well FedAvg also finds the flat minimum, and from other start points
# (try `toy_start = [1.0, 0.8]`) FedVSSAM falls into the sharp well too. What it shows is *why* the
# failure can happen: a client cannot see the global loss, so "flat" means flat for its own data, and
# averaging flat points of different functions need not give a flat point of their mean.
#
# ## 2. The same question on a real network
#
# We train FedAvg for a few rounds on a Dirichlet split of Fashion-MNIST and stand at its global model
# θ. The measurements (module `fedlab.analysis.incompatibility`; the paper's exact Δ_FI formula is not
# public, so fedlab uses these operational definitions) are, at radius ρ:
#
# * the **misalignment** $\mathbb E_{i,b}\lVert\varepsilon_{i,b} - \varepsilon^\star\rVert^2$ of the minibatch
#   perturbations $\varepsilon_{i,b} = \rho\,g_{i,b}/\lVert g_{i,b}\rVert$ (what FedSAM uses) and its full-batch version
#   with $\varepsilon^F_i = \rho\,\nabla F_i/\lVert\nabla F_i\rVert$ (heterogeneity alone, no batch noise), where
#   $\varepsilon^\star = \rho\,\nabla F/\lVert\nabla F\rVert$; it lies in $[0, 4\rho^2]$;
# * the **missed sharpness** $\Delta_{FI} = F(\theta + \varepsilon^\star) - \mathbb E_{i,b}F(\theta+\varepsilon_{i,b})$: how much of
#   the sharpness of F the clients' perturbations fail to see. To first order it equals
#   $\frac{\lVert\nabla F\rVert}{2\rho}\times$ misalignment.

# %%
base = fedlab.Config(dataset=dataset, model=model, train_size=train_size, test_size=test_size,
                     n_clients=n_clients, participation=participation, partition="dirichlet", alpha=alpha,
                     rounds=rounds, local_steps=local_steps, batch_size=batch_size, lr=lr,
                     eval_every=eval_every, eval_subsample=eval_subsample, seed=seed, device=device,
                     client_threads=client_threads)
fedavg_run = fedlab.run(base.replace(algorithm="fedavg"), progress=False)
theta = fedavg_run.theta
net, all_clients, _ = federation_from_config(base, max_per_client=max_per_client, seed=seed)
# clients holding at least one minibatch, in id order (tiny clients would only repeat one image)
clients = [c for c in all_clients if c[1].shape[0] >= batch_size][:analysis_clients]
print(f"FedAvg after {rounds} rounds: test accuracy {fedavg_run.final_accuracy:.3f}")
print(f"{len(all_clients)} of {n_clients} clients hold data; analysis on {len(clients)} of them, "
      f"{[int(c[1].shape[0]) for c in clients]} samples each")

# %%
grads = client_gradients(net, clients, theta, batches=analysis_batches, batch_size=batch_size, seed=seed)
report = flatness_incompatibility(net, clients, theta, rho, grads=grads, eval_batches=eval_batches)
summary = report.summary().iloc[0]
print(f"F(θ) = {summary['loss']:.3f}, ‖∇F‖ = {summary['grad_norm']:.3f}, "
      f"global SAM sharpness F(θ+ε*) − F(θ) = {summary['global_sharpness']:.4f}")
print(f"misalignment: minibatch {summary['misalignment']:.5f}, full batch {summary['misalignment_full']:.5f} "
      f"(maximum possible 4ρ² = {4 * rho**2:.5f})")
print(f"cosine(ε_i, ε*): minibatch {summary['cosine']:.3f}, full batch {summary['cosine_full']:.3f}")
print(f"missed sharpness Δ_FI: minibatch {summary['missed_sharpness']:.4f}, full batch "
      f"{summary['missed_sharpness_full']:.4f}, first-order estimate {summary['missed_sharpness_first_order']:.4f}")
print(report.to_frame().round(4).to_string(index=False))

# %% [markdown]
# Read the per-client table as follows: a cosine well below 1 means client i's SAM perturbation points
# somewhere F is not steep; the missed sharpness is positive when the global perturbation ε* raises F
# more than the clients' perturbations do, i.e. the clients under-estimate the sharpness of F. When the
# minibatch and full-batch numbers are close, the misalignment comes from **heterogeneity** (δ_i) rather
# than from **batch noise** (ζ_i); notebook `03_friendly_adversary` separates the two.
#
# ### FedVSSAM's mixing
# FedVSSAM perturbs along $h_i = (1-\gamma_l)h + \gamma_l g_{i,b}$. With the idealised server direction
# $h = \nabla F$ (the quantity $h^t$ tracks), γ_l = 0 would be the global perturbation itself and γ_l = 1
# is FedSAM; the paper uses γ_l = 0.4 (moderate heterogeneity) and 0.1 (high).

# %%
sweep = mixing_sweep(net, clients, theta, rho, gammas=gammas, grads=grads, missed_sharpness=False)
sweep_table = sweep.summary()
print(sweep_table[["gamma", "misalignment", "misalignment_full", "cosine", "missed_sharpness_first_order"]]
      .round(6).to_string(index=False))

# %% [markdown]
# Two identities are checked exactly: at γ_l = 0 with h = ∇F every perturbation *is* ε*, so the
# misalignment is zero; and a federation of identical clients has ∇F_i = ∇F, so its full-batch
# misalignment is zero (only batch noise is left). The misalignment grows with γ_l because the
# mixed direction turns from h towards g as γ_l grows.

# %%
# NBVAL_CHECK_OUTPUT
identical = flatness_incompatibility(net, [clients[0]] * 4, theta, rho, batches=analysis_batches,
                                     batch_size=batch_size, seed=seed, missed_sharpness=False)
mis = sweep_table.set_index("gamma")["misalignment"]
print(f"misalignment at γ_l = 0 with h = ∇F: {round(float(mis.loc[0.0]), 6)}")
print(f"full-batch misalignment for identical clients: {round(float(identical.misalignment_full.max()), 6)}")
print("misalignment grows with γ_l:", bool(np.all(np.diff(mis.to_numpy()) > 0)))
print("clients under-estimate F's sharpness (missed sharpness > 0):", summary["missed_sharpness"] > 0)

# %%
frame = report.to_frame()
fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
x = np.arange(len(frame))
axes[0].bar(x - 0.2, frame["misalignment"], 0.4, label=r"minibatch $\varepsilon_{i,b}$", color=method_color("fedsam"))
axes[0].bar(x + 0.2, frame["misalignment_full"], 0.4, label=r"full batch $\varepsilon_i^F$", color="#8c8c8c")
axes[0].set_ylabel(r"$\Vert\varepsilon_i - \varepsilon^\star\Vert^2$")
axes[0].set_title("misalignment per client")
axes[1].bar(x - 0.2, frame["missed_sharpness"], 0.4, label=r"minibatch $\varepsilon_{i,b}$", color=method_color("fedsam"))
axes[1].bar(x + 0.2, frame["missed_sharpness_full"], 0.4, label=r"full batch $\varepsilon_i^F$", color="#8c8c8c")
axes[1].set_ylabel(r"$F(\theta+\varepsilon^\star) - F(\theta+\varepsilon_i)$")
axes[1].set_title("missed sharpness per client")
for ax in axes[:2]:
    ax.set_xticks(x, [str(i) for i in frame["client"]])
    ax.set_xlabel("client (analysis subset)")
    ax.legend()
axes[2].plot(sweep_table["gamma"], sweep_table["misalignment"], "-o", color=method_color("fedvssam"),
             label="minibatch")
axes[2].plot(sweep_table["gamma"], sweep_table["misalignment_full"], "--s", color="#8c8c8c", label="full batch")
for g, name in [(0.1, "high"), (0.4, "moderate"), (1.0, "FedSAM")]:
    axes[2].axvline(g, color="0.7", lw=0.8, ls=":")
    axes[2].text(g, 0.55, name, rotation=90, va="center", ha="right", fontsize=7,
                 transform=axes[2].get_xaxis_transform())
axes[2].set_xlabel(r"FedVSSAM local mixing $\gamma_l$")
axes[2].set_ylabel(r"$E\Vert\varepsilon_i(\gamma_l) - \varepsilon^\star\Vert^2$")
axes[2].set_title("mixing with h = ∇F shrinks the misalignment")
axes[2].legend(loc="upper left")
fig.tight_layout()
save_figure(fig, "02_misalignment", notebook="02_flatness_incompatibility", profile=profile,
            caption=f"Misalignment and missed sharpness of the clients' SAM perturbations at a FedAvg model "
                    f"({dataset}, Dirichlet α={alpha}, ρ={rho}), and the misalignment of FedVSSAM's mixed "
                    f"perturbation against γ_l.",
            parameters=dict(dataset=dataset, n_clients=n_clients, alpha=alpha, rounds=rounds, rho=rho,
                            analysis_clients=analysis_clients, max_per_client=max_per_client,
                            analysis_batches=analysis_batches, seed=seed),
            config_hashes=[fedavg_run.summary["config_hash"]])
plt.show()

# %% [markdown]
# ## 3. Sharpness of the global model as heterogeneity grows
#
# FedSAM is meant to make the *global* model flatter. If flatness is incompatible across clients, the
# benefit should shrink as the clients' data drift apart. For each α we train FedAvg and FedSAM (ρ as
# above) on the same Dirichlet split and measure the top Hessian eigenvalue λ_max of the training loss
# of the final global model, on one fixed class-balanced sample of training images (so every model is
# measured on the same function; power iteration on Hessian-vector products, `top_eigenvalues`).

# %%
data = fedlab.engine.build_dataset(base)
keep = torch.as_tensor(balanced_subset(data.y_train.cpu().numpy(), sharpness_sample, seed=seed, purpose="sharpness"),
                       device=data.x_train.device)
sharpness_loss = global_loss_fn(net, [(data.x_train[keep], data.y_train[keep])])
sweep_runs, rows = {}, []
for a in alphas:
    for name, params in [("fedavg", {}), ("fedsam", {"rho": rho})]:
        res = fedlab.run(base.replace(algorithm=name, algorithm_params=params, alpha=a), progress=False)
        sweep_runs[(a, name)] = res
        eig = top_eigenvalues(sharpness_loss, res.theta, iters=eig_iters, tol=1e-3,
                              generator=torch_generator(seed, "02-eig"))
        rows.append({"alpha": a, "method": method_label(name), "status": res.status,
                     "final test acc": res.final_accuracy, "lambda_max": float(eig.values[0]),
                     "mean Δ_D (last 3 rounds)": float(res.metrics["flatness_distance"].tail(3).mean())})
sharp_table = pd.DataFrame(rows)
print(sharp_table.round(3).to_string(index=False))

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
for name in ["fedavg", "fedsam"]:
    sel = sharp_table[sharp_table["method"] == method_label(name)]
    ax1.plot(sel["alpha"], sel["lambda_max"], "-o", color=method_color(name), label=method_label(name))
    for (a, n), res in sweep_runs.items():
        if n == name:
            style = "-" if a == min(alphas) else "--" if a == max(alphas) else ":"
            ax2.plot(res.metrics["round"], res.metrics["flatness_distance"], style, color=method_color(name),
                     label=f"{method_label(name)}, α={a:g}")
ax1.set_xscale("log")
ax1.set_xlabel("Dirichlet α (small = heterogeneous)")
ax1.set_ylabel(r"$\lambda_{max}$ of the training loss")
ax1.set_title("sharpness of the final global model")
ax1.legend()
ax2.set_xlabel("round")
ax2.set_ylabel(r"$\Delta_D$ = mean $\Vert\theta_{i,K} - \theta^{t+1}\Vert^2$")
ax2.set_title("flatness distance per round")
ax2.legend(fontsize=7)
fig.tight_layout()
save_figure(fig, "02_sharpness_vs_alpha", notebook="02_flatness_incompatibility", profile=profile,
            caption=f"Top Hessian eigenvalue of the final global model of FedAvg and FedSAM against the Dirichlet α "
                    f"({dataset}, {n_clients} clients, {rounds} rounds), and FedNSAM's flatness distance Δ_D per round.",
            parameters=dict(dataset=dataset, n_clients=n_clients, alphas=alphas, rounds=rounds, rho=rho,
                            sharpness_sample=sharpness_sample, eig_iters=eig_iters, seed=seed),
            config_hashes=[r.summary["config_hash"] for r in sweep_runs.values()])
plt.show()

# %% [markdown]
# **What to look at.** Left: if local flatness carried over to the global model, FedSAM's λ_max would
# sit below FedAvg's at every α. Right: Δ_D, the spread of the local models around the new global
# model. FedNSAM (Liu et al. MM'25) reports that Δ_D grows with heterogeneity and that a large Δ_D is
# where the average of locally flat models lands on a sharp point; the `cpu` profile shows this with
# 100 clients over many rounds.
#
# **Honest caveat.** In the `ci` size each run has a handful of rounds on 2 000 images and λ_max is
# measured on a couple of hundred images, so these curves are noisy and may show no ordering at all
# (FedSAM may even not have left the initial plateau yet). Nothing in this section is checked; the claims
# of the papers are about long runs (FedSWA/FedMoSWA report FedSAM 40.1 % vs FedAvg 45.8 % on CIFAR-100
# Dir-0.1 with ResNet-18; FedNSAM 58.5 % vs FedSAM 40.2 %). Rerun with the `cpu` or `paper` parameters:
# `papermill 02_flatness_incompatibility.ipynb out.ipynb -f params/02_flatness_incompatibility.cpu.yaml`.
#
# ## Summary
# * Local SAM measures sharpness along each client's own gradient. Under heterogeneity that direction is
#   not the global one: the misalignment and the missed sharpness are positive, and mostly caused by
#   δ_i (heterogeneity) when the data are strongly non-IID.
# * Averaging points that are flat for different functions can give a sharp point of their mean (the
#   toy); FedVSSAM anchors perturbation and step to a global direction, and its mixing weight γ_l
#   controls how much of the local misalignment is let in.
# * Next: `03_friendly_adversary` splits the misalignment into heterogeneity and batch noise.

# %% [markdown]
# ## Exercises
#
# 1. In the toy federation, set `toy_rho = 0.0`. Where does FedSAM end now, and does FedVSSAM still
#    reach F's flat minimum? Predict before you run.
# 2. Sweep `gammas` finer near 0 (e.g. `[0.0, 0.05, 0.1, 0.2]`). Is the misalignment of FedVSSAM's mixed
#    perturbation linear in γ_l? Compare with what the decomposition h_i − ∇F = γ_l(g − ∇F) predicts.
# 3. Add `alpha = 10.0` to `alphas`. Guess the sign of the change in λ_max of FedSAM's final model,
#    then check it against the figure.
