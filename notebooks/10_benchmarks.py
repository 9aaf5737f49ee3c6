# %% [markdown]
# # 10 · Benchmarks: every method on three splits
#
# The tables of the FedVSSAM and FedSWA papers compare a dozen methods on a few data splits by
# **final test accuracy** (mean ± standard deviation over seeds) and by **rounds to reach a target
# accuracy**. This notebook produces the same kind of table for every method registered in fedlab —
#
# | family | methods |
# |---|---|
# | averaging and drift correction | FedAvg, FedProx (Li et al., MLSys'20), SCAFFOLD (Karimireddy et al., ICML'20), FedDyn (Acar et al., ICLR'21), FedACG (Kim et al., CVPR'24) |
# | local SAM and its corrections | FedSAM (Qu et al., ICML'22; Caldarola et al., ECCV'22), MoFedSAM (Qu et al., ICML'22), FedGAMMA (Dai et al., TNNLS'23), FedSpeed (Sun et al., ICLR'23), FedSMOO (Sun et al., ICML'23) and the blog's adaptive variant, FedLESAM (Fan et al., ICML'24) |
# | weight averaging | FedSWA, FedMoSWA (Liu et al., ICML'25) |
# | global directions for SAM | FedNSAM (Liu et al., MM'25), FedVSSAM (Xiao et al., NeurIPS'26) |
#
# — on three label splits of increasing difficulty: Dirichlet α = 0.5, Dirichlet α = 0.1 and the
# pathological split with c classes per client (c = 3 of 10 classes). It adds what the tables leave
# implicit: the **uplink cost** per client and round in units of the model size d (FedAvg = 1) and the
# measured **seconds per round** on this machine.
#
# Every method runs with its registered default hyperparameters (the reference codes' values, see
# `python -m fedlab algorithms`), the same for every split: an untuned comparison, as a user would
# start. `method_params` overrides them.
#
# **Sizes.** The `ci` defaults train 16 × 3 small runs on a Fashion-MNIST subset with the fast 2-layer
# MLP in about a minute: they check that the whole pipeline works, not which method wins. The `cpu`
# profile (`params/10_benchmarks.cpu.yaml`: all of Fashion-MNIST, the GroupNorm CNN, 100 clients, 10 %
# per round, 30 rounds of K = 5, two seeds; about 45–50 minutes on 2 quiet cores) makes the committed
# figures and `figures/10_benchmarks_cpu.csv`. The `paper` profile (`params/10_benchmarks.paper.yaml`) carries the
# papers' settings — CIFAR-10 with ResNet-18 and CIFAR-100 with WRN-28-4, 100 clients, 10 %, K = 50,
# B = 50, lr 0.1, 800 rounds, three seeds — which is many GPU-days for all methods; restrict `methods`
# and `n_seeds` to what your budget allows. Runs are cached under `runs/`, so an interrupted benchmark
# resumes where it stopped.

# %% tags=["parameters"]
profile = "ci"  # ci | cpu | paper: where figures and the CSV table go (ci → figures/_scratch)
datasets = ["fmnist"]  # one benchmark per entry (paper: cifar10 and cifar100)
models = ["mlp"]  # model for each dataset (ci: the fast 2NN MLP; cpu: cnn; paper: resnet18_gn, wrn28_4_gn)
targets = [0.6]  # rounds-to-target accuracy for each dataset (papers: 0.75 CIFAR-10, 0.40 CIFAR-100)
pathological_classes = [3]  # c classes per client for each dataset (papers' hardest: 3 of 10, 10 of 100)
dirichlet_alphas = [0.5, 0.1]  # Dirichlet concentrations (smaller: more heterogeneous)
partition = "dirichlet"  # Dirichlet convention: dirichlet (per class over clients) | dirichlet_client (FL-Simulator)
train_size = 3000  # class-balanced training subset (None: all)
test_size = 1000  # class-balanced test subset (None: all)
n_clients = 10  # N
participation = 0.3  # fraction of clients per round
rounds = 10  # communication rounds
local_steps = 5  # K
batch_size = 32  # B
lr = 0.05  # local learning rate η_l
lr_schedule = "exponential"  # exponential (0.998 per round, FL-Simulator) | cosine | constant
eval_every = 2  # evaluate every this many rounds (rounds to target are then multiples of it)
eval_subsample = None  # evaluate on a class-balanced subset of the test set (None: all of it)
methods = None  # list of algorithm names, or None for every registered method
method_params = {}  # per-method hyperparameter overrides, e.g. {"fedsam": {"rho": 0.05}}
curve_methods = ["fedavg", "fedsam", "scaffold", "fedswa", "fednsam", "fedvssam"]  # methods in the curve plots
n_seeds = 1  # seeds per configuration: seed, seed + 1, ... (mean ± std over them)
device = "cpu"  # cpu | cuda
parallel_clients = 1  # clients vmapped together (1: sequential; "auto" on a GPU)
seed = 0  # first seed (drives partition, init, sampling, batches)
client_threads = 1  # CPU: clients trained at once, one core each (same numbers as 1, not hashed)

