# %% [markdown]
# # 08 · FedVSSAM: one variance-suppressed direction for the perturbation, the step and the server
#
# FedVSSAM (Xiao et al., NeurIPS'26, arXiv 2605.09144) traces the failure of local SAM under
# heterogeneity — *flatness incompatibility*, notebook `02` — to the **direction** each client perturbs
# along. A client's minibatch gradient $g_i$ is off the global gradient $\nabla F$ for two reasons that are
# orthogonal in expectation: the client's data are biased ($\delta_i = \nabla F_i - \nabla F$) and the
# minibatch is noisy ($\zeta_i = g_i - \nabla F_i$; the "friendly adversary" of notebook `03`).
# FedVSSAM keeps a server direction $h^t$ that tracks $\nabla F$ and mixes it into every direction a
# client uses, so both errors shrink by the mixing weight $\gamma_l$.
#
# **Client i, round t** (receives $\theta^t$ and $h^t$; $\theta_{i,0} = \theta^t$), each local step with
# minibatch $\xi$:
#
# | switch | rule |
# |---|---|
# | **LF** — local flatness search | $h_i = (1-\gamma_l)\,h^t + \gamma_l\, g_i$ with $g_i = \nabla f_i(\theta;\xi)$; perturbed point $\tilde\theta = \theta + \rho\, h_i/\|h_i\|$ |
# | **LU** — local update | $\tilde g = \nabla f_i(\tilde\theta;\xi)$ (same batch); $u = (1-\gamma_l)\,h^t + \gamma_l\,\tilde g$; $\theta \leftarrow \theta - \eta_l\, u$ |
# | **GU** — global update | clients upload only $\theta_{i,K}$; $g^{t+1} = (\theta^t - \tfrac1m\sum_i\theta_{i,K})/(\eta_l K)$; $h^{t+1} = (1-\gamma_g)\,h^t + \gamma_g\, g^{t+1}$; $\theta^{t+1} = \theta^t - \eta_g h^{t+1}$ |
#
# With $h^t$ fixed inside the round, the conditional variance of the step direction is
# $\mathrm{Var}[u] = \gamma_l^2\,\mathrm{Var}[\tilde g]$ — the *variance suppression* in the name. The
# paper's hyperparameters: $\rho = 0.05$, $(\gamma_l, \gamma_g) = (0.4, 0.6)$ for moderate and
# $(0.1, 0.6)$ for high heterogeneity. Uplink is one model per client, as FedAvg — half of SCAFFOLD's or
# FedGAMMA's, which also upload a control variate.
#
# **What fedlab had to choose** (no public code; see the `fedvssam` docstring): $\eta_g = \beta\,\eta_l K$
# with β = 1, so that $\gamma_l = \gamma_g = 1$ is exactly FedSAM + FedAvg (the ablation's "base");
# $h^0 = 0$; weight decay and clipping act on $u$, outside the mixing. A switch turned off replaces the
# suppressed direction with the plain one: LF off → perturb along $g_i$, LU off → step along $\tilde g$,
# GU off → $\gamma_g = 1$.

# %% tags=["parameters"]
profile = "ci"  # ci | cpu | paper: where figures go (ci → figures/_scratch, others → figures/)
dataset = "fmnist"  # any of fedlab.DATASETS
model = "cnn"  # any of fedlab.MODELS
train_size = 2000  # class-balanced training subset (None: all)
test_size = 500  # class-balanced test subset (None: all)
n_clients = 10  # N
participation = 0.3  # fraction of clients per round
alpha = 0.1  # Dirichlet concentration (smaller: more heterogeneous)
rounds = 8  # communication rounds
local_steps = 4  # K
batch_size = 32  # B
lr = 0.05  # local learning rate η_l
rho = 0.05  # SAM radius (FedVSSAM paper), also used for FedSAM
gamma_l = 0.1  # local mixing weight γ_l of the full method (paper: 0.1 high / 0.4 moderate heterogeneity)
gamma_g = 0.6  # server EMA weight γ_g (paper: 0.6)
ablation = "paper"  # "paper": base, GU, LU+GU, LF+LU, full | "all": the 8 LF/LU/GU switch combinations
gammas_l = [0.1, 0.4, 1.0]  # γ_l values of the sweep (γ_g fixed)
variance_batches = 32  # minibatches drawn to measure Var[u] against γ_l² Var[g̃]
eval_every = 2  # evaluate the global model every this many rounds
eval_subsample = None  # evaluate on a class-balanced subset of the test set (None: all of it)
check_rounds = 2  # rounds of the exact identity and communication checks
device = "cpu"  # cpu | cuda
parallel_clients = 1  # clients vmapped together (1: sequential; "auto" on a GPU)
seed = 0  # drives partition, init, sampling, batches, the variance sample
client_threads = 1  # CPU: clients trained at once, one core each (same numbers as 1, not hashed)

