# %% [markdown]
# # 09 · Sharpness and loss landscapes of the final global models
#
# Every sharpness-aware method in this repository claims to end in a *flatter* region of the global
# loss $F(\theta) = \frac1N\sum_i F_i(\theta)$ than FedAvg, and flatter is supposed to generalise better. This
# notebook measures the claim on the final global models of the methods, with the tools of
# `fedlab.analysis`:
#
# * **top Hessian eigenvalue** $\lambda_{max}(\nabla^2 F(\theta))$, by power iteration on exact Hessian-vector
#   products $Hv = \nabla_\theta\langle\nabla F(\theta), v\rangle$ (Pearlmutter 1994; as in PyHessian, Yao et al. 2020);
# * **Hessian trace** $\mathrm{tr}\,\nabla^2F$ by Hutchinson's estimator, $\mathrm{tr}\,H = \mathbb E[v^\top H v]$ for Rademacher
#   v (entries ±1), reported with its standard error;
# * **1-D interpolation** $F((1-a)\theta_{FedAvg} + a\,\theta_{FedVSSAM})$ between two final models
#   (Goodfellow et al. ICLR'15): a barrier between them means they sit in different basins;
# * **1-D and 2-D slices** $F(\theta + a d_1 + b d_2)$ along *filter-normalised* random directions
#   (Li et al., "Visualizing the loss landscape of neural nets", NeurIPS'18): each filter of d is
#   rescaled to the norm of the same filter of θ, so that slices of different models are comparable
#   despite the scale invariance of ReLU networks with normalisation layers;
# * **sharpness over training** with `track_sharpness` (λ_max of the global model every few rounds).
#
# The methods and their update rules are the subject of notebooks 04–08; here each runs with fedlab's
# defaults except for `method_params` (by default FedVSSAM with the paper's "high heterogeneity" preset
# (γ_l, γ_g) = (0.1, 0.6) and FedSAM with ρ = 0.05), on one Dirichlet split of Fashion-MNIST. In the `ci` size a representative subset of methods is
# trained for a few rounds; `params/09_sharpness_and_landscapes.cpu.yaml` trains all 16 on all 60 000
# images with 100 clients and writes the citable figures to `figures/`.

# %% tags=["parameters"]
profile = "ci"  # ci | cpu | paper: where figures go (ci → figures/_scratch, others → figures/)
seed = 0  # drives partition, init, sampling, batches and the measurement samples
client_threads = 1  # CPU: clients trained at once, one core each (same numbers as 1, not hashed)
dataset = "fmnist"  # any of fedlab.DATASETS
model = "cnn"  # any of fedlab.MODELS
train_size = 2000  # class-balanced training subset (None: all 60 000 images)
test_size = 500  # class-balanced test subset (None: all 10 000)
n_clients = 10  # N
participation = 0.3  # fraction of clients per round
alpha = 0.1  # Dirichlet concentration (small: heterogeneous)
rounds = 8  # communication rounds
local_steps = 5  # K
batch_size = 32  # B
lr = 0.05  # local learning rate η_l
eval_every = 4  # evaluate the global model every this many rounds
eval_subsample = None  # evaluate on a class-balanced subset of the test set (None: all of it)
methods = ["fedavg", "fedsam", "fedvssam", "scaffold", "fedswa"]  # methods to train and analyse
method_params = {"fedsam": {"rho": 0.05}, "fedvssam": {"preset": "high"}}  # per-method hyperparameters
measure_clients = 5  # clients whose data define the measured F (a seeded random subset)
measure_batches = 1  # minibatches per client in the measured F
measure_batch_size = 32  # samples per minibatch there
eig_iters = 8  # power iterations for λ_max
trace_samples = 4  # Rademacher probes for the Hutchinson trace
slice_points = 11  # points of the 1-D slices and of the interpolation on [0, 1] (odd, so that a is 0 at a grid point)
slice_span = 1.0  # 1-D and 2-D slices cover [−span, span] in units of the filter-normalised direction
grid_points = 9  # the 2-D slices are grid_points × grid_points (odd)
track_methods = ["fedavg", "fedsam"]  # methods whose sharpness is tracked during training
track_every = 4  # measure λ_max every this many rounds
device = "cpu"  # cpu | cuda (the paper profile needs a GPU)

# %%
import warnings

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