# %%
import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import fedlab
from fedlab.tools.plots import METHOD_ORDER, method_color, method_label, use_house_style
from fedlab.tools.figures import save_figure
from fedlab.tools.repro import CITABLE_PROFILES, FIGURES_DIR
from fedlab.sweep import summary_table, sweep

use_house_style()
seeds = list(range(seed, seed + n_seeds))
if isinstance(methods, str):  # `papermill -p methods fedavg,fedsam` passes one string
    methods = [m.strip() for m in methods.split(",") if m.strip()]
methods = list(methods) if methods else sorted(fedlab.ALGORITHMS, key=lambda m: (
    METHOD_ORDER.index(m) if m in METHOD_ORDER else len(METHOD_ORDER), m))
unknown = sorted(set(methods) - set(fedlab.ALGORITHMS))
assert not unknown, f"unknown methods {unknown}; registered: {fedlab.ALGORITHMS}"
assert len(models) == len(datasets) == len(targets) == len(pathological_classes), \
    "datasets, models, targets and pathological_classes need one entry per dataset"

# %% [markdown]
# ## 1. The splits
# One base configuration per (dataset, split); every method and seed runs on top of it. The split
# depends on the seed, so each seed sees its own draw of the same scheme.

# %%
benchmarks = []  # (dataset, split label, base config, target)
for ds, mdl, target, c in zip(datasets, models, targets, pathological_classes):
    common = dict(dataset=ds, model=mdl, train_size=train_size, test_size=test_size, n_clients=n_clients,
                  participation=participation, rounds=rounds, local_steps=local_steps, batch_size=batch_size,
                  lr=lr, lr_schedule=lr_schedule, eval_every=eval_every, eval_subsample=eval_subsample,
                  device=device, parallel_clients=parallel_clients, client_threads=client_threads)
    for a in dirichlet_alphas:
        benchmarks.append((ds, f"Dir {a}", fedlab.Config(partition=partition, alpha=a, **common), target))
    benchmarks.append((ds, f"Path c={c}", fedlab.Config(partition="pathological", classes_per_client=c,
                                                        alpha=None, **common), target))
for ds, split, cfg, _ in benchmarks:
    part = fedlab.engine.build_partition(cfg.replace(seed=seed), fedlab.engine.build_dataset(cfg))
    s = part.stats.summary()
    print(f"{ds:8s} {split:10s} seed {seed}: effective classes per client {s['mean_effective_classes']:.2f}, "
          f"client sizes {s['min_size']:.0f}–{s['max_size']:.0f}")

# %% [markdown]
# ## 2. Run everything
# `fedlab.sweep.sweep` runs one configuration per seed through `fedlab.run` (cached by config hash), and
# `summary_table` reduces the seeds to the table's columns.

# %%
results = {}  # (dataset, split, method) -> list of RunResult over seeds
for ds, split, cfg, _ in benchmarks:
    for method in methods:
        run_cfg = cfg.replace(algorithm=method, algorithm_params=method_params.get(method, {}))
        results[ds, split, method] = sweep(run_cfg, {}, seeds, progress=False)

rows = []
for (ds, split, method), runs in results.items():
    target = next(t for d, s, _, t in benchmarks if d == ds and s == split)
    row = summary_table(runs, target=target).iloc[0].to_dict()
    rows.append({"dataset": ds, "split": split, "method": method, "target": target, **row})
table = pd.DataFrame(rows).drop(columns=["algorithm"])

# %%
# NBVAL_CHECK_OUTPUT
print("methods:", ", ".join(method_label(m) for m in methods))
print("splits:", "; ".join(f"{ds} {split}" for ds, split, _, _ in benchmarks))
print("seeds per configuration:", len(seeds), "| runs:", sum(len(r) for r in results.values()))
print("every run finished:", bool((table["status"] == "finished").all()))
if not (table["status"] == "finished").all():
    print(table.loc[table["status"] != "finished", ["dataset", "split", "method", "status"]].to_string(index=False))

