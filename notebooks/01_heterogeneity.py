# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags,-all
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

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
# | `dirichlet` (per class over clients: Yurochkin et al. 2019, NIID-Bench) | for each class c, the shares q_c ~ Dir(α·1_N) of that class over the N clients | per-client concentration on each class's split: small α → each class lands on few clients; client sizes vary |
# | `dirichlet_client` (per-client label prior: Hsu et al. 2019; FL-Simulator / FedDyn code) | for each client i, a label prior p_i ~ Dir(a·1_C); equal client sizes | `per_class`: a = α (FedSMOO/MoFedSAM/FedSWA numbers); `total`: a = α/C (the FedSAM/FedGloSS JSON splits) |
# | `pathological` | which c classes each client holds | c = classes per client |
# | `shards` (McMahan et al.) | which label-sorted shards a client gets | shards per client |
#
# Three summaries are printed for each split: the **effective number of classes** per client,
# exp(H(p_i)) with H the Shannon entropy of the client's label distribution (1 = a single class,
# C = uniform); the **total-variation distance** TV(p_i, p) = ½ Σ_c |p_i(c) − p(c)| to the global
# label distribution; and the **Gini coefficient** of client sizes.
#
# Symbols: the notation page, `notebooks/book/notation.md`. How the evidence behind the figures is made, and
# the words for it: `notebooks/book/guide/running.md`.

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
from matplotlib.ticker import FuncFormatter

from lab.course import save_figure, use_house_style

use_house_style()
data = fedlab.load_dataset(dataset)
labels = data.y_train.numpy()
print(data.describe())

# %% [markdown]
# ## 1. Five ways to split the same data
# Each heatmap shows the first 30 clients (rows) × 10 classes (columns); colour = the share of the
# client's images in each class, p_i(c), on **one colour scale for all five panels** (0 to 1), so a
# uniform client looks uniform everywhere. Client sizes differ between the schemes; section 2 shows them.

# %%
splits = {
    "iid": P.iid(labels, n_clients, seed=seed),
    "dirichlet α=0.1": P.dirichlet(labels, n_clients, 0.1, seed=seed),
    "dirichlet_client α=0.1": P.dirichlet_client(labels, n_clients, 0.1, seed=seed),
    "pathological c=2": P.pathological(labels, n_clients, 2, seed=seed),
    "shards (2 per client)": P.shards(labels, n_clients, 2, seed=seed),
}
titles = {"iid": "iid\n(a shuffle)", "dirichlet α=0.1": "dirichlet α = 0.1\n(per class, over clients)",
          "dirichlet_client α=0.1": "dirichlet_client α = 0.1\n(per-client prior)",
          "pathological c=2": "pathological\n(2 classes per client)", "shards (2 per client)": "shards\n(2 per client)"}
shown = 30


def label_shares(part):
    """p_i(c): the fraction of client i's images in class c (rows of empty clients are 0)."""
    counts = part.stats.counts.to_numpy(dtype=float)
    return counts / np.maximum(counts.sum(axis=1, keepdims=True), 1.0)


fig, axes = plt.subplots(1, len(splits), figsize=(17, 4.8), sharey=True)
for ax, (name, part) in zip(axes, splits.items()):
    im = ax.imshow(label_shares(part)[:shown], aspect="auto", cmap="magma", vmin=0.0, vmax=1.0,
                   interpolation="nearest")
    ax.set_title(titles[name], fontsize=11)
    ax.set_xticks(range(data.n_classes))
    ax.set_xlabel("class")
    ax.grid(False)
axes[0].set_ylabel("client")
axes[0].set_yticks(range(0, shown, 5))
fig.colorbar(im, ax=axes, shrink=0.9, label="share of the client's images  $p_i(c)$")
heat_data = pd.concat([part.stats.counts.iloc[:shown].reset_index().melt(id_vars="client", var_name="class",
                                                                          value_name="images")
                       .assign(scheme=name) for name, part in splits.items()], ignore_index=True)
heat_data["share"] = heat_data["images"] / heat_data.groupby(["scheme", "client"])["images"].transform("sum").clip(lower=1)
save_figure(fig, "01_split_heatmaps", notebook="01_heterogeneity", profile=profile,
            caption=f"Label share p_i(c) of each client's images per class (first {shown} of {n_clients} clients; one "
                    f"colour scale, 0–1, for all panels) under five partition schemes on {dataset}.",
            parameters=dict(dataset=dataset, n_clients=n_clients, seed=seed), data=heat_data)