import fedlab
from fedlab.analysis import (
    federation_from_config,
    filter_normalized_direction,
    global_loss_fn,
    hessian_trace,
    interpolate,
    plot_contour,
    plot_slice_1d,
    plot_surface,
    slice_1d,
    slice_2d,
    top_eigenvalues,
    track_sharpness,
)
from fedlab.tools.plots import method_color, method_label, use_house_style
from fedlab.tools.figures import save_figure
from fedlab.tools.repro import numpy_generator, torch_generator

use_house_style()
# A Dirichlet split can leave a client without data; the analyses leave such clients out of F (they have
# no F_i) and announce it with a UserWarning. The number of clients used is printed below instead.
warnings.filterwarnings("ignore", message="client_data: left out", category=UserWarning)
base = fedlab.Config(dataset=dataset, model=model, train_size=train_size, test_size=test_size,
                     n_clients=n_clients, participation=participation, partition="dirichlet", alpha=alpha,
                     rounds=rounds, local_steps=local_steps, batch_size=batch_size, lr=lr,
                     eval_every=eval_every, eval_subsample=eval_subsample, seed=seed, device=device,
                     client_threads=client_threads)


def method_config(name):
    return base.replace(algorithm=name, algorithm_params=method_params.get(name, {}))


# %% [markdown]
# ## 1. Train, tracking the sharpness of two methods on the way
# `track_sharpness` trains a run in segments of `track_every` rounds (the engine checkpoints and resumes
# bit-identically) and measures the global model after each segment; the measurements are stored next to
# the run in `runs/<algorithm>-<hash>/sharpness.csv`. If the run was already trained without tracking,
# its rounds are replayed in a temporary folder. The other methods are then trained (or loaded) normally.

# %%
tracked = {name: track_sharpness(method_config(name), every=track_every, batches=measure_batches,
                                 batch_size=measure_batch_size, max_clients=measure_clients, iters=eig_iters,
                                 seed=seed, progress=False)
           for name in track_methods}
runs = {name: fedlab.run(method_config(name), progress=False) for name in methods}
print(pd.DataFrame({
    "status": [r.status for r in runs.values()],
    "final test acc": [r.final_accuracy for r in runs.values()],
    "final train loss": [float(r.metrics["train_loss"].iloc[-1]) for r in runs.values()],
}, index=[method_label(n) for n in runs]).round(3).to_string())

# %% [markdown]
# ## 2. The function we measure
# All measurements use one fixed function: F on `measure_batches` seeded minibatches of
# `measure_batch_size` samples from each of `measure_clients` clients drawn at random (the same samples
# for every model and every point of a landscape, so F is a deterministic function of θ).

# %%
net, clients, _ = federation_from_config(base, seed=seed)
pick = np.sort(numpy_generator(seed, "09-measure-clients").choice(len(clients), min(measure_clients, len(clients)),
                                                                  replace=False))
F = global_loss_fn(net, [clients[int(i)] for i in pick], batches=measure_batches, batch_size=measure_batch_size,
                   seed=seed)
print(f"{len(clients)} of {n_clients} clients hold data; F is measured on {len(pick)} of them, "
      f"{F.n_samples} samples in all")

# %%
# NBVAL_CHECK_OUTPUT
print("methods analysed:", len(runs))
print("methods whose sharpness is tracked:", len(tracked))

# %% [markdown]
# ## 3. Curvature of every final model
# λ_max is the curvature along the sharpest direction; the trace sums the curvature over all directions
# (for a 220 000-parameter CNN a handful of probes gives only a rough estimate — the error bars show how
# rough).

# %%
rows = []
for name, res in runs.items():
    theta = res.theta.to(net.theta0())
    finite = bool(torch.isfinite(theta).all())
    eig = top_eigenvalues(F, theta, iters=eig_iters, tol=1e-3, generator=torch_generator(seed, "09-eig")) \
        if finite else None
    tr = hessian_trace(F, theta, trace_samples, generator=torch_generator(seed, "09-trace")) if finite else None
    rows.append({"method": name, "label": method_label(name), "status": res.status,
                 "F": float(F(theta)) if finite else float("nan"),
                 "lambda_max": float(eig.values[0]) if eig else float("nan"),
                 "converged": bool(eig.converged[0]) if eig else False,
                 "trace": tr.mean if tr else float("nan"), "trace_stderr": tr.stderr if tr else float("nan"),
                 "test_acc": res.final_accuracy})