# %% [markdown]
# ## 3. The table
# In the papers' format: one row per method, one column per split, "accuracy ± std / rounds to target"
# ("–" when a seed never reached the target within the run; the std needs ≥ 2 seeds). Accuracies in %,
# the last evaluated round's global model. The CSV beside the figures holds the same numbers unrounded,
# with best accuracy, downlink and timings.

# %%
def cell(row):
    acc = f"{100 * row['final_acc_mean']:.2f}"
    if not math.isnan(row["final_acc_std"]):
        acc += f" ± {100 * row['final_acc_std']:.2f}"
    reached = "–" if math.isnan(row["rounds_to_target"]) else f"{row['rounds_to_target']:.0f}"
    return f"{acc} / {reached}"


split_order = list(dict.fromkeys(split for _, split, _, _ in benchmarks))
for ds in datasets:
    sub = table[table["dataset"] == ds].copy()
    sub["cell"] = sub.apply(cell, axis=1)
    wide = sub.pivot(index="method", columns="split", values="cell").reindex(index=methods)
    wide = wide[[s for s in split_order if s in wide.columns]]
    cost = sub.groupby("method")[["uplink_x_d", "sec_per_round"]].mean().reindex(methods)
    wide["uplink ×d"] = cost["uplink_x_d"].map("{:.0f}".format)
    wide["s / round"] = cost["sec_per_round"].map("{:.2f}".format)
    wide.index = [method_label(m) for m in wide.index]
    wide.columns.name = None
    print(f"{ds}: final test accuracy % (mean ± std over {len(seeds)} seed(s)) / rounds to "
          f"{100 * sub['target'].iloc[0]:.0f} %")
    print(wide.to_string())
    print()

csv_dir = FIGURES_DIR if profile in CITABLE_PROFILES else FIGURES_DIR / "_scratch"
csv_dir.mkdir(parents=True, exist_ok=True)
table.to_csv(csv_dir / f"10_benchmarks_{profile}.csv", index=False)

# %% [markdown]
# Communication is a property of each method, not of the run, so it can be checked exactly: the
# uplink per client and round in units of d, read from the metrics of the runs above.

# %%
# NBVAL_CHECK_OUTPUT
uplink = table.groupby("method")["uplink_x_d"].agg(["min", "max"]).reindex(methods)
for cost in sorted(uplink["max"].round(2).unique()):
    names = [method_label(m) for m in methods if round(uplink.loc[m, "max"], 2) == cost]
    print(f"uplink {cost:g}·d per client and round: {', '.join(names)}")
print("uplink identical on every split:", bool((uplink["min"] == uplink["max"]).all()))

# %% [markdown]
# ## 4. The figures
# **Bar chart** (one panel per split, the papers' format): final accuracy, error bars = one standard
# deviation over seeds (absent with a single seed), FedAvg's level dashed; the accuracy axis starts near
# the lowest bar, not at 0, so read the numbers on it. **Curves**: test accuracy
# against round for a few methods (mean over seeds, shaded ± std). What to look at: how much each
# method loses from Dir 0.5 to the pathological split, and whether the SAM-family methods keep their
# advantage (if any) when the split gets harder. With the `ci` sizes, differences of a few points are
# noise; read the `cpu` figures in `figures/` for conclusions on Fashion-MNIST.

# %%
for ds in datasets:
    sub = table[table["dataset"] == ds]
    fig, axes = plt.subplots(1, len(split_order), figsize=(5.2 * len(split_order), 4.6), sharey=True)
    axes = np.atleast_1d(axes)
    for ax, split in zip(axes, split_order):
        part = sub[sub["split"] == split].set_index("method").reindex(methods)
        y = 100 * part["final_acc_mean"].to_numpy()
        err = np.nan_to_num(100 * part["final_acc_std"].to_numpy())
        ax.barh(range(len(methods)), y, xerr=err if len(seeds) > 1 else None, capsize=2,
                color=[method_color(m) for m in methods])
        ax.axvline(100 * part.loc["fedavg", "final_acc_mean"] if "fedavg" in methods else np.nan,
                   ls="--", lw=1, color="#333333")
        ax.set_yticks(range(len(methods)), [method_label(m) for m in methods])
        ax.invert_yaxis()
        ax.set_title(split)
        ax.set_xlabel("final test accuracy (%)")
        lo = np.nanmin(y - err)
        ax.set_xlim(max(0.0, lo - 5), min(100.0, np.nanmax(y + err) + 3))
    fig.suptitle(f"{ds}, {n_clients} clients, {int(participation * 100)} % per round, {rounds} rounds, "
                 f"K={local_steps}, {len(seeds)} seed(s)")
    fig.tight_layout()
    save_figure(fig, f"10_benchmarks_bars_{ds}", notebook="10_benchmarks", profile=profile,
                caption=f"Final test accuracy of every fedlab method on {ds} under {', '.join(split_order)} "
                        f"(mean ± std over {len(seeds)} seed(s)); "
                        f"the table is 10_benchmarks_{profile}.csv beside it.",
                parameters=dict(dataset=ds, n_clients=n_clients, participation=participation, rounds=rounds,
                                local_steps=local_steps, seed=seed, seeds=seeds, methods=methods),
                config_hashes=[r.summary["config_hash"] for (d, _, _), rs in results.items() if d == ds for r in rs])
    plt.show()