plt.show()

# %% [markdown]
# The summaries below are exact functions of the seed (numpy's generators are platform-independent),
# so nbval checks them digit for digit. `n_empty` counts clients that received no image at all (the
# engine never samples them).

# %%
# NBVAL_CHECK_OUTPUT
table = pd.DataFrame({name: part.stats.summary() for name, part in splits.items()}).T.astype({"n_empty": int})
cols = ["n_empty", "min_size", "max_size", "mean_effective_classes", "mean_classes_present", "mean_tv_distance",
        "size_gini"]
print(table[cols].round(2).to_string())
print("pathological: every client has exactly 2 classes:",
      bool((splits["pathological c=2"].stats.classes_present == 2).all()))
print("disjoint splits use every image once:",
      {name: part.is_disjoint() and int(part.sizes.sum()) == len(labels) for name, part in splits.items()
       if name != "dirichlet_client α=0.1"})

# %% [markdown]
# ## 2. Client sizes
# The per-class Dirichlet split makes client sizes as skewed as their label mixes, and more so the
# smaller α. The per-client prior convention (`dirichlet_client`) keeps every client at exactly n/N
# images (and, faithful to FL-Simulator, re-uses images once a class runs out), as do `iid`,
# `pathological` and `shards` here: those schemes are flat lines on the right.

# %%
size_alphas = [0.1, 1.0]
size_splits = {f"dirichlet α={a:g}": P.dirichlet(labels, n_clients, a, seed=seed) for a in size_alphas}
size_styles = {"dirichlet α=0.1": ("#1f77b4", "-"), "dirichlet α=1": ("#ff7f0e", "--"),
               "iid": ("#4d4d4d", ":"), "dirichlet_client α=0.1": ("#2ca02c", "-."),
               "pathological c=2": ("#9467bd", (0, (5, 1))), "shards (2 per client)": ("#8c564b", (0, (1, 3)))}
ranked = {**size_splits, **{k: v for k, v in splits.items() if k != "dirichlet α=0.1"}}
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
all_sizes = np.concatenate([p.sizes for p in size_splits.values()])
bins = np.logspace(np.log10(max(all_sizes.min(), 1)), np.log10(all_sizes.max()), 30)
for name, part in size_splits.items():
    colour, ls = size_styles[name]
    ax1.hist(np.maximum(part.sizes, 1), bins=bins, histtype="step", lw=1.8, color=colour, ls=ls,
             label=f"{name} ({part.stats.n_empty} empty)")
ax1.set_xscale("log")
ax1.set_xlabel("images per client (log scale; empty clients at 1)")
ax1.set_ylabel("clients")
ax1.set_title("per-class Dirichlet: client sizes vary")
ax1.legend(loc="upper left")
equal = [name for name, part in ranked.items() if part.sizes.min() == part.sizes.max()]
for name, part in ranked.items():
    if name in equal[1:]:
        continue  # the equal-size schemes coincide: one line, labelled with all of them
    colour, ls = size_styles[name]
    label = name if name not in equal else "every client n/N: " + ", ".join(equal)
    ax2.plot(np.arange(1, n_clients + 1), np.sort(np.maximum(part.sizes, 1))[::-1], color=colour if name not in equal
             else "0.35", ls=ls if name not in equal else ":", lw=1.8 if name not in equal else 2.4, label=label)
ax2.set_yscale("log")
ax2.set_xlabel("client rank (largest first)")
ax2.set_ylabel("images per client (log scale)")
ax2.set_title(f"sorted sizes; equal-size schemes sit at n/N = {len(labels) // n_clients}")
ax2.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1)
size_data = pd.concat([pd.DataFrame({"scheme": name, "client": np.arange(n_clients), "size": part.sizes})
                       for name, part in ranked.items()], ignore_index=True)
save_figure(fig, "01_client_sizes", notebook="01_heterogeneity", profile=profile,
            caption=f"Client sizes on {dataset} ({n_clients} clients): histogram under the per-class Dirichlet split "
                    f"for α = {', '.join(f'{a:g}' for a in size_alphas)} (left) and sorted sizes of every scheme "
                    f"(right; the equal-size schemes are flat at n/N).",
            parameters=dict(dataset=dataset, n_clients=n_clients, seed=seed, alphas=size_alphas), data=size_data)