# %%
import itertools

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch.func import vmap

import fedlab
from fedlab.algorithms import RoundInfo, StepInfo, clip_by_norm
from fedlab.engine.batches import fixed_step_batches
from fedlab.tools.plots import method_color, use_house_style
from fedlab.tools.figures import save_figure
from fedlab.tools.repro import torch_generator
from fedlab.sweep import summary_table

use_house_style()
base = fedlab.Config(dataset=dataset, model=model, train_size=train_size, test_size=test_size,
                     n_clients=n_clients, participation=participation, partition="dirichlet", alpha=alpha,
                     rounds=rounds, local_steps=local_steps, batch_size=batch_size, lr=lr,
                     eval_every=eval_every, eval_subsample=eval_subsample, device=device,
                     parallel_clients=parallel_clients, seed=seed,
                     client_threads=client_threads)
full_params = {"rho": rho, "gamma_l": gamma_l, "gamma_g": gamma_g}

# %% [markdown]
# ## 1. Train the full method and the ablation
# The ablation follows the paper's rows: **base** ($\gamma_l = \gamma_g = 1$, i.e. FedSAM), **GU only**
# (a server EMA, plain local SAM), **LU + GU** (suppressed step and server, but the perturbation still
# along the raw minibatch gradient), **LF + LU** (suppressed local search and step, plain averaging on the
# server), and the **full** method. FedAvg is the reference. (`ablation="all"` runs the 8 switch
# combinations instead; all switches off is FedSAM again.)

# %%
if ablation == "paper":
    rows = {"base (= FedSAM)": {"rho": rho, "preset": "base"},
            "GU only": {**full_params, "lf": False, "lu": False},
            "LU + GU": {**full_params, "lf": False},
            "LF + LU": {**full_params, "gu": False},
            "full (LF + LU + GU)": full_params}
else:
    rows = {"+".join(n for n, on in zip(("LF", "LU", "GU"), switches) if on) or "none (= FedSAM)":
            {**full_params, "lf": switches[0], "lu": switches[1], "gu": switches[2]}
            for switches in itertools.product([False, True], repeat=3)}
runs = {"FedAvg": fedlab.run(base.replace(algorithm="fedavg", name="FedAvg"), progress=False)}
for label, params in rows.items():
    runs[label] = fedlab.run(base.replace(algorithm="fedvssam", algorithm_params=params, name=label),
                             progress=False)

# %%
# NBVAL_CHECK_OUTPUT
print("runs finished:", {label: res.status for label, res in runs.items()})

# %% [markdown]
# The ablation table (unchecked; in the `ci` size the differences are within the noise of a handful of
# rounds — the paper's claim is that the full method is best, "GU only" beats base but cannot stop
# local drift, "LU + GU" loses the global compatibility of the perturbation, and "LF + LU" leaves the
# aggregated pseudo-gradient noisy; base sits 4–6 points below full on CIFAR-10 under strong
# heterogeneity). One effect does show at any size: with $h^0 = 0$ the first round's local steps are
# only $\gamma_l \tilde g$ long (and the server keeps only $\gamma_g$ of the first pseudo-gradient), so the
# suppressed variants start slowly — with γ_l = 0.1, ten times slower than FedSAM in round 0. Over a
# few `ci` rounds that start-up cost dominates; over hundreds of rounds it does not (`h_init=
# "first_round"` replaces round 0 by a plain FedSAM round).

