"""The lessons of notebook 04 (the SAM baselines): the paragraphs that read its committed cpu figures.

Each reader quotes the committed data of one figure and asserts every direction its paragraph states (see
:mod:`lab.lessons`); ``tests/test_cpu_lessons_04.py`` recomputes the numbers from the CSVs and records.
"""
from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from lab.evidence.collapse import chance_threshold
from lab.evidence.facts import DRAWN_PER_SEED, partition_rule
from lab.evidence.protocol import K5_TUNING_DIR, tuning_dir
from lab.evidence.records import figure_runs
from lab.lessons import Context, Lesson, reads, summarises
from lab.style import method_label

SAM_FAMILY = ("fedsam", "mofedsam", "fedgamma", "fedspeed", "fedlesam")


def k5_sweeps() -> dict[str, tuple[Any, dict[str, Any]]]:
    """The K = 5 profile's committed FedSAM ρ sweeps, per architecture: the table and its sidecar."""
    out = {}
    for arch in ("cnn", "lenet5"):
        stem = K5_TUNING_DIR / f"04_rho_sweep_fedsam_{arch}"
        out[arch] = (pd.read_csv(stem.with_suffix(".csv")), json.loads(stem.with_suffix(".json").read_text()))
    return out


def paired_cpu(table: Any, left: str, right: str) -> dict[str, Any]:
    """left − right over the seeds both ran: their number, mean, smallest, largest and how many are > 0."""
    diff = (table[left] - table[right]).dropna()
    return {"seeds": int(len(diff)), "mean": float(diff.mean()), "min": float(diff.min()), "max": float(diff.max()),
            "positive": int((diff > 0).sum())}


