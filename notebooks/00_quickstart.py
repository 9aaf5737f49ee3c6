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
# # 00 · Quickstart: FedAvg, FedSAM and FedVSSAM on Fashion-MNIST
#
# This notebook checks your installation, then trains three methods on a strongly heterogeneous
# federation of **real Fashion-MNIST** data and plots their accuracy curves. It is the shortest
# path through fedlab; the notebooks after it explain *why* the curves look the way they do.
#
# **What you will see.** 100 (here: fewer, in the quick `ci` size) clients whose label mixes are drawn
# from a Dirichlet distribution with α = 0.1 — most clients hold two or three classes. FedAvg
# averages locally trained models; FedSAM additionally makes every local step *sharpness-aware*;
# FedVSSAM anchors the perturbation and the update to a server-side direction.
#
# Sizes: the defaults below are the `ci` profile (seconds on a laptop CPU, one seed). The `cpu` profile
# (`params/00_quickstart.cpu.yaml`) is the rerun's regime (chosen by the pilot of `figures/regime/`, planned
# in `lab/regime/rerun.yaml`): the MLP on a class-balanced 10 000 of Fashion-MNIST's training images, 100
# clients, 10 % per round, 100 rounds of K = 50 local steps at η = 0.1, six seeds (three for a run no claim
# judges), each seed drawing its own partition — so its runs are the very runs of notebook 10's Dirichlet-0.1
# benchmark, trained once. Re-run at any size with papermill, e.g. `papermill 00_quickstart.ipynb out.ipynb -f
# params/00_quickstart.cpu.yaml`.

# %% tags=["parameters"]
profile = "ci"  # ci | cpu | paper: where figures go (ci → figures/_scratch, others → figures/)
dataset = "fmnist"  # any of fedlab.DATASETS
model = "cnn"  # any of fedlab.MODELS
train_size = 3000  # class-balanced training subset (None: all 60 000 images)
test_size = 1000  # class-balanced test subset (None: all 10 000)
n_clients = 20  # N
participation = 0.25  # fraction of clients per round
alpha = 0.1  # Dirichlet concentration (small: heterogeneous)
rounds = 12  # communication rounds
local_steps = 5  # K
batch_size = 32  # B
lr = 0.05  # local learning rate η_l
lr_schedule = "exponential"  # across rounds: exponential (×0.998 per round) | cosine | constant (the cpu regime)
eval_every = 1  # evaluate the global model every this many rounds
eval_subsample = None  # evaluate on a class-balanced subset of the test set (None: all of it)
seed = 0  # first training seed (init, sampling, batches); the partition too when paired_partitions
n_seeds = 1  # training seeds seed, seed + 1, ... (cpu: 6, mean ± 95 % interval)
client_threads = 1  # CPU: clients trained at once, one core each (same numbers as 1, not hashed)
paired_partitions = False  # cpu: each training seed draws its own partition, shared by every method of that seed
rerun_plan = False  # cpu: train each run on the seeds the regime rerun's plan gives it (lab/regime/rerun.yaml)

# %% [markdown]
# ## 1. Is this the right `fedlab`?
# PyPI hosts an unrelated package with the same import name. Ours carries a marker attribute and
# lives in this repository; if the next cell prints `False`, uninstall the other one
# (`pip uninstall fedlab`) and install this repository with `make venv`.

# %%
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import fedlab
from lab.evidence.paired import margin_test, paired_difference
from lab.evidence.protocol import PARTITION_SEED, final_metric, profile_federation, run_seeds, tuned_params
from lab.evidence.records import figure_runs
from lab.regime.params import plan_seeds
from fedlab.tuning import DEFAULT_GRIDS
from fedlab.uncertainty import mean_interval
from lab.tools.plots import curve_data, method_color, method_label, metric_scale, round_ticks, status_note, use_house_style
from lab.tools.figures import save_figure
from lab.repro import CITABLE_PROFILES, REPO_ROOT
from IPython.display import Markdown, display
from lab.evidence.report import committed_table, cpu_report
from lab.tools.lessons import lessons_line