# %%
ablation_table = summary_table(runs.values())
ablation_table.insert(0, "row", list(runs))
print(ablation_table[["row", "final_acc_mean", "best_acc", "uplink_x_d", "downlink_x_d", "sec_per_round"]]
      .round(4).to_string(index=False))

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11.5, 3.8), gridspec_kw={"width_ratios": [1.4, 1]})
palette = plt.get_cmap("viridis")(np.linspace(0.0, 0.85, len(rows)))
colors = {"FedAvg": method_color("fedavg"), **dict(zip(rows, palette))}
for label, res in runs.items():
    acc = res.metrics[["round", "test_acc"]].dropna()
    ax1.plot(acc["round"], acc["test_acc"], color=colors[label], label=label,
             lw=2.4 if label.startswith("full") else 1.4)
ax1.set_xlabel("round")
ax1.set_ylabel("test accuracy")
ax1.legend()
ax1.set_title("global model")
labels = list(runs)
ax2.barh(range(len(labels)), [runs[k].final_accuracy for k in labels], color=[colors[k] for k in labels])
ax2.set_yticks(range(len(labels)), labels)
ax2.invert_yaxis()
ax2.set_xlabel("final test accuracy")
ax2.set_title("ablation")
fig.suptitle(rf"FedVSSAM ablation: {dataset}, Dirichlet $\alpha$={alpha}, "
             rf"$\gamma_l$={gamma_l}, $\gamma_g$={gamma_g}, $\rho$={rho}")
fig.tight_layout()
save_figure(fig, "08_fedvssam_ablation", notebook="08_fedvssam", profile=profile,
            caption=f"FedVSSAM ablation (LF/LU/GU switches) against FedAvg on {dataset} (Dirichlet α={alpha}, "
                    f"{n_clients} clients): accuracy curves and final accuracy.",
            parameters=dict(dataset=dataset, model=model, n_clients=n_clients, alpha=alpha, rounds=rounds,
                            local_steps=local_steps, rho=rho, gamma_l=gamma_l, gamma_g=gamma_g, seed=seed),
            config_hashes=[r.summary["config_hash"] for r in runs.values()])
plt.show()

# %% [markdown]
# ## 2. One local step and one server step, by hand
# We take the global model θ and direction h that the full run ended with (`RunResult.server`), pick
# the client with the most data and one of its minibatches, and redo the client step of the table above
# in plain tensor code; then we aggregate three made-up client models by the GU rule. Both must agree
# with `fedlab`'s `FedVSSAM` to float rounding.

# %%
full_run = runs["full (LF + LU + GU)"] if ablation == "paper" else runs["LF+LU+GU"]
# RunResult.server is the final server state (None for a run read from a committed record: retrain it)
server = full_run.server if full_run.server is not None else fedlab.run(full_run.config, need_theta=True,
                                                                        progress=False).server
theta, h = server["theta"].to(device), server["h"].to(device)
sim = fedlab.Simulation.build(full_run.config)
grad_fn = sim.model.grad_fn
client = int(np.argmax(sim.partition.sizes))
client_idx = torch.tensor(sim.partition.client_indices[client], device=device)  # a copy (the array is read-only)
batches = fixed_step_batches(client_idx, variance_batches, batch_size,
                             torch_generator(seed, "variance", device="cpu"))
xb, yb = sim.dataset.x_train[batches], sim.dataset.y_train[batches]  # (batches, B, ...), (batches, B)
batch0 = (xb[0], yb[0])

alg = fedlab.get_algorithm("fedvssam", full_params)
step = StepInfo(k=0, K=local_steps, lr=lr, weight_decay=base.weight_decay, clip_norm=base.clip_norm)
theta_lib, _, _ = alg.local_step(theta, {}, {"theta": theta, "h": h}, batch0, grad_fn, step)