# %%
shown = [m for m in curve_methods if m in methods]
for ds in datasets:
    fig, axes = plt.subplots(1, len(split_order), figsize=(5.2 * len(split_order), 3.8), sharey=True)
    axes = np.atleast_1d(axes)
    for ax, split in zip(axes, split_order):
        for m in shown:
            curves = pd.concat([r.metrics.set_index("round")["test_acc"].dropna() for r in results[ds, split, m]],
                               axis=1)
            mean, std = 100 * curves.mean(axis=1), 100 * curves.std(axis=1).fillna(0.0)
            ax.plot(mean.index, mean, color=method_color(m), label=method_label(m))
            ax.fill_between(mean.index, mean - std, mean + std, color=method_color(m), alpha=0.15, lw=0)
        target = next(t for d, s, _, t in benchmarks if d == ds and s == split)
        ax.axhline(100 * target, ls=":", lw=1, color="#333333")
        ax.set_title(split)
        ax.set_xlabel("round")
    axes[0].set_ylabel("test accuracy (%)")
    axes[0].legend()
    fig.suptitle(f"{ds}: accuracy against round (dotted: the rounds-to-target level)")
    fig.tight_layout()
    save_figure(fig, f"10_benchmarks_curves_{ds}", notebook="10_benchmarks", profile=profile,
                caption=f"Test accuracy against communication round on {ds} for "
                        f"{', '.join(map(method_label, shown))} "
                        f"under {', '.join(split_order)} (mean ± std over {len(seeds)} seed(s)).",
                parameters=dict(dataset=ds, n_clients=n_clients, participation=participation, rounds=rounds,
                                local_steps=local_steps, seed=seed, seeds=seeds, methods=shown),
                config_hashes=[r.summary["config_hash"] for m in shown for s in split_order
                               for r in results[ds, s, m]])
    plt.show()

# %% [markdown]
# ## 5. The papers' numbers
# For reference (ResNet-18 on CIFAR-10, WRN-28-4 on CIFAR-100, 100 clients, 10 % participation). From
# the **FedVSSAM** paper (final accuracy % / rounds to 75 % on CIFAR-10, 40 % on CIFAR-100; "–" = not
# reached):
#
# | dataset | split | FedVSSAM | best baseline | FedAvg |
# |---|---|---|---|---|
# | CIFAR-10 | Dir 0.5 | 83.56 ± 0.19 / 111 | 82.36 (FedGAMMA) / 201 | 77.05 / 315 |
# | CIFAR-10 | Dir 0.1 | 79.57 ± 0.14 / 296 | 78.94 (MoFedSAM) / 385 | 72.57 / – |
# | CIFAR-10 | Path c=6 | 83.57 ± 0.22 / 107 | 82.94 (MoFedSAM) / 178 | 77.55 / 299 |
# | CIFAR-10 | Path c=3 | 81.11 ± 0.23 / 196 | 80.76 (FedSMOO) / 289 | 74.63 / – |
# | CIFAR-100 | Dir 0.5 | 58.78 ± 0.30 / 237 | 56.87 (FedSMOO) / 279 | 46.52 / 313 |
# | CIFAR-100 | Dir 0.1 | 51.22 ± 0.20 / 328 | 50.59 (SCAFFOLD) / 450 | 36.76 / – |
# | CIFAR-100 | Path c=20 | 56.87 ± 0.19 / 258 | 55.78 (SCAFFOLD) / 368 | 42.59 / 486 |
# | CIFAR-100 | Path c=10 | 50.27 ± 0.18 / 337 | 48.60 (FedSMOO) / 463 | 36.67 / – |
#
# From the **FedSWA/FedMoSWA** paper (final accuracy %, ResNet-18; its Dirichlet splits are Liu's
# per-client convention, so Dir 0.6/0.3 are not our splits):
#
# | method | CIFAR-10 Dir 0.6 | CIFAR-100 Dir 0.6 | CIFAR-100 Dir 0.3 | CIFAR-100 Dir 0.1 |
# |---|---|---|---|---|
# | FedAvg | 86.0 | 54.2 | | |
# | FedSAM | 83.6 | 51.9 | 49.0 | 40.1 |
# | SCAFFOLD | 85.9 | 54.1 | | |
# | MoFedSAM | 87.0 | 60.1 | 57.5 | 51.5 |
# | FedSWA | 89.5 | 59.8 | 55.5 | 50.3 |
# | FedMoSWA | 91.2 | 67.9 | 66.2 | 61.9 |
#
# The two papers disagree on baselines (FedAvg on CIFAR-100 Dir 0.1: 36.76 % vs not reported; FedSAM
# below FedAvg in one, near it in the other) because their code bases differ in model stems,
# augmentation, partitioners and hyperparameters (ALGORITHMS.md §1, §19–21). With `profile = "paper"`
# the next cell prints our numbers beside theirs for the splits both have.

