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
# # 09 · Sharpness and loss landscapes of the final global models
#
# Every sharpness-aware method in this repository claims to end in a *flatter* region of the global
# loss $F(\theta) = \frac1N\sum_i F_i(\theta)$ than FedAvg, and flatter is supposed to generalise better. This
# notebook measures the claim on the final global models of the methods, with the tools of
# `fedlab.analysis`:
#
# * **top Hessian eigenvalue** $\lambda_{max}(\nabla^2 L_S(\theta))$ of the training loss $L_S$ on one fixed
#   class-balanced sample S of `curvature_size` training images — the same S as notebook 02's, so both notebooks
#   measure one function (`fedlab.analysis.curvature`) — by Lanczos on exact Hessian-vector products
#   $Hv = \nabla_\theta\langle\nabla L_S(\theta), v\rangle$ (Pearlmutter 1994), each estimate with a convergence
#   flag: its residual $\lVert Hu - \lambda u\rVert$ against the tolerance `eig_tol`·|λ|;
# * **Hessian trace** $\mathrm{tr}\,\nabla^2L_S$ by Hutchinson's estimator, $\mathrm{tr}\,H = \mathbb E[v^\top H v]$ for
#   Rademacher v (entries ±1), reported with its standard error;
# * **1-D interpolation** $F((1-a)\theta_{FedAvg} + a\,\theta_{FedVSSAM})$ between two final models
#   (Goodfellow et al. ICLR'15): a barrier between them means they sit in different basins;
# * **1-D and 2-D slices** $F(\theta + a d_1 + b d_2)$ along *filter-normalised* random directions
#   (Li et al., "Visualizing the loss landscape of neural nets", NeurIPS'18): each filter of d is
#   rescaled to the norm of the same filter of θ, so that slices of different models are comparable
#   despite the scale invariance of ReLU networks with normalisation layers;
# * **sharpness over training** with `track_sharpness` (λ_max of the global model every few rounds).
#
# The methods and their update rules are the subject of notebooks 04–08; here each runs with the
# hyperparameters **tuned** for this split on a held-out validation set (`tuned_params`, the committed choice
# in `figures/rerun/tuning/`; `method_params` overrides it), on the Dirichlet-0.1 split of Fashion-MNIST (in the
# `ci` size one partition, fixed; in the cpu profile each seed's own, below). The curvature numbers are
# measured on the final model of every training seed and reported as mean ± 95 % interval over the seeds;
# the 1-D slices and the sharpness over training are means over the
# seeds, and the 2-D landscapes are drawn for every seed side by side. A model that **collapsed** (stayed at
# chance) is marked on every figure and never averaged in: a network that learned nothing can look very flat.
# At the smoke-test size (the default) a few methods train for a few rounds; at the cpu size all 16, the same runs
# as notebook 10's Dir-0.1 benchmark, each trained again for its model (the records keep no θ): FedAvg, FedSAM and
# FedVSSAM, the arms of the flatness claim, at all six seeds, the others at the first three. The table at the end
# lists what each size trains.
#
# Symbols: the notation page, `notebooks/book/notation.md`. How the evidence behind the figures is made, and
# the words for it: `notebooks/book/guide/running.md`.

# %% tags=["parameters"]
profile = "ci"  # ci | cpu | paper: where figures go (ci → figures/_scratch, others → figures/)
seed = 0  # first training seed (init, sampling, batches) and the seed of the measurement samples
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
lr_schedule = "exponential"  # across rounds: exponential (×0.998 per round) | cosine | constant (the cpu regime)
eval_every = 4  # evaluate the global model every this many rounds
eval_subsample = None  # evaluate on a class-balanced subset of the test set (None: all of it)
methods = ["fedavg", "fedsam", "fedvssam", "scaffold", "fedswa"]  # methods to train and analyse
method_params = {}  # per-method overrides of the tuned hyperparameters, e.g. {"fedvssam": {"preset": "high"}}
n_seeds = 1  # training seeds per method: seed, seed + 1, ... (cpu: 6; intervals need ≥ 2)
paired_partitions = False  # cpu: each training seed draws its own partition, shared by every method of that seed
rerun_plan = False  # cpu: train only the runs the regime rerun's plan trains, on its seeds (lab/regime/rerun.yaml)
measure_clients = 5  # clients whose data define the measured F (a seeded random subset)
measure_batches = 1  # minibatches per client in the measured F
measure_batch_size = 32  # samples per minibatch there
curvature_size = 2000  # class-balanced training images of S, on which λ_max and the trace are measured (as in 02)
eig_tol = 1e-3  # λ_max converged when its Lanczos residual ‖Hu − λu‖ ≤ eig_tol·|λ|
eig_max_iter = 100  # Lanczos steps (Hessian-vector products) before an estimate is reported unconverged
track_iters = 8  # power iterations of the sharpness tracked during training (lab.sharpness, its own F)
trace_samples = 8  # Rademacher probes for the Hutchinson trace (its standard error shrinks as 1/√probes)
spearman_permutations = 2000  # random relabellings for the p-value of the curvature-accuracy rank correlation
slice_points = 11  # points of the 1-D slices and of the interpolation on [0, 1] (odd, so that a is 0 at a grid point)
slice_span = 1.0  # 1-D and 2-D slices cover [−span, span] in units of the filter-normalised direction
grid_points = 9  # the 2-D slices are grid_points × grid_points (odd)
track_methods = ["fedavg", "fedsam"]  # methods whose sharpness is tracked during training (every seed)
track_every = 4  # measure λ_max every this many rounds
track_seeds = None  # how many of the seeds are tracked (None: every seed; a run trained untracked is replayed)
analysis_seeds = None  # how many of the seeds each method is trained again on and analysed at (None: every seed)
every_seed_methods = []  # methods analysed at every seed whatever analysis_seeds (a claim's arms need them all)
device = "cpu"  # cpu | cuda (the paper profile needs a GPU)

# %%
import math
import warnings

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from matplotlib.ticker import FormatStrFormatter, MaxNLocator

import fedlab
from fedlab.analysis import (
    federation_from_config,
    filter_normalized_direction,
    global_loss_fn,
    convergence_line,
    curvature_loss,
    hessian_trace,
    interpolate,
    lambda_max,
    plot_contour,
    plot_surface,
    slice_1d,
    slice_2d,
)
from lab.course import (PARTITION_SEED, degenerate_arms, final_metric, plan_seeds, recorded,
                        rerun_config, run_or_load, run_seeds, track_sharpness, tuned_params)
from fedlab.uncertainty import mean_interval
from lab.course import (METHOD_ORDER, draw_band, draw_seeds, method_color, method_label, round_ticks,
                        save_figure, status_note, use_house_style)
from fedlab import numpy_generator, torch_generator
from lab.course import CITABLE_PROFILES
from lab.course import cpu_report

use_house_style()
# A Dirichlet split can leave a client without data; the analyses leave such clients out of F (they have
# no F_i) and announce it with a UserWarning. The number of clients used is printed below instead.
warnings.filterwarnings("ignore", message="client_data: left out", category=UserWarning)
seeds = list(range(seed, seed + n_seeds))
record = profile in CITABLE_PROFILES  # commit each run's record as soon as it finishes
base = fedlab.Config(dataset=dataset, model=model, train_size=train_size, test_size=test_size,
                     n_clients=n_clients, participation=participation, partition="dirichlet", alpha=alpha,
                     rounds=rounds, local_steps=local_steps, batch_size=batch_size, lr=lr, lr_schedule=lr_schedule,
                     eval_every=eval_every, eval_subsample=eval_subsample, seed=seed, device=device,
                     client_threads=client_threads, partition_seed=PARTITION_SEED)