use_house_style()
seeds = list(range(seed, seed + n_seeds))
print("fedlab-sam marker present:", hasattr(fedlab, "FEDLAB_SAM_MARKER"))
print("imported from this repository:", Path(fedlab.__file__).resolve().is_relative_to(REPO_ROOT))
print("registered algorithms:", len(fedlab.ALGORITHMS))

# %% [markdown]
# ## 2. The federation
# `fedlab.Config` describes one experiment; the same object drives data loading, partitioning,
# model construction and training. Here is the split the three methods will share. The partition has
# its own seed (`partition_seed`), fixed across the training seeds, so the seeds vary only the
# initialisation, the client sampling and the batch order.

# %%
base = fedlab.Config(dataset=dataset, model=model, train_size=train_size, test_size=test_size,
                     n_clients=n_clients, participation=participation, partition="dirichlet", alpha=alpha,
                     rounds=rounds, local_steps=local_steps, batch_size=batch_size, lr=lr, lr_schedule=lr_schedule,
                     eval_every=eval_every,
                     eval_subsample=eval_subsample, seed=seed, partition_seed=PARTITION_SEED,
                     client_threads=client_threads)
data = fedlab.engine.build_dataset(base)
split = fedlab.engine.build_partition(base, data)
print(data.describe())
stats = split.stats.summary()
print(f"clients: {split.n_clients}, samples per client: {stats['min_size']:.0f}–{stats['max_size']:.0f}")
print(f"mean effective number of classes per client: {stats['mean_effective_classes']:.2f} (of {data.n_classes})")

# %% [markdown]
# Is this notebook 10's federation? In the `cpu` profile it must be (then every run below is one of
# the benchmark's runs, trained once and shared); the `ci` size is a smaller one.

# %%
shared = profile_federation("cpu")
same = all(getattr(base, f) == getattr(shared, f) for f in ("dataset", "model", "train_size", "test_size",
           "n_clients", "participation", "partition", "alpha", "rounds", "local_steps", "batch_size", "lr",
           "lr_schedule", "eval_every", "eval_subsample", "partition_seed"))
print(f"profile {profile}: notebook 10's cpu federation (Dir 0.1): {same}")
if profile == "cpu":
    assert same, "the cpu profile of this notebook trains on notebook 10's federation (params/10_benchmarks.cpu.yaml)"

# %% [markdown]
# ## 3. Train FedAvg, FedSAM and FedVSSAM
# Each method runs with the hyperparameters **tuned for this split** on a validation set held out from
# the training data (`lab.evidence.protocol.tuned_params`, the committed choice in
# `figures/rerun/tuning/<split>/`; notebook 04 measures what a SAM radius too large for this small CNN does to
# it, and why the radius must be chosen per model). Where no tuning is committed yet the
# method runs at its defaults and the table says "untuned". Each run is stored under `runs/` (a second
# call with the same configuration loads it instead of training again), once per training seed.

# %%
methods = ["fedavg", "fedsam", "fedvssam"]
tuned = {m: tuned_params(m, base, profile=profile) for m in methods}


def resolved(method, params):
    """The values the run uses for the method's tuned hyperparameters (its defaults where none is given)."""
    hp = fedlab.get_algorithm(method, params).hp.to_dict()
    grid = DEFAULT_GRIDS.get(method, {})
    keys = [k for k in grid if k != "preset"] + (["gamma_l", "gamma_g"] if "preset" in grid else [])  # a preset sets γ
    return ", ".join(f"{k}={hp[k]}" for k in keys if k in hp) or "–"


print(pd.DataFrame([{"method": method_label(m), "hyperparameters": resolved(m, t.params), "source": t.source}
                    for m, t in tuned.items()]).to_string(index=False))

# %%
runs = {}
for m in methods:
    cfg = base.replace(algorithm=m, algorithm_params=dict(tuned[m].params))
    runs[m] = run_seeds(cfg, plan_seeds(cfg, {}, seeds, use_plan=rerun_plan), record=profile in CITABLE_PROFILES,
                        paired=paired_partitions)