# %%
PAPER_FEDVSSAM = {  # (dataset, split) -> {method: (accuracy %, rounds to target or None)}
    ("cifar10", "Dir 0.5"): {"fedvssam": (83.56, 111), "fedgamma": (82.36, 201), "fedavg": (77.05, 315)},
    ("cifar10", "Dir 0.1"): {"fedvssam": (79.57, 296), "mofedsam": (78.94, 385), "fedavg": (72.57, None)},
    ("cifar10", "Path c=6"): {"fedvssam": (83.57, 107), "mofedsam": (82.94, 178), "fedavg": (77.55, 299)},
    ("cifar10", "Path c=3"): {"fedvssam": (81.11, 196), "fedsmoo": (80.76, 289), "fedavg": (74.63, None)},
    ("cifar100", "Dir 0.5"): {"fedvssam": (58.78, 237), "fedsmoo": (56.87, 279), "fedavg": (46.52, 313)},
    ("cifar100", "Dir 0.1"): {"fedvssam": (51.22, 328), "scaffold": (50.59, 450), "fedavg": (36.76, None)},
    ("cifar100", "Path c=20"): {"fedvssam": (56.87, 258), "scaffold": (55.78, 368), "fedavg": (42.59, 486)},
    ("cifar100", "Path c=10"): {"fedvssam": (50.27, 337), "fedsmoo": (48.60, 463), "fedavg": (36.67, None)},
}
PAPER_FEDSWA = {("cifar100", "Dir 0.1"): {"fedsam": 40.1, "mofedsam": 51.5, "fedswa": 50.3, "fedmoswa": 61.9}}

if profile == "paper":
    lines = []
    for (ds, split, method), runs in results.items():
        ours = table[(table["dataset"] == ds) & (table["split"] == split) & (table["method"] == method)].iloc[0]
        ref = PAPER_FEDVSSAM.get((ds, split), {}).get(method)
        swa = PAPER_FEDSWA.get((ds, split), {}).get(method)
        if ref is None and swa is None:
            continue
        lines.append({"dataset": ds, "split": split, "method": method_label(method),
                      "ours acc %": round(100 * ours["final_acc_mean"], 2),
                      "ours rounds": ours["rounds_to_target"],
                      "FedVSSAM paper acc %": ref[0] if ref else np.nan,
                      "FedVSSAM paper rounds": ref[1] if ref and ref[1] is not None else np.nan,
                      "FedSWA paper acc %": swa if swa is not None else np.nan})
    print(pd.DataFrame(lines).to_string(index=False) if lines else "no split in common with the papers' tables")
else:
    print(f"profile = {profile!r}: {', '.join(datasets)} is not a dataset of the papers' tables; "
          "run the paper profile to compare.")

# %% [markdown]
# ## Exercises
#
# 1. Predict the ranking of FedAvg, FedSAM and FedVSSAM on `Path c=3` before reading the table; then
#    compare with the `Dir 0.1` row. Which split separates the methods more?
# 2. Rerun the benchmark with ρ = 0.02 for the SAM methods (the `-y` override in the README). Which
#    methods that sat at chance recover?
# 3. Set `n_seeds = 3`. How much does the standard deviation change, and would any ranking flip?