curv = pd.DataFrame(rows)
print(curv.drop(columns="method").round(3).to_string(index=False))

# %%
fig, axes = plt.subplots(1, 2, figsize=(max(8, 0.8 * len(curv) + 4), 3.8))
x = np.arange(len(curv))
colors = [method_color(n) for n in curv["method"]]
axes[0].bar(x, curv["lambda_max"], color=colors)
axes[0].set_ylabel(r"$\lambda_{max}(\nabla^2 F)$")
axes[0].set_title("top Hessian eigenvalue")
axes[1].bar(x, curv["trace"], yerr=curv["trace_stderr"], color=colors, capsize=3)
axes[1].set_ylabel(r"tr $\nabla^2 F$ (Hutchinson, ± s.e.)")
axes[1].set_title("Hessian trace")
for ax in axes:
    ax.set_xticks(x, curv["label"], rotation=45, ha="right")
fig.tight_layout()
save_figure(fig, "09_curvature", notebook="09_sharpness_and_landscapes", profile=profile,
            caption=f"Top Hessian eigenvalue and Hutchinson trace of the global training loss at each method's final "
                    f"model ({dataset}, Dirichlet α={alpha}, {n_clients} clients, {rounds} rounds).",
            parameters=dict(dataset=dataset, n_clients=n_clients, alpha=alpha, rounds=rounds, methods=methods,
                            measure_clients=measure_clients, measure_batches=measure_batches,
                            eig_iters=eig_iters, trace_samples=trace_samples, seed=seed),
            config_hashes=[r.summary["config_hash"] for r in runs.values()])
plt.show()

# %% [markdown]
# **What to look at.** The SAM family (FedSAM, MoFedSAM, FedGAMMA, FedSMOO, FedSpeed, FedLESAM, FedNSAM,
# FedVSSAM) and FedSWA/FedMoSWA aim at a small λ_max; the papers report flatter global models together
# with higher accuracy after hundreds of rounds (Caldarola et al. ECCV'22, for instance, show smaller
# top Hessian eigenvalues and wider landscapes for FedSAM and FedASAM with server-side SWA on CIFAR).
# Two cautions: a model that has barely trained
# (or that collapsed to predicting one class) can also have a small λ_max, so read curvature next to
# the loss F and the accuracy; and after a handful of `ci` rounds the ordering says little — compare
# with the `cpu` figures. A *negative* trace is no bug: away from a minimum the Hessian of a network has
# many directions of negative curvature, and early in training they can outweigh the positive ones;
# with few probes the estimate is also very noisy (its variance is 2 Σ_{i≠j} H_ij²).
#
# ## 4. Between two final models: linear interpolation
# FedAvg and FedVSSAM start from the same initial weights and see the same data. If the loss along the
# straight line between their final models has no bump, they ended in the same basin.

# %%
theta_a = runs["fedavg"].theta.to(net.theta0())
theta_b = runs["fedvssam"].theta.to(net.theta0()) if "fedvssam" in runs else runs[methods[-1]].theta.to(theta_a)
name_b = "fedvssam" if "fedvssam" in runs else methods[-1]
line = interpolate(F, theta_a, theta_b, n=slice_points, extend=0.25)
end_a = float(line.losses[np.argmin(np.abs(line.alphas))])
end_b = float(line.losses[np.argmin(np.abs(line.alphas - 1.0))])
print(f"F at {method_label('fedavg')}: {end_a:.4f}, at {method_label(name_b)}: {end_b:.4f}, "
      f"highest point in between: {float(line.losses[(line.alphas >= 0) & (line.alphas <= 1)].max()):.4f}")

# %% [markdown]
# The grid contains a = 0 and a = 1 exactly, so its end values are F at the two models bit for bit:

# %%
# NBVAL_CHECK_OUTPUT
with torch.no_grad():
    print("interpolation ends equal F at the two models:", end_a == float(F(theta_a)) and end_b == float(F(theta_b)))

# %% [markdown]
# ## 5. Around each final model: filter-normalised 1-D slices
# One Gaussian draw (the same seed for every model) is filter-normalised *to each model*, so every model
# is probed along "the same" random direction at its own scale; the slice is $F(\theta + a\,d)$.