@reads("04_rho_sweep")
def rho(ctx: Context) -> Lesson:
    sweeps = k5_sweeps()
    grid_dir = tuning_dir() / "dirichlet-0.1"
    threshold = chance_threshold(10)
    rho_runs = ctx.parameters("04_sam_curves")["algorithm_params"]  # what the six-seed runs of §2 ran with
    rho_tab = ctx.table("04_rho_sweep")
    rho_les: dict = {}
    for m in SAM_FAMILY:
        g_m = rho_tab[rho_tab["panel"] == f"grid_{m}"]
        if "lam" in rho_runs[m]:  # FedSpeed: its ρ grid at the λ it runs with
            g_m = g_m[g_m["lam"] == rho_runs[m]["lam"]]
        top = g_m.loc[g_m["score"].idxmax()]  # ties: the first point in grid order, as the tuning chooses
        zero = float(g_m.loc[g_m["rho"] == 0.0, "score"].iloc[0])
        rho_les[m] = {"best_rho": float(top["rho"]), "grid_max": float(g_m["rho"].max()), "best": 100 * float(top["score"]),
                      "at_zero": 100 * zero, "gain": 100 * (float(top["score"]) - zero)}
    fs_grid = rho_tab[rho_tab["panel"] == "grid_fedsam"]
    k5_cnn = rho_tab[rho_tab["panel"] == "sweep_cnn"].set_index("rho")["score"]
    k5_base, k5_protocol = sweeps["cnn"][1]["base"], sweeps["cnn"][1]["protocol"]
    tune_protocol = json.loads((grid_dir / "fedsam.json").read_text())["protocol"]  # the rerun's tuning
    rho_l = {
        "methods": rho_les, "fedsam_paper_rho": 100 * float(fs_grid.loc[fs_grid["rho"] == 0.1, "score"].iloc[0]),
        "k5_cnn_zero": 100 * float(k5_cnn[0.0]), "k5_cnn_paper_rho": 100 * float(k5_cnn[0.1])}
    gainer = max(rho_les, key=lambda m: rho_les[m]["gain"])
    assert all(rho_les[m]["best_rho"] == rho_runs[m]["rho"] for m in SAM_FAMILY), "the runs use each grid's best radius"
    assert rho_les["fedlesam"]["best_rho"] == 0.0, "the paragraph says FedLESAM's tuning chose ρ = 0"
    assert all(rho_les[m]["best_rho"] > 0 for m in SAM_FAMILY if m != "fedlesam"), "the others' optimum is above 0"
    assert 0 < rho_les["fedsam"]["best_rho"] < rho_les["fedsam"]["grid_max"], "FedSAM's optimum is inside its grid"
    assert max(v["gain"] for v in rho_les.values()) < 2.0, "the paragraph calls every gain over ρ = 0 small"
    assert rho_l["fedsam_paper_rho"] >= rho_les["fedsam"]["at_zero"] > 100 * threshold, "ρ = 0.1 does not collapse"
    assert rho_l["k5_cnn_paper_rho"] < rho_l["k5_cnn_zero"] - 30, "the K = 5 sweep dropped at ρ = 0.1"
    # the claim "FedSAM at ρ = 0.1 < FedAvg" as the claims table reads it (python -m lab claims --write): its runs are
    # notebook 10's, so whether it has data is that table's to say, not this paragraph's
    paper_rho = pd.read_csv(ctx.report.figures_dir / "claims_cpu.csv").query(
        "id == 'fedsam_at_paper_radius_below_fedavg_dir01' and comparison == 0").iloc[0]
    rho_l["paper_rho_claim"] = {"verdict": str(paper_rho["paired_verdict"]), "n": int(paper_rho["n"]) if
                                pd.notna(paper_rho["n"]) else 0, "mean": float(paper_rho["mean"]),
                                "half_width": float(paper_rho["half_width"])}
    prc = rho_l["paper_rho_claim"]
    assert (prc["n"] > 0) == (prc["verdict"] != "no data"), "the table has data for the claim exactly when it has seeds"
    paper_rho_text = ("has no data yet" if prc["n"] == 0 else
                      f"is tested on notebook 10's runs of FedSAM at ρ = 0.1, {prc['n']} paired seeds: FedSAM at ρ = 0.1 − "
                      f"FedAvg = {prc['mean']:+.2f} ± {prc['half_width']:.2f} points, verdict **{prc['verdict']}** in the "
                      f"claims table")
    fs_l, others = rho_les["fedsam"], [m for m in SAM_FAMILY if m not in ("fedsam", "fedlesam")]
    text = (
        f"**Where the optimum lies.** In the rerun's tuning (seed {tune_protocol['seed']}, {tune_protocol['rounds']} rounds, "
        f"{tune_protocol['validation_size']} held-out validation samples) SAM's radius no longer tunes to zero: "
        f"FedSAM's best radius is ρ = {fs_l['best_rho']:g}, inside its grid (0 to {fs_l['grid_max']:g}), and "
        + ", ".join(f"{method_label(m)}'s ρ = {rho_les[m]['best_rho']:g}" for m in others)
        + f". FedLESAM's is ρ = {rho_les['fedlesam']['best_rho']:g}: its six-seed runs below *are* FedAvg's. "
        f"**How much the best radius gains over ρ = 0 is small**: FedSAM {fs_l['gain']:+.2f} points "
        f"({fs_l['at_zero']:.2f} → {fs_l['best']:.2f} %), "
        + ", ".join(f"{method_label(m)} {rho_les[m]['gain']:+.2f}" for m in others)
        + f"; the most is {method_label(gainer)}'s. These are single runs, not paired over seeds; §3's cpu paragraph "
        f"gives FedSAM's gain over FedAvg (FedSAM at ρ = 0, §6) on six paired seeds. At the papers' ρ = 0.1 FedSAM "
        f"scores {rho_l['fedsam_paper_rho']:.2f} %, not below ρ = 0: the collapse of the left panel does not recur. "
        f"That panel is the K = 5 profile's ({k5_protocol['rounds']} rounds of K = {k5_base['local_steps']}, the "
        f"{k5_base['model']} model), where ρ = 0.1 took FedSAM from {rho_l['k5_cnn_zero']:.1f} % to "
        f"{rho_l['k5_cnn_paper_rho']:.1f} %. The six-seed runs of this notebook do not include FedSAM at ρ = 0.1; the "
        f"claim \"FedSAM at ρ = 0.1 < FedAvg\" {paper_rho_text}.")
    return Lesson("rho", rho_l, text)