plt.show()

# %% [markdown]
# ## 3. Heterogeneity as a function of α — and of the convention
# "Dir-0.5" in FL-Simulator's papers (FedSMOO, MoFedSAM) is the per-client prior with a = 0.5 *per
# class*. In the FedSAM/FedGloSS splits the same "α = 0.5" is the *total* concentration, a = 0.05 per
# class — a far more heterogeneous federation. The per-class-over-clients convention of NIID-Bench
# does not sit between them: at the same α it gives almost the same heterogeneity as the per-client
# prior with a = α per class (the two curves of the figure below overlap; the cell after it prints
# their largest gap), while the *total* convention is the outlier.
#
# At very small α the per-class convention leaves some clients **empty** (every class lands on a few
# clients). An empty client has no label distribution; counting it as "0 effective classes" would drag
# the mean below 1, the value of a single-class client. The means below are therefore over the
# clients that hold data, and the number of empty clients is reported beside them (the engine never
# samples an empty client).

# %%
rows = []
for a in alphas:
    for name, part in [("dirichlet (over clients)", P.dirichlet(labels, n_clients, a, seed=seed)),
                       ("dirichlet_client, per class", P.dirichlet_client(labels, n_clients, a, seed=seed)),
                       ("dirichlet_client, total", P.dirichlet_client(labels, n_clients, a, seed=seed,
                                                                       concentration="total"))]:
        st = part.stats
        held = st.sizes > 0
        rows.append({"alpha": a, "convention": name, "effective classes": float(st.effective_classes[held].mean()),
                     "TV to global": float(st.tv_distance[held].mean()), "empty clients": st.n_empty})
sweep = pd.DataFrame(rows)
conv_styles = {"dirichlet (over clients)": ("#1f77b4", "-", "o"), "dirichlet_client, per class": ("#ff7f0e", "--", "s"),
               "dirichlet_client, total": ("#2ca02c", "-.", "^")}
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
for name, grp in sweep.groupby("convention", sort=False):
    colour, ls, mk = conv_styles[name]
    empties = int(grp["empty clients"].max())
    label = name + (f" (up to {empties} empty clients, left out)" if empties else "")
    axes[0].plot(grp["alpha"], grp["effective classes"], ls=ls, marker=mk, color=colour, label=label)
    axes[1].plot(grp["alpha"], grp["TV to global"], ls=ls, marker=mk, color=colour, label=label)
for ax in axes:
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("α")
axes[0].axhline(1.0, color="0.6", lw=0.8, ls=":")
axes[0].set_ylabel("mean effective classes per non-empty client")
axes[1].set_ylabel("mean TV distance to global labels")
axes[0].legend(loc="upper center", bbox_to_anchor=(1.1, -0.2), ncol=3)
save_figure(fig, "01_alpha_conventions", notebook="01_heterogeneity", profile=profile,
            caption="Effective classes per client and TV distance to the global label distribution against α "
                    "for three Dirichlet conventions (means over the clients that hold data; empty clients are "
                    "counted in the data file and the legend).",
            parameters=dict(dataset=dataset, n_clients=n_clients, alphas=alphas, seed=seed), data=sweep)
plt.show()

# %%
# NBVAL_CHECK_OUTPUT
print(sweep.pivot(index="alpha", columns="convention", values="effective classes").round(2).to_string())
print("empty clients:")
print(sweep.pivot(index="alpha", columns="convention", values="empty clients").to_string())
print("every mean over non-empty clients is at least 1:", bool((sweep["effective classes"] >= 1 - 1e-12).all()))
eff = sweep.pivot(index="alpha", columns="convention", values="effective classes")
gap_niid = (eff["dirichlet (over clients)"] - eff["dirichlet_client, per class"]).abs()
gap_total = (eff["dirichlet (over clients)"] - eff["dirichlet_client, total"]).abs()
print(f"largest gap in effective classes, NIID-Bench vs per-client prior (per class): {gap_niid.max():.2f}; "
      f"vs the total convention: {gap_total.max():.2f}")