# %% [markdown]
# How many runs finished and learned something. The exact digits depend on the CPU's floating-point
# kernels, so the checked cell prints counts only; the next cell prints the numbers. A run that stays
# at chance for the last quarter of its rounds is `collapsed`: it is counted, drawn dotted, and never
# averaged into a method's mean.

# %%
# NBVAL_CHECK_OUTPUT
chance = 1 / data.n_classes
for m, rs in runs.items():
    finished = sum(r.status == "finished" for r in rs)
    learned = sum(r.metrics["test_acc"].max() > 1.5 * chance for r in rs)
    print(f"{method_label(m):9s} {finished} of {len(rs)} seed(s) finished, "
          f"{learned} learned (best accuracy > 1.5x chance)")

# %%
summary_rows = []
for m, rs in runs.items():
    ok = [r for r in rs if r.status == "finished"]
    est = mean_interval(final_metric(r).value for r in ok) if ok else None
    summary_rows.append({"method": method_label(m), "finished": f"{len(ok)}/{len(rs)}",
                         "final test accuracy (mean ± 95 %)": est.format(100.0) if est else "–",
                         "per seed (%)": ", ".join(f"{100 * final_metric(r).value:.1f} ({r.status})" for r in rs)})
print(pd.DataFrame(summary_rows).to_string(index=False))
# the final accuracy is lab.evidence.protocol.final_metric's, the claims table's; how it was read:
print("final accuracy:", "; ".join(sorted({final_metric(r).how for rs in runs.values() for r in rs})))

# %%
def mean_curve(rs, metric):
    """Mean ± 95 % interval over the finished runs of one method, per evaluated round."""
    ok = [r.metrics[["round", metric]].dropna().set_index("round")[metric] for r in rs if r.status == "finished"]
    if not ok:
        return pd.DataFrame(columns=["round", "mean", "low", "high", "n"])
    table = pd.concat(ok, axis=1).dropna()
    rows = []
    for rnd, vals in table.iterrows():
        e = mean_interval(vals.to_numpy())
        half = e.half_width if np.isfinite(e.half_width) else 0.0
        rows.append({"round": int(rnd), "mean": e.mean, "low": e.mean - half, "high": e.mean + half, "n": e.n})
    return pd.DataFrame(rows)


styles = {"fedavg": "-", "fedsam": "--", "fedvssam": "-."}
all_runs = [r for rs in runs.values() for r in rs]
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
curve_frames = {}
for ax, metric in [(ax1, "test_acc"), (ax2, "train_loss")]:
    scale = metric_scale(metric)  # accuracy in %
    for m, rs in runs.items():
        mc = mean_curve(rs, metric)
        curve_frames[(m, metric)] = mc.assign(method=m, metric=metric)
        n_ok = int(mc["n"].max()) if len(mc) else 0
        if n_ok:
            ax.plot(mc["round"], scale * mc["mean"], styles[m], color=method_color(m), lw=1.8,
                    label=f"{method_label(m)} (mean of {n_ok} seeds)" if n_ok > 1 else f"{method_label(m)} (one seed)")
        for r in rs:
            d = r.metrics[["round", metric]].dropna()
            if r.status == "finished" and n_ok > 1:
                # each seed thin: a shaded 95 % interval of two or three seeds would reach below 0 (or 100 %)
                ax.plot(d["round"], scale * d[metric], "-", color=method_color(m), lw=0.7, alpha=0.45)
            elif r.status != "finished":  # drawn on its own, thin dotted, never in the mean
                ax.plot(d["round"], scale * d[metric], ":", color=method_color(m), lw=1.0,
                        label=f"{method_label(m)} seed {r.config.seed} ({r.status})")
    ax.set_xlabel("round")
    round_ticks(ax, curve_data(all_runs, metric)["round"])  # ticks on evaluated rounds only
ax1.set_ylabel("test accuracy of the global model (%)")
ax2.set_ylabel("mean local training loss")
ax1.set_title("test accuracy")
ax2.set_title("local training loss")
handles, labels = ax1.get_legend_handles_labels()
fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=4)
fig.suptitle(f"{dataset}, {n_clients} clients, Dirichlet α={alpha}, {round(participation * 100)} % per round, "
             f"{len(seeds)} seed(s)", y=1.02)