@reads("04_sam_curves")
def curves(ctx: Context) -> Lesson:
    rho_runs = ctx.parameters("04_sam_curves")["algorithm_params"]
    # the final accuracy of the claims table (lab.evidence.protocol.final_metric): the mean of the last 20 % of rounds
    fin_cpu = ctx.seed_accuracies("04_sam_curves")  # seeds × methods, %
    assert partition_rule(r.config for r in figure_runs("04_sam_curves")) == DRAWN_PER_SEED, \
        "the paragraph above says each seed of the committed runs has its own partition"

    cv_pairs = {f"{a}-{b}": paired_cpu(fin_cpu, a, b) for a, b in (
        ("fedsam", "fedavg"), ("mofedsam", "fedsam"), ("scaffold", "fedavg"), ("feddyn", "fedavg"),
        ("fedgamma", "scaffold"), ("fedspeed", "feddyn"))}
    numbers = {"k": len(fin_cpu.attrs["final_rounds"]), "pairs": cv_pairs}
    sam, mo, sca, dyn, gam, spd = cv_pairs.values()
    assert sam["positive"] == sam["seeds"] == 6, "FedSAM above FedAvg in every one of six seeds"
    assert mo["positive"] == 0 and mo["seeds"] == 6, "MoFedSAM below FedSAM in every one of six seeds"
    assert sca["positive"] == sca["seeds"] and dyn["positive"] == dyn["seeds"], "both drift corrections: every seed"
    assert sam["mean"] < min(sca["mean"], dyn["mean"]), "SAM gains less than either drift correction"
    assert gam["positive"] < gam["seeds"] and spd["positive"] < spd["seeds"], "on top of a correction: not every seed"
    assert max(abs(gam["mean"]), abs(spd["mean"])) < sam["mean"], "on top of a correction SAM adds less than on FedAvg"
    text = (
        f"Final accuracy as in the claims table (the mean of the last {len(fin_cpu.attrs['final_rounds'])} evaluations), paired by seed. "
        f"**SAM helps FedAvg a little, in every seed**: FedSAM is {sam['mean']:+.2f} points above FedAvg "
        f"({sam['positive']} of {sam['seeds']} seeds, from {sam['min']:+.2f} to {sam['max']:+.2f}). This is the paired gain "
        f"of the tuned radius over ρ = 0 (FedSAM at ρ = 0 is FedAvg, §6), and the opposite sign of the FedSWA paper's "
        f"FedSAM < FedAvg. A drift correction gains more, in every seed: SCAFFOLD {sca['mean']:+.2f}, FedDyn "
        f"{dyn['mean']:+.2f} points over FedAvg. On top of one, SAM adds less than on FedAvg and not in every seed: "
        f"FedGAMMA − SCAFFOLD {gam['mean']:+.2f} ({gam['positive']} of {gam['seeds']} seeds positive), FedSpeed − FedDyn "
        f"{spd['mean']:+.2f} ({spd['positive']} of {spd['seeds']}). **MoFedSAM is below FedSAM in every seed**, by "
        f"{-mo['mean']:.2f} points on average (from {-mo['max']:.2f} to {-mo['min']:.2f}): the FedSWA paper's MoFedSAM > FedSAM "
        f"(CIFAR-100, in the list above) is reversed here, with MoFedSAM's α = {rho_runs['mofedsam']['alpha']:g} fixed "
        f"by this notebook and only its radius tuned.")
    return Lesson("curves", numbers, text)