# %%
directions, slices = {}, {}
for name, res in runs.items():
    theta = res.theta.to(net.theta0())
    if not bool(torch.isfinite(theta).all()):
        continue
    directions[name] = filter_normalized_direction(net, theta, torch_generator(seed, "09-direction-1"))
    slices[name] = slice_1d(F, theta, directions[name], span=slice_span, n=slice_points)

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
plot_slice_1d(ax1, line, label=f"{method_label('fedavg')} → {method_label(name_b)}", color="#333333")
ax1.set_xlabel(f"a  (0 = {method_label('fedavg')}, 1 = {method_label(name_b)})")
ax1.set_ylabel("F")
ax1.set_title("linear interpolation between two final models")
for name, sl in slices.items():
    plot_slice_1d(ax2, sl, label=method_label(name), color=method_color(name))
ax2.set_xlabel("a (filter-normalised direction d)")
ax2.set_ylabel(r"$F(\theta + a\,d)$")
ax2.set_title("1-D slices around each final model")
ax2.legend(fontsize=7, ncol=2)
fig.tight_layout()
save_figure(fig, "09_slices_1d", notebook="09_sharpness_and_landscapes", profile=profile,
            caption=f"Left: F along the line between FedAvg's and {method_label(name_b)}'s final models. Right: F along "
                    f"one filter-normalised random direction around each method's final model ({dataset}, "
                    f"Dirichlet α={alpha}).",
            parameters=dict(dataset=dataset, n_clients=n_clients, alpha=alpha, rounds=rounds, methods=methods,
                            slice_points=slice_points, slice_span=slice_span, seed=seed),
            config_hashes=[r.summary["config_hash"] for r in runs.values()])
plt.show()

# %% [markdown]
# Two facts about these slices are exact and checked: the centre of every slice (a = 0) is F at the
# model itself, and filter normalisation gives every filter of d (a slice `W[f]` of a weight tensor
# with ≥ 2 dimensions) the norm of the same filter of θ.

