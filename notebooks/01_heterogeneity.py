# %% [markdown]
# # 01 · Heterogeneity: how clients' data are split, and why "Dir-0.5" is not always "Dir-0.5"
#
# Every result in federated learning depends on *how* the training set was divided among clients.
# This notebook draws the splits used across the literature on the real Fashion-MNIST labels and
# measures them:
#
# | scheme | what is random | what α means |
# |---|---|---|
# | `iid` | a shuffle | — |
# | `dirichlet` (Hsu-style per class, NIID-Bench) | for each class c, the shares q_c ~ Dir(α·1_N) of that class over the N clients | per-client concentration on each class's split: small α → each class lands on few clients; client sizes vary |
# | `dirichlet_client` (FL-Simulator / FedDyn code) | for each client i, a label prior p_i ~ Dir(a·1_C); equal client sizes | `per_class`: a = α (FedSMOO/MoFedSAM/FedSWA numbers); `total`: a = α/C (the FedSAM/FedGloSS JSON splits) |
# | `pathological` | which c classes each client holds | c = classes per client |
# | `shards` (McMahan et al.) | which label-sorted shards a client gets | shards per client |
#
# Three summaries are printed for each split: the **effective number of classes** per client,
# exp(H(p_i)) with H the Shannon entropy of the client's label distribution (1 = a single class,
# C = uniform); the **total-variation distance** TV(p_i, p) = ½ Σ_c |p_i(c) − p(c)| to the global
# label distribution; and the **Gini coefficient** of client sizes.

# %% tags=["parameters"]
profile = "ci"  # ci | cpu | paper: where figures go
dataset = "fmnist"  # labels of this dataset are split
n_clients = 100  # N
alphas = [0.05, 0.1, 0.3, 0.5, 1.0, 10.0]  # Dirichlet concentrations to compare
classes_per_client = [1, 2, 3, 5]  # pathological c values
seed = 0  # partition seed

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import fedlab
from fedlab.data import partition as P
from fedlab.tools.plots import heatmap, use_house_style
from fedlab.tools.figures import save_figure

use_house_style()
data = fedlab.load_dataset(dataset)
labels = data.y_train.numpy()
print(data.describe())

# %% [markdown]
# ## 1. Five ways to split the same data
# Each heatmap shows the first 30 clients (rows) × 10 classes (columns); colour = number of images.

# %%
splits = {
    "iid": P.iid(labels, n_clients, seed=seed),
    "dirichlet α=0.1": P.dirichlet(labels, n_clients, 0.1, seed=seed),
    "dirichlet_client α=0.1": P.dirichlet_client(labels, n_clients, 0.1, seed=seed),
    "pathological c=2": P.pathological(labels, n_clients, 2, seed=seed),
    "shards (2 per client)": P.shards(labels, n_clients, 2, seed=seed),
}
fig, axes = plt.subplots(1, len(splits), figsize=(17, 4.2))
for ax, (name, part) in zip(axes, splits.items()):
    heatmap(ax, part.stats.counts.iloc[:30], cmap="magma", label="images")
    ax.set_title(name, fontsize=9)
    ax.set_xlabel("class")
axes[0].set_ylabel("client")
fig.tight_layout()
save_figure(fig, "01_split_heatmaps", notebook="01_heterogeneity", profile=profile,
            caption=f"Client × class image counts (first 30 of {n_clients} clients) of five partition schemes "
                    f"on {dataset}.", parameters=dict(dataset=dataset, n_clients=n_clients, seed=seed))
plt.show()

# %% [markdown]
# The summaries below are exact functions of the seed (numpy's generators are platform-independent),
# so nbval checks them digit for digit.

# %%
# NBVAL_CHECK_OUTPUT
table = pd.DataFrame({name: part.stats.summary() for name, part in splits.items()}).T
cols = ["min_size", "max_size", "mean_effective_classes", "mean_classes_present", "mean_tv_distance", "size_gini"]
print(table[cols].round(2).to_string())
print("pathological: every client has exactly 2 classes:",
      bool((splits["pathological c=2"].stats.classes_present == 2).all()))
print("disjoint splits use every image once:",
      {name: part.is_disjoint() and int(part.sizes.sum()) == len(labels) for name, part in splits.items()
       if name != "dirichlet_client α=0.1"})