assert gap_niid.max() < gap_total.max(), "the text above says NIID-Bench is close to the per-class prior"

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
# ## What we learned
#
# The paragraph below is filled from this notebook's own tables (§1 and §3) at its `seed`, and the cell checks
# every direction it states (an `AssertionError` stops the notebook if one fails). The directions are wide
# compared with what changes from one seed to the next (60,000 labels over the clients), so they hold at other
# seeds too; the numbers are this seed's.

# %%
from IPython.display import Markdown, display

by_conv = {name: grp.sort_values("alpha").set_index("alpha")["effective classes"]
           for name, grp in sweep.groupby("convention", sort=False)}
over, per_class, total = (by_conv[k] for k in ("dirichlet (over clients)", "dirichlet_client, per class",
                                              "dirichlet_client, total"))
lo, hi = over.index.min(), over.index.max()
mid = min(over.index, key=lambda a: abs(np.log(a / 0.5)))  # the α of the sweep nearest 0.5
assert all(c.is_monotonic_increasing for c in by_conv.values()), "more classes per client as α grows"
assert (total < over).all() and (total < per_class).all(), "the total convention is the most heterogeneous"
sizes = splits["dirichlet_client α=0.1"].sizes
assert sizes.min() == sizes.max() and table.loc["dirichlet α=0.1", "size_gini"] > 0.3, "sizes"
assert table.loc["iid", "mean_effective_classes"] > 0.95 * data.n_classes, "iid: nearly every class"
# Whether a larger client weighs more is a property of the server, not of the split: measured on one FedAvg round
# of notebook 10's cpu federation (a per-class split) shrunk to four clients, every one of them sampled
from lab.course import aggregation_weights, profile_federation

agg = aggregation_weights(profile_federation("cpu").replace(train_size=800, test_size=200, n_clients=4,
                                                            participation=1.0, rounds=1, local_steps=2))
# tolerance: one float32 round solved in float64 gives 1/m to ~1e-7
assert np.ptp(agg.sizes) > 0 and agg.uniform(1e-5) and not agg.by_size(1e-5), "the server weighs clients equally"
display(Markdown(
    f"* **α sets the label mix, monotonically.** Under the per-class split a client holds {over[lo]:.2f} effective "
    f"classes at α = {lo:g} and {over[hi]:.2f} at α = {hi:g} (of {data.n_classes}; an iid client "
    f"{table.loc['iid', 'mean_effective_classes']:.2f}); in every convention the number grows with α.\n"
    f"* **\"Dir-{mid:g}\" does not say which split.** At α = {mid:g} the per-class split and the per-client prior "
    f"with a = α give {over[mid]:.2f} and {per_class[mid]:.2f} effective classes, the `total` convention "
    f"(a = α/C, the FedSAM/FedGloSS JSON splits) only {total[mid]:.2f}: at every α of the sweep it is the most "
    f"heterogeneous of the three. Read a paper's α with its convention (§3's table).\n"
    f"* **The conventions differ in client sizes too.** The per-class split draws each class's shares over the "
    f"clients, so sizes vary (Gini {table.loc['dirichlet α=0.1', 'size_gini']:.2f} at α = 0.1); the per-client "
    f"prior gives every client exactly {int(sizes[0])} images (Gini 0). Notebook 10's splits are per class, so its "
    f"clients differ in size, but fedlab's server weighs every sampled client equally (p_i = 1/N, notebook 01b): "
    f"one measured round of such a split, clients of {', '.join(str(int(n)) for n in agg.sizes)} images, averages "
    f"them with weights {', '.join(f'{w:.3f}' for w in agg.weights)}. A large client does not weigh more; its K "
    f"local steps cover a smaller share of its data.\n"
    "* A split is data: `to_json`/`from_file` replay it exactly, and its fingerprint names it (§5)."))