partition_seed_note = "seed" if paired_partitions else PARTITION_SEED  # figure provenance: whose partition
choices = {name: (tuned_params(name, base, profile=profile), method_params.get(name, {}))
           for name in dict.fromkeys(methods + track_methods)}


def method_config(name):
    tuned, override = choices[name]
    return base.replace(algorithm=name, algorithm_params={**tuned.params, **override})


def seed_config(name, s_):
    """``name``'s run at training seed ``s_``: the partition fixed, or (paired) drawn by the seed itself."""
    return rerun_config(method_config(name), s_) if paired_partitions else method_config(name).replace(seed=s_)


# the seeds each method trains on: all of them, or in the cpu profile those the rerun plan trains it on
method_seeds = {name: plan_seeds(method_config(name), choices[name][1], seeds, use_plan=rerun_plan, required=False)
                for name in choices}
if rerun_plan:  # the cpu profile reads the rerun's records: a run the plan does not train would train here
    for name, planned in method_seeds.items():
        if planned != seeds:
            print(f"{method_label(name)}: " + (f"the rerun plan trains it on seeds {planned} only: analysed on those"
                                               if planned else "not in the rerun plan (lab/regime/rerun.yaml), skipped"))
    assert all(method_seeds[name] == seeds for name in ["fedavg"] + track_methods if name in method_seeds), \
        "the rerun plan does not train FedAvg or a tracked method on every seed"
    methods = [name for name in methods if method_seeds[name]]
if analysis_seeds is not None and (isinstance(analysis_seeds, bool) or not isinstance(analysis_seeds, int)
                                   or not 1 <= analysis_seeds <= n_seeds):
    raise ValueError(f"analysis_seeds must be None or an integer from 1 to n_seeds = {n_seeds}, got {analysis_seeds!r}")
if set(every_seed_methods) - set(methods):
    raise ValueError(f"every_seed_methods names {sorted(set(every_seed_methods) - set(methods))}, which are not in "
                     f"methods; allowed: {methods}")
# each model analysed is trained again for its θ: the methods outside every_seed_methods on their first seeds only
method_seeds = {name: ss if name in every_seed_methods else ss[:analysis_seeds] for name, ss in method_seeds.items()}
seed_counts = sorted({len(method_seeds[n]) for n in methods})
seeds_text = (f"{seed_counts[0]} seed(s)" if len(seed_counts) == 1 else  # the captions' words for how many seeds
              f"{len(seeds)} seeds for {', '.join(method_label(n) for n in methods if method_seeds[n] == seeds)} "
              f"and the first {analysis_seeds} for every other method")
print("seeds analysed:", seeds_text)


print(pd.DataFrame([{"method": method_label(n), "params": ", ".join(f"{k}={v}" for k, v in
                                                                   method_config(n).algorithm_params.items())
                     or "(defaults)", "source": t.source + (f"; override {o}" if o else "")}
                    for n, (t, o) in choices.items()]).to_string(index=False))

# a line style and marker per method on top of its colour, so that no two of the 16 lines look alike
# (dotted is kept for collapsed models)
LINESTYLES, MARKERS = ["-", "--", "-.", (0, (3, 1, 1, 1, 1, 1))], ["o", "s", "^", "D", "v", "P", "X", "*"]


def line_style(name, status="finished"):
    if status != "finished":
        return {"color": method_color(name), "ls": ":", "lw": 1.0, "marker": "x"}
    i = METHOD_ORDER.index(name) if name in METHOD_ORDER else len(METHOD_ORDER)
    return {"color": method_color(name), "ls": LINESTYLES[i % len(LINESTYLES)], "marker": MARKERS[i % len(MARKERS)]}


def styled_label(name, status="finished"):
    return method_label(name) if status == "finished" else f"{method_label(name)} ({status})"


# %% [markdown]
# ## 1. Train, tracking the sharpness of two methods on the way
# `track_sharpness` trains a run in segments of `track_every` rounds (the engine checkpoints and resumes
# bit-identically) and measures the global model after each segment; the measurements are stored next to
# the run in `runs/<algorithm>-<hash>/sharpness.csv`. If the run was already trained without tracking,
# its rounds are replayed in a temporary folder. Then every method is trained (or loaded) for every
# seed with `run_seeds(..., need_theta=True)`: this notebook analyses the models themselves, which the
# committed records do not keep, so the runs come from `runs/` (trained here if they are not there).

# %%
tracked = {(name, s): track_sharpness(seed_config(name, s), every=track_every, batches=measure_batches,
                                      batch_size=measure_batch_size, max_clients=measure_clients, iters=track_iters,
                                      seed=seed, progress=False)
           for name in track_methods for s in seeds[:track_seeds]}
runs = {name: run_seeds(method_config(name), method_seeds[name], record=record, need_theta=True,
                        paired=paired_partitions) for name in methods}
# a run's accuracy is its record's (the evidence; θ alone comes from the run trained here), read through the
# protocol's one final metric
final_of = {(name, r.config.seed): final_metric(recorded(r)) for name, rs in runs.items() for r in rs}
print(pd.DataFrame({
    "statuses": [" ".join(r.status for r in rs) for rs in runs.values()],
    "final test acc (per seed)": [" ".join(f"{final_of[name, r.config.seed].value:.3f}" for r in rs)
                                  for name, rs in runs.items()],
}, index=[method_label(n) for n in runs]).to_string())
print("final test accuracy:", "; ".join(sorted({v.how for v in final_of.values()})))

# %% [markdown]
# ## 2. The functions we measure
# The curvature of §3 (λ_max and the trace) is measured on $L_S$, the training loss on one class-balanced sample
# S of `curvature_size` training images (`fedlab.analysis.curvature`; its seed is fixed, so S is the same for
# every model, every seed and every partition, and the same as notebook 02's). The landscapes and the
# interpolation (§4–6) use F: `measure_batches` seeded minibatches of `measure_batch_size` samples from each of
# `measure_clients` clients drawn at random (the same samples for every model, every seed and every point of a
# landscape, so F is a deterministic function of θ). With paired partitions each seed's models were trained on
# that seed's own partition, so F is fixed per seed instead: drawn the same way from that partition's clients,
# the same for every model of the seed.

# %%
def measured_function(config):
    """(model, clients holding data, measured clients, F) of the partition ``config`` trains on."""
    model_, held, _ = federation_from_config(config, seed=seed)
    chosen = np.sort(numpy_generator(seed, "09-measure-clients").choice(len(held), min(measure_clients, len(held)),
                                                                        replace=False))
    return model_, held, chosen, global_loss_fn(model_, [held[int(i)] for i in chosen], batches=measure_batches,
                                                batch_size=measure_batch_size, seed=seed)


partition_of = {}  # training seed -> the config of one of its runs (every run of a seed has its partition)
for rs in runs.values():
    for r in rs:
        partition_of.setdefault(r.config.seed, r.config)
built = {}  # partition seed -> measured_function's answer (one for every seed when the partition is fixed)
for cfg in partition_of.values():
    if cfg.partition_seed not in built:
        built[cfg.partition_seed] = measured_function(cfg)
F_of = {s_: built[cfg.partition_seed][3] for s_, cfg in partition_of.items()}  # training seed -> its models' F
net, clients, pick, F = built[partition_of[seeds[0]].partition_seed]  # the first seed's, printed
print(f"{len(clients)} of {n_clients} clients hold data; F is measured on {len(pick)} of them, "
      f"{F.n_samples} samples in all" + (" (first seed's partition; each seed's F is its own)"
                                         if paired_partitions and len(seeds) > 1 else ""))