note = status_note(all_runs)
interval = "mean over the finished seeds (thick) and each seed (thin)" if len(seeds) > 1 else "one seed"
save_figure(fig, "00_quickstart_curves", notebook="00_quickstart", profile=profile,
            caption=f"Test accuracy and local training loss of FedAvg, FedSAM and FedVSSAM on {dataset} "
                    f"(Dirichlet α={alpha}, {n_clients} clients, tuned hyperparameters; {interval})."
                    + (f" {note}" if note else ""),
            parameters=dict(dataset=dataset, n_clients=n_clients, alpha=alpha, rounds=rounds, seeds=seeds,
                            seed=seed, params={m: t.params for m, t in tuned.items()},
                            tuning={m: t.source for m, t in tuned.items()}),
            data={"per_seed": pd.concat([curve_data(all_runs, "test_acc"), curve_data(all_runs, "train_loss")],
                                        ignore_index=True),
                  "mean_interval": pd.concat(curve_frames.values(), ignore_index=True)},
            runs=all_runs)
plt.show()

# %% [markdown]
# **The cpu run.** The curves above are this execution's; at the `ci` size (one seed, a dozen short rounds on a
# small subset) they are a smoke test, and which line ends on top is chance. The committed cpu figure is the
# rerun's regime (100 clients, 100 rounds of K = 50 steps, six seeds, each seed with its own partition, clients and
# batches shared by the three methods, so they can be compared seed by seed):

# %%
cpu = cpu_report("00_quickstart")
cpu.show("00_quickstart_curves")

# %%
# checked by its asserts; its numbers by the cpu_lessons line at the end (nbval)
# Each committed run's final accuracy as the claims table reads it (final_metric of its record), and the methods
# compared as the claims table compares them: the paired difference over the seeds both ran, with its 95 % t-interval.
quick_runs = [r for r in figure_runs("00_quickstart_curves") if r.status == "finished"]
quick_fin = {m: {r.config.seed: 100 * final_metric(r).value for r in quick_runs if r.config.algorithm == m}
             for m in methods}
quick_cpu = committed_table("00_quickstart_curves", "per_seed")
quick_last = quick_cpu[quick_cpu["round"] == quick_cpu["round"].max()]
quick_loss = quick_last.dropna(subset=["train_loss"]).pivot(index="seed", columns="algorithm", values="train_loss")
cpu_lessons: dict = {"rounds": int(quick_cpu["round"].max()), "final": sorted({final_metric(r).how for r in quick_runs}),
                     "fedavg": float(np.mean(list(quick_fin["fedavg"].values())))}
for m in ("fedsam", "fedvssam"):
    gap = paired_difference(quick_fin[m], quick_fin["fedavg"])
    # the words of the findings table: which way the 95 % interval of left − right lies, or that it holds 0
    reading = {"holds": f"{method_label(m)} higher", "fails": f"{method_label(m)} lower"}.get(
        margin_test(gap.low, gap.high, ">"), "no difference resolved")
    cpu_lessons[m] = {"mean": float(np.mean(list(quick_fin[m].values()))), "diff": gap.mean, "half_width": gap.half_width,
                      "above": sum(d > 0 for d in gap.values), "seeds": gap.n, "reading": reading}
cpu_lessons["loss_last"] = float(quick_loss.to_numpy().mean())
cpu_lessons["spread"] = float(max(quick_fin["fedavg"].values()) - min(quick_fin["fedavg"].values()))
assert len(cpu_lessons["final"]) == 1 and cpu_lessons["final"][0].startswith("mean of the last"), "the protocol metric"
assert all(abs(cpu_lessons[m]["diff"]) < 2 for m in ("fedsam", "fedvssam")), "within two points of FedAvg"
assert max(abs(cpu_lessons[m]["diff"]) for m in ("fedsam", "fedvssam")) < cpu_lessons["spread"], \
    "the differences are smaller than FedAvg's own spread over seeds"