# %% [markdown]
# ## Exercises
#
# Predict first, then run. Every number here is an exact function of the seed, so your run prints the same.
#
# 1. For α = 0.1, predict the mean number of effective classes per client under `dirichlet_client` with the
#    per-class convention (a = α) and with `concentration="total"` (a = α/C); then read them off the table
#    of §3. Which other entry of that table repeats the `total` convention's number at α = 1, and why?
#
# <details>
# <summary>Solution</summary>
#
# Per class, a = 0.1: between two and three effective classes (the table prints 2.38). Total, a = 0.01: barely
# more than one (1.18); more than half of the clients hold a single class outright. The `total` entry at α = 1
# repeats the per-class entry at α = 0.1 digit for digit: `dirichlet_client` draws each client's prior
# $p_i \sim \mathrm{Dir}(a\cdot 1_C)$ with $a = \alpha/C$ under `total`, so `total` at α = 1 is a = 0.1, drawn
# from the same generator stream, hence the very same split (the two have one fingerprint).
#
# </details>
#
# 2. Change `n_clients` from 100 to 20 (`papermill 01_heterogeneity.ipynb out.ipynb -p n_clients 20`). Which
#    summaries move (effective classes, TV distance, Gini of the sizes, empty clients) and which stay, and
#    why does the per-class convention react more?
#
# <details>
# <summary>Solution</summary>
#
# The label-mix summaries of the Dirichlet splits stay: effective classes and TV distance move only by
# draw-to-draw noise, larger with 20 clients to average over (at seed 0 the α = 0.05 row drops; over ten seeds
# neither convention moved by more than the seed-to-seed spread). A client's mix is a draw whose law does not
# involve N: $p_i \sim \mathrm{Dir}(a\cdot 1_C)$ under `dirichlet_client`, and nearly the same prior under the
# per-class split (why the curves of §3 overlap). What moves is what the client *sizes* carry. The per-class split
# draws each class's shares over the N clients, $q_c \sim \mathrm{Dir}(\alpha\cdot 1_N)$, so N enters its draw:
# with 20 clients its size Gini falls at small α, and fewer clients are empty at α = 0.05 (one instead of three).
# `dirichlet_client` gives every client exactly n/N images at any N (Gini 0). The iid TV distance, pure sampling
# noise of n/N images, shrinks like $1/\sqrt{n/N}$: about √5 smaller.
#
# </details>
#
# 3. Save one of the splits to JSON, edit one client's index list by hand, and load it with `from_file`:
#    what happens to the fingerprint? Try three edits: reverse one client's list; move one index to another
#    client; append to a client an index it already holds.
#
# <details>
# <summary>Solution</summary>
#
# Every edit that loads gives a new fingerprint, even the reversal, which leaves every statistic as it was:
# `Partition.fingerprint` hashes each client's indices *in their order*, and `from_file` keeps the order (so that
# an unedited `to_json` file gives back the original fingerprint). Moving an index changes two lists; the split
# stays disjoint. An index listed twice by one client is refused with a `ValueError` unless you pass
# `allow_duplicates=True` (a `dirichlet_client` file, which repeats images by design, allows it by default); an
# index given to two *different* clients loads, and `is_disjoint()` then says `False`.
#
# </details>

# %% [markdown]
# ## What the cpu run shows
# This section is generated from the committed cpu-profile data (`figures/`, `figures/records/`,
# `figures/claims.yaml`), whatever profile this notebook was just run with. This notebook trains
# nothing: its figures are partition statistics, exact functions of the seed.

# %%
# NBVAL_CHECK_OUTPUT
from lab.course import cpu_report

report = cpu_report("01_heterogeneity")
print(report.text())

# %%
report.show_figures()

# %% [markdown]
# ## How this evidence was made
#
# <!-- how-made: written by `python -m lab.tools.how_made --write` from the parameters; edit those -->
# This notebook runs at three sizes, chosen by parameters and never by editing its code:
#
# | size | parameters | federation | what it is for |
# |---|---|---|---|
# | `ci` | the parameters cell's defaults, what the outputs above show | Fashion-MNIST, 100 clients | a smoke test: every figure it draws is marked *smoke test* and goes to the scratch folder, never cited; its numbers say the code runs, not which method wins |
# | `cpu` | `notebooks/params/01_heterogeneity.cpu.yaml` over the defaults | Fashion-MNIST, 100 clients | the evidence: its 3 figures, shown beside the text and listed above with what stands behind each |
# | `paper` | `notebooks/params/01_heterogeneity.paper.yaml` over the defaults | CIFAR-10, 100 clients | closer to the papers' scale; not run in this repository |
#
# Run a size with `papermill notebooks/01_heterogeneity.ipynb out.ipynb -f notebooks/params/01_heterogeneity.cpu.yaml` (the JSON file beside each figure holds the exact command that made it); the words are explained once, on the running page named at the top.
# <!-- how-made: end -->