@reads("04_sam_cost_accuracy")
def cost(ctx: Context) -> Lesson:
    fin_cpu = ctx.seed_accuracies("04_sam_curves")
    rho_les = ctx.earlier["rho"]["methods"]  # §1b's lesson, shown before
    cost_seed = ctx.table("04_sam_cost_accuracy", "per_seed")
    cost_mean = ctx.table("04_sam_cost_accuracy", "mean").set_index("method")
    last_cpu = cost_seed.pivot(index="seed", columns="method", values="final_acc_pct")
    # the figure plots the claims table's final metric: the same numbers as §3's (%.6g in the CSV: half a unit of its
    # sixth digit, < 5e-4 points below 100 %)
    assert np.allclose(last_cpu[fin_cpu.columns].loc[fin_cpu.index], fin_cpu, atol=5e-4, equal_nan=True), \
        "04_sam_cost_accuracy and 04_sam_curves give the same final accuracies"
    cheap = cost_mean[(cost_mean["grads_per_round"] == cost_mean["grads_per_round"].min())
                      & (cost_mean["uplink_x_fedavg"] == 1)]
    dear = cost_mean[cost_mean["grads_per_round"] > cost_mean["grads_per_round"].min()]
    cheap_best, dear_best = str(cheap["mean_pct"].idxmax()), str(dear["mean_pct"].idxmax())
    # FedLESAM at ρ = 0 is FedAvg bit for bit within one process (§6); its records and FedAvg's come from separate
    # trainings, so per seed: the first round whose accuracy differs (None: none does)
    curves_cpu = ctx.table("04_sam_curves", "test_acc_pct_per_seed").pivot_table(
        index=["seed", "round"], columns="method", values="test_acc_pct")
    lesam_departs = {int(sd): next((int(r) for r, a, b in zip(g.index.get_level_values("round"), g["fedlesam"], g["fedavg"])
                                    if a != b), None) for sd, g in curves_cpu[["fedlesam", "fedavg"]].dropna().groupby(level="seed")}
    lesam_same = {"seeds": len(lesam_departs), "identical": sum(v is None for v in lesam_departs.values()),
                  "departs": {sd: r for sd, r in lesam_departs.items() if r is not None}}
    cost_l = {
        "grads": {"fedavg": float(cost_mean.loc["fedavg", "grads_per_round"]),
                  "fedsam": float(cost_mean.loc["fedsam", "grads_per_round"])},
        "mean_pct": {m: float(cost_mean.loc[m, "mean_pct"]) for m in cost_mean.index},
        "n": {m: int(cost_mean.loc[m, "n"]) for m in cost_mean.index},
        "cheap_best": cheap_best, "dear_best": dear_best,
        "cheap_best_vs_fedavg": paired_cpu(last_cpu, cheap_best, "fedavg"),
        "fedsam_vs_fedavg": paired_cpu(last_cpu, "fedsam", "fedavg"),
        "dear_best_vs_cheap_best": paired_cpu(last_cpu, dear_best, cheap_best),
        "fedlesam_is_fedavg": lesam_same,
        "fedlesam_vs_fedsam": paired_cpu(last_cpu, "fedlesam", "fedsam")}
    c_cheap, c_sam, c_dear = (cost_l[k] for k in ("cheap_best_vs_fedavg", "fedsam_vs_fedavg", "dear_best_vs_cheap_best"))
    assert cost_l["grads"]["fedsam"] == 2 * cost_l["grads"]["fedavg"], "SAM doubles the gradient work"
    assert c_cheap["positive"] == c_cheap["seeds"] and c_sam["positive"] == c_sam["seeds"], "both above FedAvg, every seed"
    assert c_sam["mean"] < c_cheap["mean"], "SAM's doubled work buys less than the best method at FedAvg's cost"
    assert 0 < c_dear["positive"] < c_dear["seeds"], "the best at twice the work: not above in every seed"
    assert rho_les["fedlesam"]["best_rho"] == 0.0, "FedLESAM ran as FedAvg"
    assert lesam_same["identical"] >= lesam_same["seeds"] - 1, "FedLESAM's curve is FedAvg's in all seeds but at most one"
    assert cost_l["fedlesam_vs_fedsam"]["positive"] == 0
    mp = cost_l["mean_pct"]
    text = (
        f"At FedAvg's cost ({cost_l['grads']['fedavg']:.0f} gradient evaluations per client per round, FedAvg's uplink) "
        f"the most accurate method is {method_label(cheap_best)}, {mp[cheap_best]:.1f} % against FedAvg's "
        f"{mp['fedavg']:.1f} %, above it in {c_cheap['positive']} of {c_cheap['seeds']} seeds. **SAM's doubled gradient "
        f"work ({cost_l['grads']['fedsam']:.0f} per round) buys FedSAM {c_sam['mean']:+.2f} points** over FedAvg "
        f"({c_sam['positive']} of {c_sam['seeds']} seeds above). The most accurate method at that doubled cost, "
        f"{method_label(dear_best)} ({mp[dear_best]:.1f} %, {cost_l['n'][dear_best]} seeds), is "
        f"{c_dear['mean']:+.2f} points from {method_label(cheap_best)} on the seeds both ran, above it in only "
        f"{c_dear['positive']} of {c_dear['seeds']}. FedLESAM's tuning chose ρ = 0 (§1b), so it ran as FedAvg: its "
        f"accuracy curve is FedAvg's, digit for digit, in {lesam_same['identical']} of {lesam_same['seeds']} seeds"
        + "".join(f" (seed {sd}: from round {r} on; the two records come from separate trainings, and §6 checks the identity within one process)"
                  for sd, r in lesam_same["departs"].items())
        + f", and the claim \"FedLESAM ≥ FedSAM at half the gradient cost\" compares "
        f"FedAvg with FedSAM: {cost_l['fedlesam_vs_fedsam']['mean']:+.2f} points, below FedSAM in every seed.")
    return Lesson("cost", cost_l, text)