# the curvature function: the training loss on one class-balanced sample S, the same for every model, seed and
# partition, and the same as notebook 02's (its seed is the module's fixed CURVATURE_SEED, not `seed`)
data = fedlab.engine.build_dataset(base)
L_S = curvature_loss(net, data.x_train, data.y_train, curvature_size)
print(f"λ_max and the trace are measured on S: {L_S.n_samples} training images, "
      f"{curvature_size // int(data.y_train.unique().numel())} of each class")

# %%
# NBVAL_CHECK_OUTPUT
print("methods analysed:", len(runs), "| seeds per method:", " or ".join(str(c) for c in seed_counts))
print("every run has its final model (need_theta):", all(r.theta is not None for rs in runs.values() for r in rs))
print("methods whose sharpness is tracked:", len({name for name, _ in tracked}))

# %% [markdown]
# ## 3. Curvature of every final model
# λ_max is the curvature along the sharpest direction; the trace sums the curvature over all directions.
# Both are measured at the final model of every seed, on $L_S$ (the training loss on the fixed sample S of §2,
# not on F: F's few clients carry their label skew into the Hessian, and 02 measures on S too). λ_max comes from
# Lanczos run until its residual meets `eig_tol` (at most `eig_max_iter` steps); an estimate that does not is
# flagged, and it is a lower estimate (a Ritz value never exceeds the top eigenvalue). The Hutchinson trace of one model is itself an
# estimate: with `trace_samples` probes its standard error (s.e. = sample std / √probes) is printed
# and drawn on each seed's dot; the interval on the mean is over the seeds. Every model is probed with
# the same random vectors (the same generator seeds), so differences between models are not differences
# between probes.

# %% [markdown]
# **What you should see**, at full size (the cells after it redraw the figure at this execution's size). It measures
# the final models of every method in the rerun's regime on Dirichlet 0.1, each seed on its own partition and with its
# own F; the claim it judges is FedVSSAM's (its paper's §1): a flatter global model, a smaller λ_max, than FedSAM's
# and FedAvg's.

# %%
cpu = cpu_report("09_sharpness_and_landscapes", remaking=record)  # record: this run re-makes the figures
cpu.show("09_curvature")

# %%
# λ_max of every final model here, the trace in the next cell: on 2,000 images each costs tens of Hessian-vector
# products per model, and two cells keep each one short on a CPU
thetas = {(name, res.config.seed): res.theta.to(net.theta0()) for name, rs in runs.items() for res in rs}
eigs = {key: lambda_max(L_S, theta, tol=eig_tol, max_iter=eig_max_iter) for key, theta in thetas.items()
        if bool(torch.isfinite(theta).all())}  # a diverged model has no curvature to measure

# %%
rows = []
for name, rs in runs.items():
    for res in rs:
        theta = thetas[name, res.config.seed]
        finite = bool(torch.isfinite(theta).all())
        F_s = F_of[res.config.seed]
        eig = eigs.get((name, res.config.seed))
        tr = hessian_trace(L_S, theta, trace_samples, generator=torch_generator(seed, "09-trace")) if finite else None
        rows.append({"method": name, "label": method_label(name), "seed": res.config.seed, "status": res.status,
                     "F": float(F_s(theta)) if finite else float("nan"),
                     "loss_S": float(L_S(theta)) if finite else float("nan"),
                     "lambda_max": float(eig.values[0]) if eig else float("nan"),
                     "converged": bool(eig.converged[0]) if eig else False,
                     "lanczos_steps": int(eig.iterations[0]) if eig else 0,
                     "trace": tr.mean if tr else float("nan"), "trace_stderr": tr.stderr if tr else float("nan"),
                     "trace_probes": trace_samples, "test_acc": final_of[name, res.config.seed].value,
                     # the retrained run's own final metric: equal to the record's where θ reproduced it bit for bit
                     "retrained_acc": final_metric(res).value})
curv = pd.DataFrame(rows)
summary_rows = []
for name in methods:
    grp = curv[curv["method"] == name]
    ok = grp[(grp["status"] == "finished") & np.isfinite(grp["lambda_max"]) & np.isfinite(grp["trace"])]
    row = {"method": name, "label": method_label(name), "n_seeds": len(grp), "n_finished": len(ok),
           "n_collapsed": int((grp["status"] == "collapsed").sum()), "n_diverged": int((grp["status"] == "diverged").sum())}
    for col in ("lambda_max", "trace", "F", "test_acc"):
        est = mean_interval(ok[col]) if len(ok) else None
        row[f"{col}_mean"] = est.mean if est else float("nan")
        row[f"{col}_ci95"] = est.half_width if est else float("nan")
    row["trace_stderr_mean"] = float(ok["trace_stderr"].mean()) if len(ok) else float("nan")
    summary_rows.append(row)
curv_summary = pd.DataFrame(summary_rows)


def pm(mean, hw, digits=3):
    if not np.isfinite(mean):
        return "–"
    return f"{mean:.{digits}f}" + (f" ± {hw:.{digits}f}" if np.isfinite(hw) else "")


print(convergence_line(curv.loc[curv["status"] == "finished", "converged"], eig_tol, eig_max_iter))
print(f"per seed ({trace_samples} Hutchinson probes per model):")
print(curv.drop(columns=["method", "trace_probes"]).round(3).to_string(index=False))
print("\nmean over the finished seeds ± 95 % interval (collapsed / diverged seeds counted, not averaged):")
print(pd.DataFrame({"method": curv_summary["label"],
                    "finished": [f"{a}/{b}" for a, b in zip(curv_summary["n_finished"], curv_summary["n_seeds"])],
                    "lambda_max": [pm(m, h) for m, h in zip(curv_summary["lambda_max_mean"], curv_summary["lambda_max_ci95"])],
                    "trace": [pm(m, h, 1) for m, h in zip(curv_summary["trace_mean"], curv_summary["trace_ci95"])],
                    "trace s.e. (probes)": curv_summary["trace_stderr_mean"].round(1),
                    "test acc": [pm(m, h) for m, h in zip(curv_summary["test_acc_mean"], curv_summary["test_acc_ci95"])]}
                   ).to_string(index=False))

# %%
def curvature_panel(ax, col, err_col=None):
    """Per-seed dots (± the probe s.e. if ``err_col``; for λ_max an unconverged estimate hollow), the mean of the
    finished seeds ± 95 % interval with its value, collapsed or diverged seeds as grey ✕ with a note on the right."""
    for y, name in enumerate(methods):
        grp = curv[curv["method"] == name]
        ok, bad = grp[grp["status"] == "finished"], grp[grp["status"] != "finished"]
        open_ = ok[~ok["converged"]] if col == "lambda_max" else ok.iloc[:0]
        ok = ok[ok["converged"]] if col == "lambda_max" else ok
        ax.errorbar(ok[col], [y] * len(ok), xerr=ok[err_col] if err_col else None, fmt="o", ms=3.5, lw=0.8,
                    color=method_color(name), alpha=0.55)
        ax.plot(open_[col], [y] * len(open_), "o", ms=4.5, mfc="none", mew=1.2, color=method_color(name))
        ax.plot(bad[col], [y] * len(bad), "x", ms=7, mew=1.6, color="#777777")
        s = curv_summary.set_index("method").loc[name]
        mean, hw = s[f"{col}_mean"], s[f"{col}_ci95"]
        if np.isfinite(mean):
            ax.errorbar(mean, y, xerr=hw if np.isfinite(hw) else None, fmt="o", ms=7, capsize=3,
                        color=method_color(name), mec="black", mew=0.6)
            ax.annotate(pm(mean, hw, 2 if abs(mean) < 100 else 0), (mean, y), xytext=(0, 4.5),
                        textcoords="offset points", ha="center", va="bottom", fontsize=7)
        if len(bad):
            ax.annotate(f"{len(bad)}/{len(grp)} {'/'.join(sorted(set(bad['status'])))} (✕, not averaged)", (1, y),
                        xycoords=("axes fraction", "data"), xytext=(-3, 0), textcoords="offset points", ha="right",
                        va="center", fontsize=7, color="#555555", style="italic")
    ax.set_yticks(range(len(methods)), [method_label(m) for m in methods])
    ax.set_ylim(len(methods) - 0.5, -0.5)