# %% [markdown]
# ## 2. Client sizes
# The per-class Dirichlet split makes client sizes as skewed as their label mixes; the per-client
# prior convention keeps every client at n/N images (and, faithful to FL-Simulator, re-uses images
# once a class runs out).

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 3.4), sharey=True)
for ax, name in zip(axes, ["dirichlet α=0.1", "dirichlet_client α=0.1"]):
    ax.hist(splits[name].sizes, bins=30, color="#1f77b4")
    ax.set_title(name)
    ax.set_xlabel("images per client")
axes[0].set_ylabel("clients")
save_figure(fig, "01_client_sizes", notebook="01_heterogeneity", profile=profile,
            caption="Histogram of client sizes under the two Dirichlet conventions (α = 0.1).",
            parameters=dict(dataset=dataset, n_clients=n_clients, seed=seed))
plt.show()

# %% [markdown]
# ## 3. Heterogeneity as a function of α — and of the convention
# "Dir-0.5" in FL-Simulator's papers (FedSMOO, MoFedSAM) is the per-client prior with a = 0.5 *per
# class*. In the FedSAM/FedGloSS splits the same "α = 0.5" is the *total* concentration, a = 0.05 per
# class — a far more heterogeneous federation. The per-class-over-clients convention of NIID-Bench
# sits in between.

# %%
rows = []
for a in alphas:
    for name, part in [("dirichlet (over clients)", P.dirichlet(labels, n_clients, a, seed=seed)),
                       ("dirichlet_client, per class", P.dirichlet_client(labels, n_clients, a, seed=seed)),
                       ("dirichlet_client, total", P.dirichlet_client(labels, n_clients, a, seed=seed,
                                                                       concentration="total"))]:
        s = part.stats.summary()
        rows.append({"alpha": a, "convention": name, "effective classes": s["mean_effective_classes"],
                     "TV to global": s["mean_tv_distance"]})
sweep = pd.DataFrame(rows)
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
for name, grp in sweep.groupby("convention", sort=False):
    axes[0].plot(grp["alpha"], grp["effective classes"], marker="o", label=name)
    axes[1].plot(grp["alpha"], grp["TV to global"], marker="o", label=name)
for ax in axes:
    ax.set_xscale("log")
    ax.set_xlabel("α")
axes[0].set_ylabel("mean effective classes per client")
axes[1].set_ylabel("mean TV distance to global labels")
axes[0].legend()
save_figure(fig, "01_alpha_conventions", notebook="01_heterogeneity", profile=profile,
            caption="Effective classes per client and TV distance to the global label distribution against α "
                    "for three Dirichlet conventions.",
            parameters=dict(dataset=dataset, n_clients=n_clients, alphas=alphas, seed=seed))
plt.show()

# %%
# NBVAL_CHECK_OUTPUT
print(sweep.pivot(index="alpha", columns="convention", values="effective classes").round(2).to_string())

# %% [markdown]
# ## 4. Pathological splits
# With c classes per client every client sees exactly c labels; the effective number of classes is
# c when the client's classes are balanced.

# %%
# NBVAL_CHECK_OUTPUT
for c in classes_per_client:
    part = P.pathological(labels, n_clients, c, seed=seed)
    print(f"c={c}: classes present per client = {sorted(set(part.stats.classes_present.tolist()))}, "
          f"mean effective classes = {part.stats.summary()['mean_effective_classes']:.2f}")

# %% [markdown]
# ## 5. Reusing a split from another code base
# `Partition.to_json` writes plain per-client index lists and `partition.from_file` reads them back
# (also bare lists or NIID-Bench's `{"0": [...]}` files), so a split published with a paper can be
# replayed exactly; the fingerprint identifies it.

# %%
import tempfile
from pathlib import Path

with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "split.json"
    splits["dirichlet α=0.1"].to_json(path)
    again = P.from_file(path, labels)
print("same split after a JSON round trip:", again.fingerprint == splits["dirichlet α=0.1"].fingerprint)

# %% [markdown]
# ## Exercises
#
# 1. For α = 0.1, predict the median number of effective classes per client under the per-class
#    convention and under `dirichlet_client` with `concentration="total"`; then read them off the table.
# 2. Change `n_clients` from 100 to 20. Which summaries move (effective classes, TV distance, Gini of the
#    sizes) and which stay, and why does the per-class convention react more?
# 3. Save one of the splits to JSON, edit one client's index list by hand, and load it with
#    `from_file`: what happens to the fingerprint?