# %%
# NBVAL_CHECK_OUTPUT
with torch.no_grad():
    centre_ok = all(float(sl.losses[slice_points // 2]) == float(F(runs[n].theta.to(net.theta0())))
                    for n, sl in slices.items())
print("the slice centre equals the loss at θ:", centre_ok)
worst = 0.0
for name, d in directions.items():
    theta_parts = net.spec.unflatten(runs[name].theta.to(net.theta0()))
    for (key, t_part), d_part in zip(theta_parts.items(), net.spec.unflatten(d).values()):
        if t_part.ndim >= 2:
            t_norm = torch.linalg.vector_norm(t_part.reshape(t_part.shape[0], -1), dim=1)
            d_norm = torch.linalg.vector_norm(d_part.reshape(d_part.shape[0], -1), dim=1)
            worst = max(worst, float(((d_norm - t_norm).abs() / t_norm.clamp_min(1e-12)).max()))
print("filter normalisation preserves per-filter norms:", worst < 1e-4)

# %% [markdown]
# ## 6. Two-dimensional landscapes around two models
# $F(\theta + a\,d_1 + b\,d_2)$ on a `grid_points` × `grid_points` grid, with two independent
# filter-normalised directions, around FedAvg's and FedVSSAM's final models. Contours show the basin's
# shape from above (the star is the model); the surfaces below show the same numbers in 3-D. The colour
# scale is shared, so a wider dark region means a flatter neighbourhood.

# %%
pair = ["fedavg", name_b]
landscapes = {}
for name in pair:
    theta = runs[name].theta.to(net.theta0())
    d1 = filter_normalized_direction(net, theta, torch_generator(seed, "09-direction-1"))
    d2 = filter_normalized_direction(net, theta, torch_generator(seed, "09-direction-2"))
    landscapes[name] = slice_2d(F, theta, d1, d2, span=slice_span, n=grid_points, progress=False)
low = min(float(s.losses.min()) for s in landscapes.values())
high = max(float(s.losses.max()) for s in landscapes.values())
levels = np.linspace(np.floor(np.log10(low) * 100) / 100, np.ceil(np.log10(high) * 100) / 100, 16)

fig = plt.figure(figsize=(11, 9))
for j, name in enumerate(pair):
    ax = fig.add_subplot(2, 2, j + 1)
    plot_contour(ax, landscapes[name], levels=levels, log=True)
    ax.set_title(f"{method_label(name)}: log10 F around the final model")
    ax3d = fig.add_subplot(2, 2, j + 3, projection="3d")
    plot_surface(ax3d, landscapes[name], log=True, vmin=levels[0], vmax=levels[-1])
    ax3d.set_zlim(levels[0], levels[-1])
    ax3d.set_title(method_label(name))
fig.tight_layout()
save_figure(fig, "09_landscape_2d", notebook="09_sharpness_and_landscapes", profile=profile,
            caption=f"log10 of F on a plane of two filter-normalised directions around FedAvg's and "
                    f"{method_label(name_b)}'s final models, as contours and surfaces ({dataset}, Dirichlet α={alpha}).",
            parameters=dict(dataset=dataset, n_clients=n_clients, alpha=alpha, rounds=rounds, grid_points=grid_points,
                            slice_span=slice_span, seed=seed),
            config_hashes=[runs[n].summary["config_hash"] for n in pair])
plt.show()

# %% [markdown]
# ## 7. Sharpness over training
# The tracked runs measured λ_max of the global model at round 0 (the shared initial model), every
# `track_every` rounds and at the end, on their own fixed sample (`max_clients` clients, seeded as in
# `track_sharpness`). A typical picture in centralised training is *progressive sharpening* — λ_max
# grows early in training (Cohen et al. ICLR'21, "edge of stability"); SAM is meant to hold it down.

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
for name, table in tracked.items():
    m = table.dropna(subset=["lambda_1"])
    ax1.plot(m["round"], m["lambda_1"], "-o", color=method_color(name), label=method_label(name))
    acc = fedlab.run(method_config(name), progress=False).metrics.dropna(subset=["test_acc"])
    ax2.plot(acc["round"], acc["test_acc"], "-o", color=method_color(name), label=method_label(name))
ax1.set_xlabel("round")
ax1.set_ylabel(r"$\lambda_{max}$ of the global model")
ax1.set_title("sharpness over training")
ax1.legend()
ax2.set_xlabel("round")
ax2.set_ylabel("test accuracy")
ax2.set_title("accuracy of the same runs")
fig.tight_layout()
save_figure(fig, "09_sharpness_over_training", notebook="09_sharpness_and_landscapes", profile=profile,
            caption=f"Top Hessian eigenvalue of the global model every {track_every} rounds, and test accuracy, for "
                    f"{', '.join(method_label(n) for n in track_methods)} ({dataset}, Dirichlet α={alpha}).",
            parameters=dict(dataset=dataset, n_clients=n_clients, alpha=alpha, rounds=rounds,
                            track_methods=track_methods, track_every=track_every, eig_iters=eig_iters, seed=seed),
            config_hashes=[fedlab.run(method_config(n), progress=False).summary["config_hash"] for n in track_methods])
plt.show()

# %% [markdown]
# **Honest caveat.** In the `ci` size a few rounds on 2 000 images with F measured on a couple of hundred
# samples cannot separate the methods: the numbers above are a smoke test of the pipeline, and nothing
# but exact facts is checked. The `cpu` profile trains all 16 methods on the full dataset; the papers'
# own landscape figures are for CIFAR-10/100 with ResNet-18 after hundreds of rounds (`paper` profile).
#
# ## Summary
# * λ_max and the Hessian trace summarise curvature in one number each; slices and interpolations show
#   the neighbourhood they summarise. Filter normalisation makes slices of different models comparable.
# * Whether a method's global model is flatter is an empirical question per setting; the notebooks 02
#   and 03 explain why local sharpness-awareness need not make the *global* model flat under
#   heterogeneity.

# %% [markdown]
# ## Exercises
#
# 1. Add `"fednsam"` and `"fedsmoo"` to `methods` (and `"fedsmoo": {"rho": 0.02}` to `method_params`),
#    predict which of them ends with the smaller λ_max, and check with the curvature figure.
# 2. Double `eig_iters`. How much do the λ_max estimates change? What does that say about the accuracy of
#    the numbers at the default setting?
# 3. In the 1-D interpolation between FedAvg's and FedVSSAM's final models, is there a barrier? Guess
#    first from the 2-D landscapes.