g, _ = grad_fn(theta, batch0)  # minibatch gradient g_i
h_i = (1 - gamma_l) * h + gamma_l * g  # LF: adjusted ascent direction
theta_tilde = theta + rho * h_i / (torch.linalg.vector_norm(h_i) + 1e-12)
g_tilde, _ = grad_fn(theta_tilde, batch0)  # gradient at the perturbed point, same batch
u = (1 - gamma_l) * h + gamma_l * g_tilde  # LU: adjusted descent direction
theta_hand = theta - lr * (clip_by_norm(u, base.clip_norm) + base.weight_decay * theta)

uploads = theta + 0.01 * torch.randn(3, theta.numel(), generator=torch_generator(seed, "fake-clients"),
                                     dtype=theta.dtype).to(device)
info = RoundInfo(round=1, lr=lr, prev_lr=lr, client_steps=(local_steps,) * 3, n_clients=n_clients,
                 weight_decay=base.weight_decay, clip_norm=base.clip_norm)
new = alg.aggregate({"theta": theta, "h": h}, {"delta": uploads - theta}, info)
pseudo_grad = (theta - uploads.mean(0)) / (lr * local_steps)  # g^{t+1}
h_next = (1 - gamma_g) * h + gamma_g * pseudo_grad  # GU: server EMA
theta_next = theta - (lr * local_steps) * h_next  # η_g = η_l K (β = 1)


def cos(a, b):
    return float(a @ b / (torch.linalg.vector_norm(a) * torch.linalg.vector_norm(b)))


# %%
# NBVAL_CHECK_OUTPUT
print("client step: max |by hand - fedlab| < 1e-6:", float((theta_hand - theta_lib).abs().max()) < 1e-6)
print("server step: h and theta match (allclose):", bool(torch.allclose(new["h"], h_next, atol=1e-6)),
      bool(torch.allclose(new["theta"], theta_next, atol=1e-6)))
print(f"perturbation length ||theta~ - theta|| = rho = {float(torch.linalg.vector_norm(theta_tilde - theta)):.4f}")

# %% [markdown]
# How the mixing changes the directions at this point (unchecked numbers): the ascent direction $h_i$
# and the step $u$ stay close to the server's $h$, whatever the minibatch says.

# %%
print(f"||g|| = {float(torch.linalg.vector_norm(g)):.3f}, ||h|| = {float(torch.linalg.vector_norm(h)):.3f}")
print(f"cos(g, h) = {cos(g, h):.3f}   cos(h_i, h) = {cos(h_i, h):.3f}   cos(g~, h) = {cos(g_tilde, h):.3f}   "
      f"cos(u, h) = {cos(u, h):.3f}")

# %% [markdown]
# ## 3. The variance claim, measured
# At the same fixed θ, h and client we draw many minibatches and, for each γ_l, compute every batch's
# $\tilde g$ (at its own perturbed point) and $u$. Because $h$ is fixed,
# $u - \bar u = \gamma_l(\tilde g - \bar{\tilde g})$,
# so the total variance $\mathrm{Var}[x] = \mathbb E\|x - \mathbb E x\|^2$ must satisfy
# $\mathrm{Var}[u] = \gamma_l^2\, \mathrm{Var}[\tilde g]$ exactly — the first check. The useful comparison is the
# last column: the variance of FedVSSAM's step relative to the variance of FedSAM's step
# ($\gamma_l = 1$, perturbation along the raw $g$), which also contains the effect of the steadier
# perturbation on $\tilde g$ itself.

# %%
def total_variance(x):
    x = x.double()
    return float(((x - x.mean(0)) ** 2).sum(1).mean())


batched_grad = vmap(grad_fn, in_dims=(0, 0))
g_all, _ = vmap(grad_fn, in_dims=(None, 0))(theta, (xb, yb))  # (batches, d)
variance_rows = []
for gl in sorted(set(gammas_l) | {1.0}):
    h_mix = (1 - gl) * h + gl * g_all
    tilde = theta + rho * h_mix / (torch.linalg.vector_norm(h_mix, dim=1, keepdim=True) + 1e-12)
    gt, _ = batched_grad(tilde, (xb, yb))
    uu = (1 - gl) * h.double() + gl * gt.double()
    variance_rows.append({"gamma_l": gl, "gamma_l^2": gl**2, "Var[g~]": total_variance(gt),
                          "Var[u]": total_variance(uu)})