@reads("04_flatness_distance")
def flatness(ctx: Context) -> Lesson:
    fin_cpu = ctx.seed_accuracies("04_sam_curves")
    rho_runs = ctx.parameters("04_sam_curves")["algorithm_params"]
    # the claims table's Δ_D of a run: its mean over the last quarter of the rounds
    dd_cpu = ctx.table("04_flatness_distance", "flatness_distance_per_seed")
    dd_rounds = int(dd_cpu["round"].max())
    dd_from = dd_rounds - math.ceil(dd_rounds / 4) + 1
    dd_tail = dd_cpu[dd_cpu["round"] >= dd_from].groupby(["seed", "method"])["flatness_distance"].mean().unstack()

    def dd_ratio(left, right):
        """Δ_D of left ÷ Δ_D of right per seed: the mean ratio, the seeds, how many are above 1."""
        ratio = (dd_tail[left] / dd_tail[right]).dropna()
        return {"seeds": int(len(ratio)), "ratio": float(ratio.mean()), "above": int((ratio > 1).sum())}

    dd_l = {
        "from": dd_from, "to": dd_rounds,
        "vs_fedavg": {m: dd_ratio(m, "fedavg") for m in ("feddyn", "mofedsam", "scaffold", "fedgamma")},
        "sam_added": {f"{a}-{b}": dd_ratio(a, b) for a, b in (("fedsam", "fedavg"), ("fedgamma", "scaffold"),
                                                              ("fedspeed", "feddyn"))},
        "smallest": str(dd_tail.mean().idxmin()), "least_accurate": str(fin_cpu.mean().idxmin())}
    vs = dd_l["vs_fedavg"]
    assert vs["feddyn"]["above"] == 0 and vs["mofedsam"]["above"] == 0, "FedDyn and MoFedSAM: below FedAvg, every seed"
    assert all(vs[m]["above"] == vs[m]["seeds"] for m in ("scaffold", "fedgamma")), "SCAFFOLD, FedGAMMA: above, every seed"
    assert all(v["above"] == v["seeds"] for v in dd_l["sam_added"].values()), "adding SAM raises Δ_D in every seed"
    assert dd_l["smallest"] == dd_l["least_accurate"] == "mofedsam", "the smallest Δ_D, the lowest accuracy"
    sa = dd_l["sam_added"]
    text = (
        f"Over the last quarter of the rounds ({dd_from}–{dd_rounds}; Δ_D as the claims table reads it) FedDyn's Δ_D is "
        f"{vs['feddyn']['ratio']:.2f}× FedAvg's and MoFedSAM's {vs['mofedsam']['ratio']:.2f}×, lower in every seed; "
        f"**SCAFFOLD's is {vs['scaffold']['ratio']:.2f}× and FedGAMMA's {vs['fedgamma']['ratio']:.2f}× FedAvg's, higher in "
        f"every seed**, though both are more accurate than FedAvg in every seed (§3). So one drift correction shrinks "
        f"Δ_D and the other widens it. **Adding SAM raises Δ_D**, in every pair and every seed: FedSAM over FedAvg "
        f"{sa['fedsam-fedavg']['ratio']:.2f}×, FedGAMMA over SCAFFOLD {sa['fedgamma-scaffold']['ratio']:.2f}×, FedSpeed "
        f"over FedDyn {sa['fedspeed-feddyn']['ratio']:.2f}× ({sa['fedspeed-feddyn']['seeds']} seeds). The smallest Δ_D is "
        f"MoFedSAM's, whose clients share {100 * (1 - rho_runs['mofedsam']['alpha']):.0f} % of their step, and so is the lowest accuracy: a small Δ_D is no sign of "
        f"a good model.")
    return Lesson("flatness", dd_l, text)