assert cpu_lessons["loss_last"] < 0.1, "the clients nearly fit their own data"
ql = {m: cpu_lessons[m] for m in ("fedsam", "fedvssam")}
display(Markdown(
    f"Final accuracy as the claims table reads it ({cpu_lessons['final'][0]}): FedAvg reaches "
    f"{cpu_lessons['fedavg']:.1f} % (mean of {ql['fedsam']['seeds']} seeds). Paired by seed, FedSAM − FedAvg is "
    f"{ql['fedsam']['diff']:+.2f} ± {ql['fedsam']['half_width']:.2f} points (95 % interval; above FedAvg in "
    f"{ql['fedsam']['above']} of {ql['fedsam']['seeds']} seeds: {ql['fedsam']['reading']}) and FedVSSAM − FedAvg "
    f"{ql['fedvssam']['diff']:+.2f} ± {ql['fedvssam']['half_width']:.2f} ({ql['fedvssam']['above']} of "
    f"{ql['fedvssam']['seeds']}: {ql['fedvssam']['reading']}). Both are smaller than the "
    f"{cpu_lessons['spread']:.1f} points that separate FedAvg's own seeds, which is why the curves overlap: only the "
    f"paired difference (same partition, clients and batches per seed) can resolve a change this small, and its "
    f"interval says whether it does. Whether a paper's claim holds is the claims table's to say (the end of this "
    f"notebook, and notebook 10). The right panel shows why K = 50 matters: the clients' local training loss falls to "
    f"{cpu_lessons['loss_last']:.2f} on average, so every client nearly fits its own two or three classes each round, "
    f"the situation in which local flatness and global flatness part (notebook 02)."))

# %% [markdown]
# ## What we learned
# Three methods, one heterogeneous federation, from the committed cpu run:

# %%
# NBVAL_CHECK_OUTPUT
# notebook 10's committed runs of the same federation (the same records as above for these three methods): the
# drift corrections' final accuracy, from their records through final_metric, paired with FedAvg's by seed
bench = {m: {r.config.seed: 100 * final_metric(r).value for r in figure_runs("10_benchmarks_bars_fmnist")
             if r.config.algorithm == m and r.config.partition == "dirichlet" and r.config.alpha == 0.1
             and r.status == "finished"}
         for m in ("fedavg", "scaffold", "feddyn")}
cpu_lessons["drift"] = {m: paired_difference(bench[m], bench["fedavg"]).mean for m in ("scaffold", "feddyn")}
assert min(cpu_lessons["drift"].values()) > max(cpu_lessons[m]["diff"] for m in ("fedsam", "fedvssam"))
display(Markdown(
    f"* At Dirichlet 0.1, sharpness-aware local steps move the global model's final accuracy by less than two points "
    f"(paired over seeds: FedSAM {cpu_lessons['fedsam']['diff']:+.2f} ± {cpu_lessons['fedsam']['half_width']:.2f}, "
    f"{cpu_lessons['fedsam']['reading']}; FedVSSAM {cpu_lessons['fedvssam']['diff']:+.2f} ± "
    f"{cpu_lessons['fedvssam']['half_width']:.2f}, {cpu_lessons['fedvssam']['reading']}; FedAvg at "
    f"{cpu_lessons['fedavg']:.1f} %), less than the seeds' own spread.\n"
    f"* Notebook 10 puts this beside the rest: in the same federation, correcting client drift gains more than "
    f"either (SCAFFOLD {cpu_lessons['drift']['scaffold']:+.2f}, FedDyn {cpu_lessons['drift']['feddyn']:+.2f})."))
print(lessons_line(cpu_lessons, prefix="cpu_lessons"))

# %% [markdown]
# ## Where to go next
# * `01_heterogeneity` — what "Dirichlet 0.1" really means, and why two papers' "Dir-0.5" differ.
# * `02_flatness_incompatibility` — why locally flat is not globally flat.
# * `03_friendly_adversary` — the two error sources of a local SAM perturbation.
# * `04`–`08` — the methods, one family per notebook; `09` landscapes; `10` the benchmark table.
#
# From the command line the same run is
# `python -m fedlab run --algorithm fedsam --dataset fmnist --partition dirichlet --alpha 0.1`.