fig, axes = plt.subplots(1, 2, figsize=(12.5, 0.38 * len(methods) + 2.0), sharey=True)
curvature_panel(axes[0], "lambda_max")
axes[0].set_xlabel(r"$\lambda_{max}(\nabla^2 F)$")
axes[0].set_title("top Hessian eigenvalue")
curvature_panel(axes[1], "trace", "trace_stderr")
axes[1].set_xlabel(r"tr $\nabla^2 F$ (Hutchinson)")
axes[1].set_title(f"Hessian trace (seed dots ± probe s.e., {trace_samples} probes)")
handles = [plt.Line2D([], [], ls="", marker="o", ms=7, mec="black", color="#999999",
                      label="mean of the finished seeds ± 95 % interval"),
           plt.Line2D([], [], ls="", marker="o", ms=3.5, alpha=0.55, color="#999999", label="one seed"),
           plt.Line2D([], [], ls="", marker="o", ms=4.5, mfc="none", mew=1.2, color="#999999",
                      label="λ_max not converged (hollow, a lower estimate)"),
           plt.Line2D([], [], ls="", marker="x", ms=7, mew=1.6, color="#777777",
                      label="collapsed / diverged model (not averaged)")]
fig.legend(handles=handles, loc="lower center", ncol=4, bbox_to_anchor=(0.5, -0.01))
fig.tight_layout(rect=(0, 0.05, 1, 1))
all_runs = [r for rs in runs.values() for r in rs]
note = status_note(all_runs)
save_figure(fig, "09_curvature", notebook="09_sharpness_and_landscapes", profile=profile,
            caption=f"Top Hessian eigenvalue (Lanczos; hollow: not converged to a relative residual of {eig_tol:g} "
                    f"in {eig_max_iter} steps, a lower estimate) and Hutchinson trace ({trace_samples} probes, seed dots "
                    f"± standard error) of L_S, the training loss on one class-balanced sample of {curvature_size} "
                    f"training images (the same as notebook 02's), at each method's final model ({dataset}, "
                    f"Dirichlet α={alpha}, {n_clients} clients, {rounds} rounds, tuned hyperparameters; mean over "
                    f"the finished of {seeds_text} ± 95 % interval). "
                    + convergence_line(curv.loc[curv["status"] == "finished", "converged"], eig_tol, eig_max_iter)
                    + ". Collapsed models are grey ✕, not averaged: a model that learned nothing can look flat."
                    + (f" {note}" if note else ""),
            parameters=dict(dataset=dataset, n_clients=n_clients, alpha=alpha, rounds=rounds, methods=methods,
                            curvature_size=curvature_size, eig_tol=eig_tol, eig_max_iter=eig_max_iter,
                            trace_samples=trace_samples, seed=seed, seeds=seeds, analysis_seeds=analysis_seeds,
                            every_seed_methods=every_seed_methods,
                            partition_seed=partition_seed_note),
            data={"per_seed": curv, "summary": curv_summary}, runs=all_runs)
plt.show()

# %% [markdown]
# **What to look at.** The SAM family (FedSAM, MoFedSAM, FedGAMMA, FedSMOO, FedSpeed, FedLESAM, FedNSAM,
# FedVSSAM) and FedSWA/FedMoSWA aim at a small λ_max; the papers report flatter global models together
# with higher accuracy after hundreds of rounds (Caldarola et al. ECCV'22, for instance, show smaller
# top Hessian eigenvalues and wider landscapes for FedSAM and FedASAM with server-side SWA on CIFAR).
# Two cautions: a model that has barely trained (or that collapsed to predicting one class — the grey
# ✕) can also have a small λ_max, so read curvature next to the loss F and the accuracy; and after a
# handful of `ci` rounds the ordering says little — the `cpu` result is at the top of this section. A
# *negative* trace is no bug: away from a minimum the Hessian of a network has many directions of
# negative curvature, and early in training they can outweigh the positive ones; the probe standard
# error says how far a single model's estimate can be trusted (its variance is 2 Σ_{i≠j} H_ij² per probe).

# %% [markdown]
# ### Flatness against accuracy, model by model
# The claim in one picture: every final model as a point, its curvature against its test accuracy, one
# colour and marker per method. A Lanczos run that did not reach `eig_tol` in `eig_max_iter` steps gives a
# λ_max that is only a lower estimate of the top eigenvalue; those points are drawn **hollow**. Collapsed or
# diverged models are grey ✕. A method whose tuned hyperparameters make it another method (FedSWA at ρ = 1,
# α = 1 is FedAvg round for round; `lab.evidence.validity` classifies such degenerate arms, as the claims table
# does) repeats that method's models: its points are left out, so that each distinct model counts once. The
# Spearman rank correlation is computed over the finished distinct models only, for λ_max over those whose
# estimate converged; its two-sided p-value comes
# from `spearman_permutations` random relabellings of the points (the points are treated as
# exchangeable, although seeds of the same method are not independent draws).

# %% [markdown]
# **What you should see**, at full size (the cells after it redraw the figure at this execution's size). The committed
# cpu scatter puts every finished distinct model of the rerun's regime in it, the unconverged λ_max estimates hollow
# and left out of the correlation. Its accuracies are the run records' (the protocol's final metric, `final_metric`),
# not those of the models measured here: this notebook analyses the models themselves, which the records do not keep,
# so each model was trained again for its θ, and on another CPU a retrained run can differ from its record in its
# last bits (the paragraph says how many did, and by how much).

# %%
cpu.show("09_flatness_vs_accuracy")

# %%
def spearman(x, y, permutations, generator):
    """Spearman's rank correlation (Pearson's r of the average ranks) and its two-sided permutation p-value."""
    rx, ry = pd.Series(x).rank().to_numpy(), pd.Series(y).rank().to_numpy()
    if len(rx) < 3 or rx.std() == 0 or ry.std() == 0:
        return float("nan"), float("nan")
    r = float(np.corrcoef(rx, ry)[0, 1])
    null = np.array([np.corrcoef(rx, generator.permutation(ry))[0, 1] for _ in range(permutations)])
    return r, float((1 + np.sum(np.abs(null) >= abs(r) - 1e-12)) / (1 + permutations))


# arms that are another method in disguise (classified from this notebook's own runs, by the claims' rule)
disguised = degenerate_arms({name: runs[name] for name in methods})
for name, why in disguised.items():
    print(f"left out of the correlation, another method in disguise: {why}")
finished = curv[(curv["status"] == "finished") & np.isfinite(curv["test_acc"]) & ~curv["method"].isin(list(disguised))]
lam_pts = finished[finished["converged"] & np.isfinite(finished["lambda_max"])]
tr_pts = finished[np.isfinite(finished["trace"])]
lam_all = finished[np.isfinite(finished["lambda_max"])]  # unconverged included: context only, not the verdict
rank_rows = []
for measure, col, pts in [("lambda_max", "lambda_max", lam_pts), ("trace", "trace", tr_pts),
                          ("lambda_max incl. unconverged", "lambda_max", lam_all)]:
    r, p = spearman(pts[col], 100 * pts["test_acc"], spearman_permutations,
                    numpy_generator(seed, "09-spearman", measure))
    rank_rows.append({"measure": measure, "points": len(pts), "spearman": r, "p_permutation": p})