fedsam_var = variance_rows[-1]["Var[u]"]  # γ_l = 1: u = g~ of FedSAM
for row in variance_rows:
    row["Var[u]/Var[g~]"] = row["Var[u]"] / row["Var[g~]"]
    row["Var[u]/Var_FedSAM"] = row["Var[u]"] / fedsam_var

# %%
# NBVAL_CHECK_OUTPUT
print(f"client {client}, {variance_batches} minibatches of {batch_size}")
for row in variance_rows:
    equal = round(row["Var[u]/Var[g~]"], 3) == round(row["gamma_l^2"], 3)
    print(f"gamma_l = {row['gamma_l']:.2f}: Var[u]/Var[g~] = {row['Var[u]/Var[g~]']:.3f} "
          f"(gamma_l^2 = {row['gamma_l^2']:.3f}) -> equal: {equal}")

# %%
for row in variance_rows:
    print(f"gamma_l = {row['gamma_l']:.2f}: Var[g~] = {row['Var[g~]']:.4g}, Var[u] = {row['Var[u]']:.4g}, "
          f"relative to FedSAM's step: {row['Var[u]/Var_FedSAM']:.4f}")

# %% [markdown]
# ## 4. The γ_l sweep
# Smaller γ_l trusts the server direction more. With γ_g fixed, we train the method for each γ_l of
# `gammas_l` (γ_l = 1 makes $h_i = g_i$ and $u = \tilde g$, which is exactly the "GU only" row, so that run
# is reused). The paper picks 0.4 for moderate and 0.1 for high heterogeneity.

# %%
sweep_runs = {}
for gl in gammas_l:
    params = {**full_params, "gamma_l": gl} if gl < 1 else {**full_params, "lf": False, "lu": False}
    sweep_runs[gl] = fedlab.run(base.replace(algorithm="fedvssam", algorithm_params=params,
                                             name=f"γ_l={gl}"), progress=False)
sweep_table = summary_table(sweep_runs.values())
sweep_table.insert(0, "gamma_l", list(sweep_runs))
print(sweep_table[["gamma_l", "final_acc_mean", "best_acc", "status"]].round(4).to_string(index=False))

# %% [markdown]
# **What to look at.** Left: final accuracy against γ_l (FedAvg dashed) — in the `ci` size a few rounds
# on 2 000 images cannot separate the settings reliably; the `cpu` profile's figure in `figures/` does.
# Right: the measured variance of the local step relative to FedSAM's, against the $\gamma_l^2$ line;
# points below the line mean the steadier perturbation reduced $\mathrm{Var}[\tilde g]$ as well.

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.6))
ax1.plot(list(sweep_runs), [r.final_accuracy for r in sweep_runs.values()], "o-",
         color=method_color("fedvssam"), label="FedVSSAM")
ax1.axhline(runs["FedAvg"].final_accuracy, ls="--", color=method_color("fedavg"), label="FedAvg")
ax1.set_xlabel(r"$\gamma_l$")
ax1.set_ylabel("final test accuracy")
ax1.set_title(rf"$\gamma_l$ sweep ($\gamma_g$ = {gamma_g})")
ax1.legend()
gls = np.array([r["gamma_l"] for r in variance_rows])
ax2.loglog(gls, [r["Var[u]/Var_FedSAM"] for r in variance_rows], "o", color=method_color("fedvssam"),
           label="measured Var[u] / Var[FedSAM step]")
grid = np.linspace(gls.min(), 1.0, 50)
ax2.loglog(grid, grid**2, "--", color="#555555", label=r"$\gamma_l^2$")
ax2.set_xlabel(r"$\gamma_l$")
ax2.set_ylabel("relative variance of the local step")
ax2.set_title(f"fixed θ, h, client {client}, {variance_batches} minibatches")
ax2.legend()
fig.tight_layout()
save_figure(fig, "08_fedvssam_gamma_variance", notebook="08_fedvssam", profile=profile,
            caption=f"Left: FedVSSAM final accuracy against γ_l on {dataset} (Dirichlet α={alpha}). Right: variance "
                    "of the local step u relative to FedSAM's step at a fixed model and client, against γ_l².",
            parameters=dict(dataset=dataset, model=model, n_clients=n_clients, alpha=alpha, rounds=rounds,
                            gammas_l=gammas_l, gamma_g=gamma_g, rho=rho, variance_batches=variance_batches,
                            seed=seed),
            config_hashes=[r.summary["config_hash"] for r in sweep_runs.values()] + [full_run.summary["config_hash"]])