# %% [markdown]
# ## Exercises
#
# Predict first, then run. One seed at the `ci` size decides little: add `-p n_seeds 3` to a papermill run
# to see three.
#
# 1. Rerun with `papermill 00_quickstart.ipynb out.ipynb -p alpha 10.0` (nearly IID clients). Read the
#    hyperparameter table first: where do FedSAM's and FedVSSAM's radii come from now? Then predict how far
#    apart the three accuracy curves end, compared with α = 0.1.
#
# <details>
# <summary>Solution</summary>
#
# The table says "tuned on dirichlet-0.1, reused on dirichlet-10": the cpu profile tunes every method once, on
# Dirichlet 0.1 (`lab/regime/rerun.yaml`, reasons.tuning_split), and every other split takes that choice, labelled
# so. FedAvg ends far above its α = 0.1 accuracy: the clients hold almost the same label mix (§2 prints nearly ten
# effective classes), so their local models hardly drift apart, and the three curves end much closer together
# than at α = 0.1, where methods and seeds spread over many points. At the `ci` size with three seeds, FedVSSAM
# ends within about a point of FedAvg and FedSAM a few points below, with a wide spread over its seeds: a radius
# chosen for a heterogeneous split is not necessarily the one a nearly IID split wants (notebook 04 shows how
# strongly the radius matters).
#
# </details>
#
# 2. Train FedSAM with `algorithm_params={"rho": 0.0}` (`fedlab.run(base.replace(algorithm="fedsam",
#    algorithm_params={"rho": 0.0}))`). Which curve should it lie exactly on top of, and why? Check that
#    the final accuracies agree to the last digit.
#
# <details>
# <summary>Solution</summary>
#
# FedAvg's, exactly: the accuracies agree in every digit, and so do the models:
# `torch.equal(r.theta, fedlab.run(base.replace(algorithm="fedavg")).theta)` is `True`. With ρ = 0 the
# perturbation $0\cdot g/(\lVert g\rVert + 10^{-12})$ is the exact zero vector, so θ + ε̂ is θ bit for bit and the
# second gradient is the first one, on the same minibatch, computed again (the `fedsam` docstring states the
# identity). Same numbers at twice the cost: the run's `cum_grad_evals` column is twice FedAvg's. Both runs must
# come from the same thread settings: a run that another process computed and left in `runs/` may differ in its
# last bits (notebook 04, §6).
#
# </details>
#
# 3. Double `local_steps` from 5 to 10 at α = 0.1 (`-p local_steps 10 -p n_seeds 3`). Every client now does
#    twice the work per round. Does FedAvg gain or lose against FedSAM? Write down your guess before you
#    run it.
#
# <details>
# <summary>Solution</summary>
#
# Neither, reliably. Both gain: in each of the three seeds every method ends higher after the same 12 rounds than
# with K = 5. The gap between FedAvg and FedSAM changes sign from seed to seed, at K = 5 and at K = 10: with its
# tuned radius (small, see the table) FedSAM's step is close to FedAvg's. The argument for a widening gap, in
# which more local steps mean more client drift and local SAM finds flatness of ever more client-specific models,
# is about long runs whose clients reach their own minima (notebook 02); twelve rounds on this small federation
# are far from that.
#
# </details>

# %% [markdown]
# ## What the cpu run shows
# This section is generated from the committed cpu-profile data (`figures/`, `figures/records/`,
# `figures/claims.yaml`), whatever profile this notebook was just run with: it lists the committed cpu
# figures of this notebook with the evidence behind each (run records, seeds) and the rows of the claims
# table that the notebook tests, with their verdicts and numbers.

# %%
# NBVAL_CHECK_OUTPUT
from lab.evidence.report import cpu_report

report = cpu_report("00_quickstart")
print(report.text())

# %%
report.show_figures(skip=("00_quickstart_curves",))