@summarises("04_sam_baselines")
def summary(lessons: dict[str, dict[str, Any]]) -> str:
    rl, cl, ko, fl = (lessons[k] for k in ("rho", "curves", "cost", "flatness"))
    assert cl["pairs"][ko["cheap_best"] + "-fedavg"]["mean"] > cl["pairs"]["fedsam-fedavg"]["mean"] > 0, "checked above"
    return (
        f"* **SAM does not do much at this scale, but what it does is positive.** Its tuned radius is no longer zero "
        f"(FedSAM's ρ = {rl['methods']['fedsam']['best_rho']:g}), and FedSAM is {cl['pairs']['fedsam-fedavg']['mean']:+.2f} "
        f"points above FedAvg in each of {cl['pairs']['fedsam-fedavg']['seeds']} paired seeds, at twice the gradient "
        f"work. A drift correction at FedAvg's cost gains more ({method_label(ko['cheap_best'])} "
        f"{cl['pairs'][ko['cheap_best'] + '-fedavg']['mean']:+.2f} points), and SAM on top of one adds little "
        f"(FedGAMMA − SCAFFOLD {cl['pairs']['fedgamma-scaffold']['mean']:+.2f}).\n"
        f"* **Two of the papers' claims go the other way here**: FedSAM is not below FedAvg, and MoFedSAM is below "
        f"FedSAM in every seed ({cl['pairs']['mofedsam-fedsam']['mean']:+.2f} points). FedLESAM tuned to ρ = 0, i.e. "
        f"to FedAvg, so its claim cannot be read as a test of its perturbation.\n"
        f"* **Δ_D does not track accuracy**: SAM raises it wherever it is added, SCAFFOLD raises it to "
        f"{fl['vs_fedavg']['scaffold']['ratio']:.2f}× FedAvg's while gaining accuracy, and MoFedSAM has the "
        f"smallest Δ_D and the lowest accuracy.")