rank_table = pd.DataFrame(rank_rows)

fig, axes = plt.subplots(1, 2, figsize=(12, 4.4), sharey=True)
for ax, col in zip(axes, ["lambda_max", "trace"]):
    for name in [m for m in methods if m not in disguised]:
        st = line_style(name)
        grp = curv[curv["method"] == name]
        ok, bad = grp[grp["status"] == "finished"], grp[grp["status"] != "finished"]
        solid = ok[ok["converged"]] if col == "lambda_max" else ok
        hollow = ok[~ok["converged"]] if col == "lambda_max" else ok.iloc[:0]
        xerr = solid["trace_stderr"] if col == "trace" else None
        ax.errorbar(solid[col], 100 * solid["test_acc"], xerr=xerr, fmt=st["marker"], ms=7, lw=0.8,
                    color=st["color"], mec="black", mew=0.5)
        ax.plot(hollow[col], 100 * hollow["test_acc"], st["marker"], ms=7, mfc="none", mew=1.4, color=st["color"])
        ax.plot(bad[col], 100 * bad["test_acc"], "x", ms=7, mew=1.6, color="#777777")
    rr = rank_table.set_index("measure").loc[col].to_dict()
    rr["points"] = int(rr["points"])
    head = "top Hessian eigenvalue" if col == "lambda_max" else "Hessian trace (± probe s.e.)"
    ax.set_title(head + (f"\nSpearman {rr['spearman']:.2f} (permutation p = {rr['p_permutation']:.2f}, "
                         f"{rr['points']} points)" if np.isfinite(rr["spearman"])
                         else f"\ntoo few points for a rank correlation ({rr['points']})"))
axes[0].set_xlabel(r"$\lambda_{max}(\nabla^2 F)$")
axes[1].set_xlabel(r"tr $\nabla^2 F$ (Hutchinson)")
axes[0].set_ylabel("final test accuracy (%)")
handles = [plt.Line2D([], [], ls="", marker=line_style(n)["marker"], ms=7, color=method_color(n), mec="black",
                      mew=0.5, label=method_label(n)) for n in methods if n not in disguised]
handles += [plt.Line2D([], [], ls="", marker="o", ms=7, mfc="none", mew=1.4, color="#555555",
                       label="λ_max not converged (hollow; left out of the correlation)"),
            plt.Line2D([], [], ls="", marker="x", ms=7, mew=1.6, color="#777777",
                       label="collapsed / diverged model (left out)")]
fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 5), bbox_to_anchor=(0.5, -0.02))
fig.tight_layout(rect=(0, 0.1 + 0.04 * (len(handles) // 6), 1, 1))
save_figure(fig, "09_flatness_vs_accuracy", notebook="09_sharpness_and_landscapes", profile=profile,
            caption=f"Top Hessian eigenvalue and Hutchinson trace ({trace_samples} probes, ± standard error) of the "
                    f"training loss L_S on one class-balanced sample of {curvature_size} training images against final "
                    f"test accuracy (the run record's, {'; '.join(sorted({v.how for v in final_of.values()}))}), one "
                    f"point per distinct model ({dataset}, Dirichlet α={alpha}, {n_clients} clients, {rounds} rounds, "
                    f"tuned hyperparameters). Hollow: Lanczos did not reach a relative residual of {eig_tol:g} in "
                    f"{eig_max_iter} steps; grey ✕: collapsed or diverged. "
                    + (f"Left out as another method in disguise (lab.evidence.validity): "
                       f"{', '.join(method_label(m) for m in sorted(disguised))}. " if disguised else "")
                    + "Spearman rank correlation over the finished distinct (and, for λ_max, converged) models, with "
                    "a permutation p-value." + (f" {note}" if note else ""),
            parameters=dict(dataset=dataset, n_clients=n_clients, alpha=alpha, rounds=rounds, methods=methods,
                            curvature_size=curvature_size, eig_tol=eig_tol, eig_max_iter=eig_max_iter,
                            degenerate=sorted(disguised),
                            trace_samples=trace_samples, spearman_permutations=spearman_permutations, seed=seed,
                            seeds=seeds, analysis_seeds=analysis_seeds, every_seed_methods=every_seed_methods,
                            partition_seed=partition_seed_note),
            data={"per_seed": curv, "rank_correlation": rank_table}, runs=all_runs)
plt.show()

# %%
print(f"{int((~finished['converged']).sum())} of {len(finished)} finished distinct models have an unconverged "
      f"lambda_max estimate (Lanczos, relative residual > {eig_tol:g} after {eig_max_iter} steps)")
print(rank_table.round(3).to_string(index=False))
for _, rr in rank_table.iterrows():
    what = {"lambda_max": "lambda_max (converged)", "trace": "the trace"}.get(rr["measure"], rr["measure"])
    if not np.isfinite(rr["spearman"]):
        print(f"{what}: too few points ({int(rr['points'])}) for a rank correlation")
    elif rr["p_permutation"] < 0.05:
        print(f"{what}: the rank correlation with accuracy is {rr['spearman']:.2f} (p = {rr['p_permutation']:.2f}): "
              + ("flatter models were more accurate" if rr["spearman"] < 0 else "flatter models were LESS accurate"))
    else:
        print(f"{what}: the rank correlation with accuracy is {rr['spearman']:.2f} (p = {rr['p_permutation']:.2f}): "
              "flatness does not track accuracy at this size (no rank relation distinguishable from chance)")

# %% [markdown]
# The printed lines are the verdict (the row with unconverged λ_max estimates included is context only:
# those are lower estimates of the top eigenvalue). A negative rank correlation distinguishable from chance would
# support "flatter generalises better" across these models; a correlation near zero, or one the
# permutation test cannot tell from chance, says that at this size flatness, as measured here, does not
# track accuracy — a small λ_max next to a low accuracy is the barely-trained model of the caution above.

# %% [markdown]
# ## 4. Between two final models: linear interpolation
# FedAvg and FedVSSAM of the same seed start from the same initial weights and see the same data. If the
# loss along the straight line between their final models has no bump, they ended in the same basin
# (one line per seed; the numbers printed are the first seed's).

# %%
theta_a = runs["fedavg"][0].theta.to(net.theta0())
name_b = "fedvssam" if "fedvssam" in runs else methods[-1]
theta_b = runs[name_b][0].theta.to(theta_a)
lines = [interpolate(F_of[ra.config.seed], ra.theta.to(theta_a), rb.theta.to(theta_a), n=slice_points, extend=0.25)
         for ra, rb in zip(runs["fedavg"], runs[name_b])]  # one line per seed: the same seed's two models
line = lines[0]
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
# is probed along "the same" random direction at its own scale; the slice is $F(\theta + a\,d)$, at every
# seed's model of each method, drawn as the mean over the seeds with a 95 % band. With 16 methods one panel would be unreadable, so the slices are
# split by family (as in notebook 10's table), FedAvg repeated thin and grey in every panel as the
# reference; a collapsed model is dotted with ✕ markers and "(collapsed)" in the legend.

# %% [markdown]
# **What you should see**, at full size (the cells after it redraw the figure at this execution's size). It draws the
# line from FedAvg's to FedVSSAM's final model at every seed of the rerun's regime and the slices of every method
# around its own models:

# %%
cpu.show("09_slices_1d")

# %%
FAMILIES = {"averaging and drift correction": ["fedavg", "fedprox", "scaffold", "feddyn", "fedacg"],
            "local SAM and its corrections": ["fedsam", "mofedsam", "fedgamma", "fedspeed", "fedsmoo",
                                              "fedsmoo_adaptive", "fedlesam"],
            "weight averaging": ["fedswa", "fedmoswa"],
            "global directions for SAM": ["fednsam", "fedvssam"]}
known = {m for ms in FAMILIES.values() for m in ms}
FAMILIES["other"] = [m for m in methods if m not in known]
families = {fam: [m for m in ms if m in methods] for fam, ms in FAMILIES.items()}
families = {fam: ms for fam, ms in families.items() if ms}

directions, slices = {}, {}  # keyed (method, seed)
for name, rs in runs.items():
    for res in rs:
        theta = res.theta.to(net.theta0())
        if not bool(torch.isfinite(theta).all()):
            continue
        key = (name, res.config.seed)
        directions[key] = filter_normalized_direction(net, theta, torch_generator(seed, "09-direction-1"))
        slices[key] = slice_1d(F_of[key[1]], theta, directions[key], span=slice_span, n=slice_points)
run_of = {(name, r.config.seed): r for name, rs in runs.items() for r in rs}


def seed_mean_line(ax, xs, curves, label, **style):
    """The mean over seeds of equal-grid curves (rows) with its 95 % band, labelled with n."""
    arr = np.asarray(curves, dtype=float)
    # losses and λ_max are ≥ 0: a band that would cross 0 is replaced by the seeds themselves
    draw_band(ax, xs, arr.T, label=f"{label} (n={len(arr)})", band_alpha=0.12, bounds=(0.0, np.inf), **style)

n_panels = 1 + len(families)
ncols = min(3, n_panels)
nrows = math.ceil(n_panels / ncols)
fig, axes = plt.subplots(nrows, ncols, figsize=(5.0 * ncols, 3.9 * nrows), squeeze=False)
axes = axes.ravel()
ax = axes[0]
for ln in lines[1:]:
    ax.plot(ln.alphas, ln.losses, color="#999999", lw=0.8)
seed_mean_line(ax, line.alphas, [ln.losses for ln in lines], "mean over seeds", color="#333333", marker="o", ms=3)
ax.legend(loc="upper center", fontsize=7)
for m in (0.0, 1.0):
    ax.axvline(m, color="0.7", lw=0.8, ls="--", zorder=0)
ax.set_xlabel(f"a  (0 = {method_label('fedavg')}, 1 = {method_label(name_b)})")
ax.set_ylabel("F")
ax.set_title("linear interpolation between two final models (same seed)")
slice_axes = axes[1:n_panels]
for ax, (fam, names) in zip(slice_axes, families.items()):
    ref = [k for k in slices if k[0] == "fedavg" and run_of[k].status == "finished"]
    if ref and "fedavg" not in names:
        ax.plot(slices[ref[0]].alphas, np.mean([slices[k].losses for k in ref], axis=0), color="#bbbbbb", lw=1.0,
                label="FedAvg (reference, mean)")
    for name in names:
        keys = [k for k in slices if k[0] == name]
        ok = [k for k in keys if run_of[k].status == "finished"]
        if ok:
            seed_mean_line(ax, slices[ok[0]].alphas, [slices[k].losses for k in ok], styled_label(name), ms=3.5,
                           markevery=max(1, slice_points // 7), **line_style(name))
        for k in keys:
            if k not in ok:  # a collapsed or diverged seed: its own dotted line, never averaged in
                status = run_of[k].status
                ax.plot(slices[k].alphas, slices[k].losses, ms=3.5, markevery=max(1, slice_points // 7),
                        label=f"{styled_label(name, status)}, seed {k[1]}", **line_style(name, status))
    ax.axvline(0.0, color="0.7", lw=0.8, ls="--", zorder=0)
    ax.set_title(fam)
    ax.set_xlabel("coefficient a along the filter-normalised direction d")
    ax.set_ylabel(r"$F(\theta + a\,d)$")
    ax.legend(loc="upper center", fontsize=7, ncol=2)
y_lo = min(float(np.nanmin(sl.losses)) for sl in slices.values())
y_hi = max(float(np.nanmax(sl.losses)) for sl in slices.values())
for ax in slice_axes:  # one scale for every family, headroom for the legend
    ax.set_ylim(y_lo - 0.05 * (y_hi - y_lo), y_hi + 0.45 * (y_hi - y_lo))
for ax in axes[n_panels:]:
    ax.set_visible(False)
fig.tight_layout()
slice_rows = [{"method": n, "seed": k, "status": run_of[(n, k)].status, "kind": "slice",
               "coefficient": float(a), "F": float(v)} for (n, k), sl in slices.items() for a, v in zip(sl.alphas, sl.losses)]
slice_rows += [{"method": f"fedavg->{name_b}", "seed": r.config.seed, "status": "", "kind": "interpolation",
                "coefficient": float(a), "F": float(v)} for r, ln in zip(runs[name_b], lines)
               for a, v in zip(ln.alphas, ln.losses)]
all_slice_runs = [r for rs in runs.values() for r in rs]
note = status_note(all_slice_runs)
save_figure(fig, "09_slices_1d", notebook="09_sharpness_and_landscapes", profile=profile,
            caption=f"First panel: F along the line between FedAvg's and {method_label(name_b)}'s final models. Other "
                    f"panels, one per family: F along one filter-normalised random direction around each method's "
                    f"final model ({dataset}, Dirichlet α={alpha}, tuned hyperparameters); every curve is the mean "
                    f"over the finished of {seeds_text} with a 95 % band, FedAvg grey as the reference; "
                    "collapsed models dotted with ✕, never averaged." + (f" {note}" if note else ""),
            parameters=dict(dataset=dataset, n_clients=n_clients, alpha=alpha, rounds=rounds, methods=methods,
                            slice_points=slice_points, slice_span=slice_span, seed=seed, seeds=seeds,
                            analysis_seeds=analysis_seeds, every_seed_methods=every_seed_methods,
                            partition_seed=partition_seed_note),
            data=pd.DataFrame(slice_rows), runs=all_slice_runs)
plt.show()

# %% [markdown]
# Two facts about these slices are exact and checked: the centre of every slice (a = 0) is F at the
# model itself, and filter normalisation gives every filter of d (a slice `W[f]` of a weight tensor
# with ≥ 2 dimensions) the norm of the same filter of θ.

# %%
# NBVAL_CHECK_OUTPUT
with torch.no_grad():
    centre_ok = all(float(sl.losses[slice_points // 2]) == float(F_of[k[1]](run_of[k].theta.to(net.theta0())))
                    for k, sl in slices.items())
print("the slice centre equals the loss at θ:", centre_ok)
worst = 0.0
for key, d in directions.items():
    theta_parts = net.spec.unflatten(run_of[key].theta.to(net.theta0()))
    for (key, t_part), d_part in zip(theta_parts.items(), net.spec.unflatten(d).values()):
        if t_part.ndim >= 2:
            t_norm = torch.linalg.vector_norm(t_part.reshape(t_part.shape[0], -1), dim=1)
            d_norm = torch.linalg.vector_norm(d_part.reshape(d_part.shape[0], -1), dim=1)
            worst = max(worst, float(((d_norm - t_norm).abs() / t_norm.clamp_min(1e-12)).max()))
print("filter normalisation preserves per-filter norms:", worst < 1e-4)

# %% [markdown]
# ## 6. Two-dimensional landscapes around two models
# $F(\theta + a\,d_1 + b\,d_2)$ on a `grid_points` × `grid_points` grid, with two independent
# filter-normalised directions $d_1, d_2$ (coefficients a and b — not to be confused with the Dirichlet
# α of the split), around FedAvg's and FedVSSAM's final models, one contour per seed (a landscape is a
# picture of one model, so the seeds are drawn side by side, not averaged). Contours show the basin's
# shape from above (the star is the model); the last column shows the first seed's numbers in 3-D. The
# colour scale is shared, so a wider dark region means a flatter neighbourhood.

# %% [markdown]
# **What you should see**, at full size (the cells after it redraw the figure at this execution's size). It draws
# FedAvg's and FedVSSAM's at every seed of the rerun's regime:

# %%
cpu.show("09_landscape_2d")

# %%
pair = ["fedavg", name_b]
landscapes = {}  # keyed (method, seed)
for name in pair:
    for res in runs[name]:
        theta = res.theta.to(net.theta0())
        if not bool(torch.isfinite(theta).all()):
            continue
        d1 = filter_normalized_direction(net, theta, torch_generator(seed, "09-direction-1"))
        d2 = filter_normalized_direction(net, theta, torch_generator(seed, "09-direction-2"))
        landscapes[(name, res.config.seed)] = slice_2d(F_of[res.config.seed], theta, d1, d2, span=slice_span,
                                                       n=grid_points, progress=False)
low = min(float(s.losses.min()) for s in landscapes.values())
high = max(float(s.losses.max()) for s in landscapes.values())
levels = MaxNLocator(nbins=14).tick_values(np.log10(low), np.log10(high))  # round log10 levels

ncols = len(seeds) + 1  # one contour per seed, then the first seed's surface
fig = plt.figure(figsize=(4.6 * ncols, 8.8))
for j, name in enumerate(pair):
    for i, s_ in enumerate(seeds):
        ax = fig.add_subplot(2, ncols, j * ncols + i + 1)
        if (name, s_) not in landscapes:
            ax.set_visible(False)
            continue
        plot_contour(ax, landscapes[(name, s_)], levels=levels, log=True)
        ax.set_xlabel("coefficient along direction 1")
        ax.set_ylabel("coefficient along direction 2")
        ax.xaxis.set_major_locator(MaxNLocator(5))
        ax.yaxis.set_major_locator(MaxNLocator(5))
        status = run_of[(name, s_)].status
        ax.set_title(f"{styled_label(name, status)}, seed {s_}: log10 F")
    if (name, seeds[0]) not in landscapes:
        continue
    ax3d = fig.add_subplot(2, ncols, j * ncols + ncols, projection="3d")
    plot_surface(ax3d, landscapes[(name, seeds[0])], log=True, vmin=levels[0], vmax=levels[-1])
    ax3d.set_zlim(levels[0], levels[-1])
    ax3d.set_xlabel("direction 1")
    ax3d.set_ylabel("direction 2")
    ax3d.set_zlabel("log10 F")
    for axis in (ax3d.xaxis, ax3d.yaxis, ax3d.zaxis):
        axis.set_major_locator(MaxNLocator(4))
    ax3d.zaxis.set_major_formatter(FormatStrFormatter("%.2f"))
    ax3d.set_title(f"{method_label(name)}, seed {seeds[0]} (surface)")
fig.tight_layout()
grid_rows = [{"method": n, "seed": k, "status": run_of[(n, k)].status, "coef_1": float(a), "coef_2": float(b),
              "F": float(s.losses[i, j])} for (n, k), s in landscapes.items()
             for i, b in enumerate(s.betas) for j, a in enumerate(s.alphas)]
save_figure(fig, "09_landscape_2d", notebook="09_sharpness_and_landscapes", profile=profile,
            caption=f"log10 of F on a plane of two filter-normalised directions around FedAvg's and "
                    f"{method_label(name_b)}'s final models: contours at each of {len({k for _, k in landscapes})} "
                    f"seed(s) on one shared "
                    f"colour scale, and the first seed's as a surface ({dataset}, Dirichlet α={alpha}, tuned "
                    "hyperparameters).",
            parameters=dict(dataset=dataset, n_clients=n_clients, alpha=alpha, rounds=rounds, grid_points=grid_points,
                            slice_span=slice_span, seed=seed, seeds=seeds, partition_seed=partition_seed_note),
            data=pd.DataFrame(grid_rows), runs=[r for n in pair for r in runs[n]])
plt.show()

# %% [markdown]
# ## 7. Sharpness over training
# The tracked runs measured λ_max of the global model at round 0 (the shared initial model), every
# `track_every` rounds and at the end, on their own fixed sample (`max_clients` clients, seeded as in
# `track_sharpness`), for every seed. A typical picture in centralised training is *progressive
# sharpening* — λ_max grows early in training (Cohen et al. ICLR'21, "edge of stability"); SAM is meant
# to hold it down.

# %% [markdown]
# **What you should see**, at full size (the cells after it redraw the figure at this execution's size). It tracks
# FedAvg and FedSAM in the rerun's regime on two seeds only (tracking replays each run): descriptive, no claim is
# judged on it.

# %%
cpu.show("09_sharpness_over_training")

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
track_rows, track_runs = [], []
for name in track_methods:
    results = [run_of[(name, s_)] if (name, s_) in run_of else
               run_or_load(seed_config(name, s_)) for s_ in seeds[:track_seeds]]
    track_runs += results
    for res in results:
        m = tracked[(name, res.config.seed)].dropna(subset=["lambda_1"])
        track_rows += [{"method": name, "seed": res.config.seed, "status": res.status, "round": int(r),
                        "lambda_max": float(v)} for r, v in zip(m["round"], m["lambda_1"])]
    table = pd.DataFrame([r for r in track_rows if r["method"] == name])
    style = line_style(name)
    ok = table[table["status"] == "finished"]
    if len(ok):
        seed_mean_line(ax1, sorted(ok["round"].unique()),
                       ok.pivot(index="seed", columns="round", values="lambda_max").to_numpy(), styled_label(name),
                       **style)
    for k, bad in table[table["status"] != "finished"].groupby("seed"):
        ax1.plot(bad["round"], bad["lambda_max"], label=f"{styled_label(name, bad['status'].iloc[0])}, seed {k}",
                 **line_style(name, bad["status"].iloc[0]))
    draw_seeds(ax2, results, "test_acc", label=method_label(name),
               style=(style["color"], style["ls"], style["marker"]), scale=100.0)
ax1.set_xlabel("round")
ax1.set_ylabel(r"$\lambda_{max}$ of the global model")
ax1.set_title(f"sharpness over training ({len(seeds[:track_seeds])} seed(s))")
ax1.legend()
ax2.set_xlabel("round")
ax2.set_ylabel("test accuracy (%)")
ax2.set_title("accuracy of the same runs")
round_ticks(ax1, pd.DataFrame(track_rows)["round"] if track_rows else [])
round_ticks(ax2, [r for res in track_runs for r in res.metrics.dropna(subset=["test_acc"])["round"]])
fig.tight_layout()
save_figure(fig, "09_sharpness_over_training", notebook="09_sharpness_and_landscapes", profile=profile,
            caption=f"Top Hessian eigenvalue of the global model every {track_every} rounds, and test accuracy, for "
                    f"{', '.join(method_label(n) for n in track_methods)} ({dataset}, Dirichlet α={alpha}, tuned "
                    f"hyperparameters; mean over the finished of {len(seeds[:track_seeds])} seed(s) with a 95 % band).",
            parameters=dict(dataset=dataset, n_clients=n_clients, alpha=alpha, rounds=rounds,
                            track_methods=track_methods, track_every=track_every, eig_iters=track_iters, seed=seed,
                            seeds=seeds[:track_seeds], partition_seed=partition_seed_note),
            data=pd.DataFrame(track_rows), runs=track_runs)
plt.show()

# %% [markdown]
# **Honest caveat.** In the `ci` size a few rounds on 2 000 images with F measured on a couple of hundred
# samples cannot separate the methods: the numbers above are a smoke test of the pipeline, and nothing
# but exact facts is checked. The `cpu` profile analyses all 16 methods in the rerun's regime (the MLP on
# 10 000 images; FedAvg, FedSAM and FedVSSAM at six seeds, the others at three): its figures and what they show are beside each section above; the papers'
# own landscape figures are for CIFAR-10/100 with ResNet-18 after hundreds of rounds (`paper` profile).
#
# ## Summary
# * λ_max and the Hessian trace summarise curvature in one number each; slices and interpolations show
#   the neighbourhood they summarise. Filter normalisation makes slices of different models comparable.
# * Whether a method's global model is flatter is an empirical question per setting; the notebooks 02
#   and 03 explain why local sharpness-awareness need not make the *global* model flat under
#   heterogeneity.
# * Whether flatter also means more accurate is the scatter of §3: a rank correlation over the
#   models, with unconverged λ_max estimates marked and left out; the printed verdict says whether it
#   can be told from chance at this size.
#
# **And from the cpu run** (the committed data, read in sections 3, 5, 6 and 7):

# %%
# NBVAL_CHECK_OUTPUT
cpu.summary()

# %% [markdown]
# ## Exercises
#
# Predict first, then run. Each runs in a few minutes at the `ci` size.
#
# 1. **Two more methods.** Add `"fednsam"` and `"fedsmoo"` to `methods`. Before running, predict whether the
#    λ_max, trace and F of the five methods already there change. Then, which of the two new models has the
#    smaller λ_max, and can the curvature table settle it (look at its `converged` column)?
#
# <details>
# <summary>Solution</summary>
#
# The five rows stay exactly as they were. Each run depends only on its own configuration (it is loaded from
# `runs/` when already trained), F and the curvature sample S are fixed (S by `CURVATURE_SEED`), the same samples
# for every model, and every model is probed from the same Lanczos start and the same trace probes (generator
# seeds `"curvature-lanczos"`, `"09-trace"`). Only the rank correlations of §3 change, because they now have more
# points.
#
# The table cannot always settle the second question. A Lanczos run that stopped at `eig_max_iter` steps before
# its residual met `eig_tol` gives only a lower estimate of the top eigenvalue; if it is the smaller of the two,
# the comparison stays open until more steps converge it (exercise 2). Even converged, one seed after a few rounds
# ranks two models, not two methods.
# The cpu figure beside §3 measures all the methods over several seeds, and its claim leaves the unconverged
# estimates out.
#
# </details>
#
# 2. **Longer estimates.** Double `eig_max_iter` and quadruple `trace_samples`. Which λ_max estimates can change,
#    and in which direction? By how much does each trace's probe standard error shrink (1/√probes predicts a
#    half)?
#
# <details>
# <summary>Solution</summary>
#
# A λ_max that had converged does not move at all: Lanczos starts from the same vector and stops at the same
# step, the first at which its residual met `eig_tol`. Only the unconverged ones move, and only up: the largest
# Ritz value of a Krylov space never decreases as the space grows (the Cauchy interlacing theorem: T_m sits inside
# T_{m+1}), and it never exceeds the top eigenvalue. This is why the flatness-against-accuracy figure draws them
# hollow and leaves them out of the correlation.
#
# The probe standard error is the sample standard deviation of the $v^\top H v$ over √probes. Four times the
# probes halves the √probes part, but the standard deviation is itself estimated, from 8 probes at first. In
# the `ci` run the standard errors shrank to between about a half and two thirds of their values. The
# trace estimates moved too, each by up to about one and a half of its old standard error: that is what the
# standard error of 8 probes says about them. The 32 probes begin with the same 8, since `hessian_trace` draws
# them one at a time from the same generator on a CPU, so the new estimate is the old one with 24 more probes.
#
# </details>
#
# 3. **A barrier?** In the 1-D interpolation between FedAvg's and FedVSSAM's final models (§4), is there a
#    barrier, a point on the line above both ends? Guess first. Can the 2-D landscapes of §6 tell you?
#
# <details>
# <summary>Solution</summary>
#
# No barrier at this size. The printed "highest point in between" is the higher of the two ends: the loss
# goes from one model to the other without a bump, so they sit in the same basin. We checked it at
# `seed` = 0, 1 and 2. Both runs start from the same initial weights and see the same data in the same
# order, and a few rounds of small steps take them only a short way apart. Small networks trained for a short
# time from one initialisation are typically linearly connected (Frankle et al., ICML'20, "linear mode
# connectivity"). A barrier needs models that have drifted into different basins, as runs from different
# initialisations can.
#
# The 2-D landscapes cannot settle it. Each is a slice through one model along two random filter-normalised
# directions, and the other model does not lie in that plane; a wide bowl around both models is compatible
# with a ridge between them. Only the straight line, or a path, between the two models answers the question.
#
# </details>

# %% [markdown]
# ## What the cpu run shows
# This section is generated from the committed cpu-profile data — the figures and their data in
# `figures/`, the run records in `figures/records/` and the claims in `figures/claims.yaml` — whatever
# profile this notebook was run with: it lists the committed cpu figures of this notebook with the
# evidence behind them, and the flatness claim with fedlab's verdict and numbers (λ_max, mean ± 95 %
# interval over the seeds, from `figures/09_curvature.csv`) and, where it does not hold, its likely reason.

# %%
# NBVAL_CHECK_OUTPUT
from lab.course import cpu_report

report = cpu_report("09_sharpness_and_landscapes")
print(report.text())

# %%
report.show_figures(skip=("09_curvature", "09_flatness_vs_accuracy", "09_slices_1d", "09_landscape_2d",
                          "09_sharpness_over_training"))  # shown beside their paragraphs above

# %% [markdown]
# ## How this evidence was made
#
# <!-- how-made: written by `python -m lab.tools.how_made --write` from the parameters; edit those -->
# This notebook runs at three sizes, chosen by parameters and never by editing its code:
#
# | size | parameters | federation | what it is for |
# |---|---|---|---|
# | `ci` | the parameters cell's defaults, what the outputs above show | Fashion-MNIST, the cnn model, 2,000 training images, 10 clients, 30% per round, Dirichlet α = 0.1, 8 rounds of K = 5 local steps at η = 0.05, 1 seed | a smoke test: every figure it draws is marked *smoke test* and goes to the scratch folder, never cited; its numbers say the code runs, not which method wins |
# | `cpu` | `notebooks/params/09_sharpness_and_landscapes.cpu.yaml` over the defaults | Fashion-MNIST, the mlp model, 10,000 training images, 100 clients, 10% per round, Dirichlet α = 0.1, 100 rounds of K = 50 local steps at η = 0.1, 6 seeds | the evidence: its 5 figures, shown beside the text and listed above with what stands behind each |
# | `paper` | `notebooks/params/09_sharpness_and_landscapes.paper.yaml` over the defaults | CIFAR-10, the resnet18_gn model, all training images, 100 clients, 10% per round, Dirichlet α = 0.1, 800 rounds of K = 50 local steps at η = 0.1, 3 seeds, on a GPU | closer to the papers' scale; not run in this repository |
#
# Run a size with `papermill notebooks/09_sharpness_and_landscapes.ipynb out.ipynb -f notebooks/params/09_sharpness_and_landscapes.cpu.yaml` (the JSON file beside each figure holds the exact command that made it); the words are explained once, on the running page named at the top.
# <!-- how-made: end -->