plt.show()

# %% [markdown]
# ## 5. Exact checks: "base" is FedSAM, and the uplink is FedAvg's
# A few rounds on the same federation: FedVSSAM with the preset `base` (γ_l = γ_g = 1) against FedSAM at
# the same ρ, and the floats every method sent, read from the metrics (per round, summed over the
# sampled clients). SCAFFOLD and FedGAMMA also upload a control-variate difference.

# %%
short = base.replace(rounds=check_rounds, eval_every=1)
comm = {"FedAvg": ("fedavg", {}), "FedSAM": ("fedsam", {"rho": rho}),
        "FedVSSAM base": ("fedvssam", {"rho": rho, "preset": "base"}),
        "FedVSSAM": ("fedvssam", full_params), "SCAFFOLD": ("scaffold", {}), "FedGAMMA": ("fedgamma", {})}
comm_runs = {label: fedlab.run(short.replace(algorithm=alg, algorithm_params=params), progress=False)
             for label, (alg, params) in comm.items()}

# %%
# NBVAL_CHECK_OUTPUT
diff = float((comm_runs["FedVSSAM base"].theta - comm_runs["FedSAM"].theta).abs().max())
print(f"after {check_rounds} rounds: max |FedVSSAM(base) - FedSAM| = {diff} -> identical: {diff == 0.0}")
d = comm_runs["FedAvg"].theta.numel()
m = base.clients_per_round
print(f"d = {d:,} parameters, m = {m} clients per round")
up = {label: int(res.metrics["uplink_floats"].iloc[0]) for label, res in comm_runs.items()}
down = {label: int(res.metrics["downlink_floats"].iloc[0]) for label, res in comm_runs.items()}
for label in comm_runs:
    print(f"{label:14s} uplink {up[label]:>9,} floats/round ({up[label] / (m * d):.0f}·d per client), "
          f"downlink {down[label]:>9,} ({down[label] / (m * d):.0f}·d)")
print("FedVSSAM uplink == FedAvg uplink:", up["FedVSSAM"] == up["FedAvg"])
print("FedVSSAM uplink == SCAFFOLD uplink / 2:", 2 * up["FedVSSAM"] == up["SCAFFOLD"])
print("FedVSSAM uplink == FedGAMMA uplink / 2:", 2 * up["FedVSSAM"] == up["FedGAMMA"])

# %% [markdown]
# The downlink is another matter: FedVSSAM sends $h^t$ with $\theta^t$ (2·d), as SCAFFOLD sends its
# control variate. The paper's communication claim is about the uplink, which is usually the scarce
# direction for edge devices.
#
# ## Summary
# * FedVSSAM mixes one server direction $h$ into the perturbation (LF), the local step (LU) and the
#   server update (GU); with $h$ fixed the local step's variance is exactly $\gamma_l^2$ times that of the
#   perturbed gradient, and the steadier perturbation can lower the latter too.
# * $\gamma_l = \gamma_g = 1$ is FedSAM bit for bit; the uplink is FedAvg's, half of SCAFFOLD's and FedGAMMA's.
# * Notebook `10_benchmarks` puts FedVSSAM next to all other methods on three splits.

# %% [markdown]
# ## Exercises
#
# 1. Change γ_l and predict the variance ratio before running: with `gammas_l = [0.2, 0.6]`, what
#    should Var[u] / Var[g̃] be? Compare with the γ_l² line of the variance figure.
# 2. Set `gamma_l = 1.0` and `gamma_g = 1.0`. Which method is FedVSSAM now, and which check in §5
#    confirms it bit for bit?
# 3. Run `ablation = "all"` and rank the eight switch combinations. Which switch matters most at this
#    size?
