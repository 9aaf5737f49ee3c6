"""The lessons of notebook 09 (sharpness and landscapes): the paragraphs that read its committed cpu figures.

Each reader quotes the committed data of one figure and asserts every direction its paragraph states (see
:mod:`lab.lessons`); ``tests/test_cpu_lessons_09.py`` recomputes the numbers from the CSVs and records.
"""
from __future__ import annotations

import gzip
import json
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from lab.evidence.claims import evaluate_claim_paired, load_claims
from lab.evidence.paired import paired_difference
from lab.evidence.records import figure_runs
from lab.evidence.validity import RecordPool, degenerate_arms
from lab.lessons import Context, Lesson, reads, summarises
from lab.style import method_label


@reads("09_curvature")
def curvature(ctx: Context) -> Lesson:
    curv_cpu = ctx.table("09_curvature", "per_seed")
    curv_cpu = curv_cpu.assign(seed=curv_cpu["seed"].astype(int), converged=curv_cpu["converged"].astype(str) == "True")
    curv_par = ctx.parameters("09_curvature")
    curv_by = {m: g.set_index("seed") for m, g in curv_cpu.groupby("method")}

    def curv_compare(left, right):
        """``left`` against ``right`` seed by seed: λ_max (a power iteration's Rayleigh quotient never exceeds the top
        eigenvalue, so an estimate above the other model's *converged* one settles the order even unconverged) and
        the trace (paired difference, 95 % interval)."""
        a, b = curv_by[left], curv_by[right]
        both = sorted(set(a.index) & set(b.index))
        lam_a, lam_b, ok_a, ok_b = a["lambda_max"], b["lambda_max"], a["converged"], b["converged"]
        tr = paired_difference(a["trace"].to_dict(), b["trace"].to_dict())
        return {"n": len(both), "higher": int(sum(lam_a[s] > lam_b[s] for s in both)),
                "both_converged": int(sum(ok_a[s] and ok_b[s] for s in both)),
                "settled_sharper": int(sum(lam_a[s] > lam_b[s] and ok_b[s] for s in both)),
                "settled_flatter": int(sum(lam_a[s] < lam_b[s] and ok_a[s] for s in both)),
                "both_converged_higher": int(sum(lam_a[s] > lam_b[s] and ok_a[s] and ok_b[s] for s in both)),
                "trace": {"mean": tr.mean, "low": tr.mean - tr.half_width, "high": tr.mean + tr.half_width,
                          "positive": int(sum(v > 0 for v in tr.values))}}

    curv_claim = next(evaluate_claim_paired(c) for c in load_claims(ctx.report.figures_dir / "claims.yaml")
                      if c.id == "fedvssam_flatter_lambda_max")
    curv_seeds = sorted(curv_by["fedvssam"].index)
    curv_trace_min = {s_: curv_cpu[curv_cpu["seed"] == s_].set_index("method")["trace"].idxmin() for s_ in curv_seeds}
    les_curv = {
        "seeds": len(curv_seeds), "eig_iters": int(curv_par["eig_iters"]), "trace_probes": int(curv_par["trace_samples"]),
        "measure_clients": int(curv_par["measure_clients"]), "measure_batches": int(curv_par["measure_batches"]),
        "lambda_max": {m: {str(s_): float(curv_by[m].loc[s_, "lambda_max"]) for s_ in curv_seeds}
                       for m in ("fedvssam", "fedsam", "fedavg")},
        "converged": {m: {str(s_): bool(curv_by[m].loc[s_, "converged"]) for s_ in curv_seeds}
                      for m in ("fedvssam", "fedsam", "fedavg")},
        "vs_fedsam": curv_compare("fedvssam", "fedsam"), "vs_fedavg": curv_compare("fedvssam", "fedavg"),
        "fedsam_vs_fedavg": curv_compare("fedsam", "fedavg"),
        "verdict": curv_claim.verdict, "verdict_pairs": [c.difference.n for c in curv_claim.comparisons],
        "nsam_lowest_trace": int(sum(m == "fednsam" for m in curv_trace_min.values())),
        "nsam_lambda_mean": float(curv_by["fednsam"]["lambda_max"].mean()),
        "nsam_unconverged": int((~curv_by["fednsam"]["converged"]).sum()),
        "lambda_mean_min_other": float(min(g["lambda_max"].mean() for m, g in curv_by.items() if m != "fednsam"))}
    lc_s, lc_a, lc_sa = les_curv["vs_fedsam"], les_curv["vs_fedavg"], les_curv["fedsam_vs_fedavg"]
    assert [c.right for c in curv_claim.comparisons] == [{"algorithm": "fedsam"}, {"algorithm": "fedavg"}]
    assert les_curv["verdict"] == "too few seeds" and les_curv["verdict_pairs"] == [lc_s["both_converged"],
                                                                                     lc_a["both_converged"]]
    assert lc_s["higher"] == lc_s["n"] == les_curv["seeds"], "FedVSSAM's estimate above FedSAM's in every seed"
    assert lc_s["settled_flatter"] == 0 and lc_s["settled_sharper"] > lc_s["n"] / 2, "settled sharper in most, flatter in none"
    assert lc_a["higher"] > lc_a["n"] / 2 and lc_a["settled_flatter"] == 0 < lc_a["settled_sharper"]
    assert lc_s["trace"]["low"] > 0, "FedVSSAM's trace above FedSAM's, the interval excluding 0"
    assert lc_a["trace"]["low"] < 0 < lc_a["trace"]["mean"] and lc_a["trace"]["positive"] > lc_a["n"] / 2
    assert lc_s["both_converged_higher"] == lc_s["both_converged"] and lc_a["both_converged_higher"] == lc_a["both_converged"]
    assert lc_sa["higher"] == 0 and lc_sa["trace"]["positive"] == 0 and lc_sa["trace"]["high"] < 0, "FedSAM flatter"
    assert les_curv["nsam_lowest_trace"] == les_curv["seeds"], "FedNSAM's trace the smallest at every seed"
    assert les_curv["nsam_lambda_mean"] < les_curv["lambda_mean_min_other"]

    def curv_cell(m, s_):
        return f"{les_curv['lambda_max'][m][str(s_)]:.1f}" + ("" if les_curv["converged"][m][str(s_)] else " \\*")

    def curv_trace(x):
        return f"{x['mean']:+.0f} [{x['low']:+.0f}, {x['high']:+.0f}]"

    text = (
        f"**The claim does not hold at this scale: FedVSSAM's global model is not flatter than FedSAM's, it is "
        f"sharper.** λ_max per seed (\\* : the power iteration had not converged in {les_curv['eig_iters']} iterations, "
        f"a lower estimate):\n\n"
        "| seed | FedVSSAM | FedSAM | FedAvg |\n|---|---|---|---|\n"
        + "".join(f"| {s_} | {curv_cell('fedvssam', s_)} | {curv_cell('fedsam', s_)} | {curv_cell('fedavg', s_)} |\n"
                  for s_ in curv_seeds)
        + f"\nBoth curvatures are of F, the function of §2: {les_curv['measure_batches']} minibatch from each of "
        f"{les_curv['measure_clients']} clients of the seed's partition, a sample of the training loss, as the figure's "
        f"caption says. "
        f"FedVSSAM's estimate is above FedSAM's in {lc_s['higher']} of {lc_s['n']} seeds and above FedAvg's in "
        f"{lc_a['higher']} of {lc_a['n']}. fedlab's verdict on the claim leaves the unconverged estimates out, which leaves "
        f"{lc_s['both_converged']} seeds where both estimates converged against either arm: *{les_curv['verdict']}*. "
        f"The unconverged estimates still say something, because a power iteration's Rayleigh quotient never exceeds "
        f"the top eigenvalue: where FedVSSAM's estimate is above the other model's converged one, FedVSSAM is the "
        f"sharper whatever its own would converge to. Counted so, FedVSSAM is sharper than FedSAM in "
        f"{lc_s['settled_sharper']} seeds and flatter in none (the other seeds open), sharper than FedAvg in "
        f"{lc_a['settled_sharper']} and flatter in none. The Hessian trace ({les_curv['trace_probes']} probes), which "
        f"has no convergence question, points the same way: FedVSSAM − FedSAM {curv_trace(lc_s['trace'])} (paired over "
        f"the seeds, mean and 95 % interval), FedVSSAM − FedAvg {curv_trace(lc_a['trace'])}, positive in "
        f"{lc_a['trace']['positive']} of {lc_a['n']} seeds but with an interval that reaches below 0.\n\n"
        f"What is flatter than FedAvg here is FedSAM itself (a lower λ_max estimate in every seed, settled in "
        f"{lc_sa['settled_flatter']}; trace {curv_trace(lc_sa['trace'])}), and most of all FedNSAM: the smallest trace "
        f"of all methods at each of the {les_curv['nsam_lowest_trace']} seeds and the smallest mean λ_max estimate "
        f"({les_curv['nsam_lambda_mean']:.1f}, the next {les_curv['lambda_mean_min_other']:.1f}; {les_curv['nsam_unconverged']} "
        f"of its {les_curv['seeds']} estimates unconverged, so lower estimates).")
    return Lesson("curvature", les_curv, text)


@reads("09_flatness_vs_accuracy")
def flatness_accuracy(ctx: Context) -> Lesson:
    fa_pts = ctx.table("09_flatness_vs_accuracy", "per_seed")
    fa_pts = fa_pts.assign(seed=fa_pts["seed"].astype(int), converged=fa_pts["converged"].astype(str) == "True")
    fa_rank = ctx.table("09_flatness_vs_accuracy", "rank_correlation").set_index("measure")
    # the arms that are another method in disguise, classified from the figure's committed records by the claims' rule
    # (lab.evidence.validity), the references looked up in the whole records folder
    fa_arms: dict = {}
    for r in figure_runs("09_flatness_vs_accuracy"):
        fa_arms.setdefault(r.config.algorithm, []).append(r)
    fa_copies = sorted(degenerate_arms(fa_arms, RecordPool(ctx.report.figures_dir / "records")))
    fa_distinct = fa_pts[(fa_pts["status"] == "finished") & ~fa_pts["method"].isin(fa_copies)]
    fa_lam_d = fa_distinct[fa_distinct["converged"]]
    fa_sp_lam = stats.spearmanr(fa_lam_d["lambda_max"], fa_lam_d["test_acc"])
    fa_sp_tr = stats.spearmanr(fa_distinct["trace"], fa_distinct["test_acc"])
    fa_mean_acc = fa_pts.groupby("method")["test_acc"].mean()
    # the analysed models' accuracy against their run records' (the records of the figure's sidecar)
    fa_side = json.loads((ctx.report.figures_dir / "09_flatness_vs_accuracy.json").read_text())
    fa_acc = fa_pts.set_index(["method", "seed"])["test_acc"]
    fa_diff = pd.DataFrame([{"seed": int(fa_side["configs"][k]["seed"]), "diff": 100 * (
        fa_acc[(fa_side["configs"][k]["algorithm"], int(fa_side["configs"][k]["seed"]))]
        - json.loads(gzip.open(ctx.report.figures_dir / "records" / f"{k}.json.gz", "rt").read())["summary"]["final_test_acc"])}
        for k in fa_side["records"]])
    fa_moved = fa_diff[fa_diff["diff"].abs() > 1e-9]
    les_fa = {
        "models": int((fa_pts["status"] == "finished").sum()),
        "unconverged": int((~fa_pts["converged"]).sum()),
        "lambda": {"points": int(fa_rank.loc["lambda_max", "points"]), "spearman": float(fa_rank.loc["lambda_max", "spearman"]),
                   "p": float(fa_rank.loc["lambda_max", "p_permutation"])},
        "trace": {"points": int(fa_rank.loc["trace", "points"]), "spearman": float(fa_rank.loc["trace", "spearman"]),
                  "p": float(fa_rank.loc["trace", "p_permutation"])},
        "lambda_all": {"points": int(fa_rank.loc["lambda_max incl. unconverged", "points"]),
                       "spearman": float(fa_rank.loc["lambda_max incl. unconverged", "spearman"])},
        "copies": fa_copies,
        "distinct_lambda": {"points": len(fa_lam_d), "spearman": float(fa_sp_lam.statistic), "p": float(fa_sp_lam.pvalue)},
        "distinct_trace": {"points": len(fa_distinct), "spearman": float(fa_sp_tr.statistic), "p": float(fa_sp_tr.pvalue)},
        "nsam_acc": 100 * float(fa_mean_acc["fednsam"]), "best": str(fa_mean_acc.idxmax()),
        "best_acc": 100 * float(fa_mean_acc.max()),
        "record_models": len(fa_diff), "record_moved": len(fa_moved),
        "record_moved_seeds": sorted(int(s_) for s_ in set(fa_moved["seed"])),
        "record_max_diff": float(fa_diff["diff"].abs().max())}
    assert les_fa["lambda"]["spearman"] < 0 and les_fa["lambda"]["p"] < 0.05, "weak, negative, told from chance as drawn"
    assert les_fa["copies"] == ["fedlesam", "fedswa"], "FedLESAM and FedSWA are FedAvg at their tuned hyperparameters"
    assert les_fa["distinct_lambda"]["spearman"] < 0 and les_fa["distinct_lambda"]["p"] > 0.05
    assert abs(les_fa["distinct_lambda"]["spearman"]) < abs(les_fa["lambda"]["spearman"])
    assert les_fa["trace"]["p"] > 0.05 and les_fa["distinct_trace"]["p"] > 0.05
    assert abs(les_fa["distinct_trace"]["spearman"]) < abs(les_fa["trace"]["spearman"]) < abs(les_fa["lambda"]["spearman"])
    assert les_fa["best"] != "fednsam" and les_fa["nsam_acc"] < les_fa["best_acc"]
    assert les_fa["record_moved_seeds"] == [0] and 0 < les_fa["record_max_diff"] < 2, "only seed 0 moved, by under 2 points"
    text = (
        f"**Flatness does not clearly track accuracy at this scale.** Over the {les_fa['lambda']['points']} finished "
        f"models with a converged λ_max estimate, the rank correlation of λ_max with test accuracy is "
        f"{les_fa['lambda']['spearman']:.2f} (permutation p = {les_fa['lambda']['p']:.3f}): weak, and in the direction of "
        f"\"flatter is more accurate\". But FedLESAM and FedSWA are degenerate arms (`lab.evidence.validity`: their "
        f"tuned hyperparameters, ρ = 0 and ρ = α = 1, reduce them to FedAvg), so FedAvg's models count three times among "
        f"the points. Over the {les_fa['distinct_lambda']['points']} distinct models the correlation is "
        f"{les_fa['distinct_lambda']['spearman']:.2f} (p = {les_fa['distinct_lambda']['p']:.2f}, scipy's asymptotic "
        f"test), which cannot be told from chance at the 5 % level. The trace, estimated at every model, tracks "
        f"accuracy less still: {les_fa['trace']['spearman']:.2f} over {les_fa['trace']['points']} points "
        f"(p = {les_fa['trace']['p']:.2f}), {les_fa['distinct_trace']['spearman']:.2f} over the distinct ones. "
        f"Including the {les_fa['unconverged']} unconverged estimates gives {les_fa['lambda_all']['spearman']:.2f}. The "
        f"flattest method is not the most accurate: FedNSAM, the smallest trace at every seed, averages "
        f"{les_fa['nsam_acc']:.1f} % against the {les_fa['best_acc']:.1f} % of {method_label(les_fa['best'])}.\n\n"
        f"The caveat, in numbers: of the {les_fa['record_models']} analysed models, {les_fa['record_moved']} (all at seed "
        f"{', '.join(map(str, les_fa['record_moved_seeds']))}) have a final accuracy other than their run record's, by at "
        f"most {les_fa['record_max_diff']:.2f} points; every other model reproduced its record exactly.")
    return Lesson("flatness_accuracy", les_fa, text)


@reads("09_slices_1d")
def slices(ctx: Context) -> Lesson:
    sl_cpu = ctx.table("09_slices_1d")
    sl_cpu = sl_cpu.assign(seed=sl_cpu["seed"].astype(int))
    sl_line = sl_cpu[sl_cpu["kind"] == "interpolation"]
    sl_barrier, sl_end_lower = {}, 0  # seed -> highest F on [0, 1] above the higher end
    for s_, g in sl_line.groupby("seed"):
        g = g.set_index("coefficient")["F"]
        sl_barrier[str(s_)] = float(g[(g.index >= 0) & (g.index <= 1)].max() - max(g.loc[0.0], g.loc[1.0]))
        sl_end_lower += int(g.loc[1.0] < g.loc[0.0])
    sl_slices = sl_cpu[sl_cpu["kind"] == "slice"].pivot_table(index=["method", "seed"], columns="coefficient", values="F")
    sl_rise = (sl_slices[-1.0] + sl_slices[1.0]) / 2 - sl_slices[0.0]  # mean rise at a = ±1 over F at the model
    sl_rise_mean = sl_rise.groupby("method").mean()
    les_sl = {
        "seeds": len(sl_barrier), "barrier_max": max(sl_barrier.values()), "fedvssam_end_lower": sl_end_lower,
        "rise_fedavg": float(sl_rise_mean["fedavg"]), "rise_fedvssam": float(sl_rise_mean["fedvssam"]),
        "rise_fedvssam_smaller": int(sum(sl_rise[("fedvssam", s_)] < sl_rise[("fedavg", s_)]
                                         for s_ in sorted({k for _, k in sl_rise.index}))),
        "rise_lowest": str(sl_rise_mean.idxmin()), "rise_highest": str(sl_rise_mean.idxmax())}
    assert les_sl["barrier_max"] <= 0, "no point of any line above both its ends"
    assert les_sl["fedvssam_end_lower"] > les_sl["seeds"] / 2
    assert les_sl["rise_fedvssam"] < les_sl["rise_fedavg"] and les_sl["rise_fedvssam_smaller"] > les_sl["seeds"] / 2
    text = (
        f"**No barrier, and a picture that disagrees with λ_max.** At every one of the {les_sl['seeds']} seeds the loss "
        f"along the line from FedAvg's to FedVSSAM's model never rises above the higher of the two ends: the two models "
        f"sit in one basin (FedVSSAM's end is the lower one in {les_sl['fedvssam_end_lower']} seeds). Along the random "
        f"filter-normalised direction, F rises from the model to a = ±1 by {les_sl['rise_fedvssam']:.3f} on average "
        f"around FedVSSAM's models and by {les_sl['rise_fedavg']:.3f} around FedAvg's (FedVSSAM's the smaller in "
        f"{les_sl['rise_fedvssam_smaller']} of {les_sl['seeds']} seeds): on this picture FedVSSAM looks a little "
        f"flatter, the opposite of its λ_max and trace in §3. The two measure different things: a filter-normalised "
        f"direction is scaled to each model's own weights (a = 1 is not the same step length at two models), while "
        f"λ_max and the trace are curvatures in F's own units. Of all methods the smallest mean rise is "
        f"{method_label(les_sl['rise_lowest'])}'s and the largest {method_label(les_sl['rise_highest'])}'s.")
    return Lesson("slices", les_sl, text)


@reads("09_landscape_2d")
def landscape(ctx: Context) -> Lesson:
    ls_cpu = ctx.table("09_landscape_2d")
    ls_cpu = ls_cpu.assign(seed=ls_cpu["seed"].astype(int))
    ls_rise = {}  # (method, seed) -> mean of F over the plane minus F at the model
    for (m, s_), g in ls_cpu.groupby(["method", "seed"]):
        ls_rise[(m, s_)] = float(g["F"].mean() - g[(g["coef_1"] == 0) & (g["coef_2"] == 0)]["F"].iloc[0])
    ls_seeds = sorted({s_ for _, s_ in ls_rise})
    les_ls = {
        "seeds": len(ls_seeds), "rise_fedavg": float(np.mean([ls_rise[("fedavg", s_)] for s_ in ls_seeds])),
        "rise_fedvssam": float(np.mean([ls_rise[("fedvssam", s_)] for s_ in ls_seeds])),
        "fedvssam_smaller": int(sum(ls_rise[("fedvssam", s_)] < ls_rise[("fedavg", s_)] for s_ in ls_seeds))}
    assert les_ls["rise_fedvssam"] < les_ls["rise_fedavg"] and les_ls["fedvssam_smaller"] > les_ls["seeds"] / 2
    assert les_ls["fedvssam_smaller"] < les_ls["seeds"], "not at every seed"
    text = (
        f"The planes say what the 1-D slices said: averaged over the plane, F lies {les_ls['rise_fedvssam']:.3f} above "
        f"its value at the model around FedVSSAM's models and {les_ls['rise_fedavg']:.3f} around FedAvg's, FedVSSAM's "
        f"the smaller in {les_ls['fedvssam_smaller']} of {les_ls['seeds']} seeds. A wider basin on a filter-normalised "
        f"plane, a larger λ_max and trace (§3): which model is \"flatter\" depends on the measure.")
    return Lesson("landscape", les_ls, text)


@reads("09_sharpness_over_training")
def tracking(ctx: Context) -> Lesson:
    tk_cpu = ctx.table("09_sharpness_over_training")
    tk_cpu = tk_cpu.assign(seed=tk_cpu["seed"].astype(int), round=tk_cpu["round"].astype(int))
    tk = tk_cpu.pivot_table(index="round", columns=["method", "seed"], values="lambda_max")
    tk_seeds = sorted(set(tk_cpu["seed"]))
    tk_first, tk_last = int(tk.index.min()), int(tk.index.max())
    tk_mean = {m: tk[m].mean(axis=1) for m in ("fedavg", "fedsam")}
    tk_later = tk.index[tk.index > tk_first]
    les_tk = {
        "seeds": len(tk_seeds), "rounds": len(tk_later), "start": float(tk_mean["fedavg"][tk_first]),
        "start_same": bool(all(tk[("fedavg", s_)][tk_first] == tk[("fedsam", s_)][tk_first] for s_ in tk_seeds)),
        "first_later": int(tk_later[0]),
        **{f"{m}_first": float(tk_mean[m][tk_later[0]]) for m in ("fedavg", "fedsam")},
        **{f"{m}_peak_round": int(tk_mean[m].idxmax()) for m in ("fedavg", "fedsam")},
        **{f"{m}_peak": float(tk_mean[m].max()) for m in ("fedavg", "fedsam")},
        **{f"{m}_end": float(tk_mean[m][tk_last]) for m in ("fedavg", "fedsam")},
        "fedsam_lower": int(sum(tk[("fedsam", s_)][r] < tk[("fedavg", s_)][r] for r in tk_later for s_ in tk_seeds)),
        "end_round": tk_last}
    assert les_tk["start_same"], "both start from the same initial model"
    assert min(les_tk["fedavg_first"], les_tk["fedsam_first"]) > 3 * les_tk["start"], "several-fold within the first segment"
    assert les_tk["fedavg_peak_round"] < tk_last and les_tk["fedsam_peak_round"] < tk_last, "the peak is not at the end"
    assert les_tk["fedavg_end"] < les_tk["fedavg_peak"] and les_tk["fedsam_end"] < les_tk["fedsam_peak"]
    assert les_tk["fedsam_lower"] == les_tk["rounds"] * les_tk["seeds"], "FedSAM below FedAvg at every later measurement"
    text = (
        f"From the shared initial model (λ_max {les_tk['start']:.1f}, mean of the {les_tk['seeds']} seeds), λ_max grows "
        f"several-fold by round {les_tk['first_later']} ({les_tk['fedavg_first']:.1f} for FedAvg, "
        f"{les_tk['fedsam_first']:.1f} for FedSAM), then moves up and down rather than sharpening steadily: its highest "
        f"mean is at round {les_tk['fedavg_peak_round']} for FedAvg ({les_tk['fedavg_peak']:.1f}) and round "
        f"{les_tk['fedsam_peak_round']} for FedSAM ({les_tk['fedsam_peak']:.1f}), and at round {les_tk['end_round']} it "
        f"is {les_tk['fedavg_end']:.1f} and {les_tk['fedsam_end']:.1f}. FedSAM's is the lower at all "
        f"{les_tk['fedsam_lower']} later measurements of both seeds: SAM holds λ_max down along the whole run, as "
        f"§3 found at its end. Two seeds describe; they do not test.")
    return Lesson("tracking", les_tk, text)


@summarises("09_sharpness_and_landscapes")
def summary(lessons: dict[str, dict[str, Any]]) -> str:
    les_curv, les_fa, les_sl, les_tk = (lessons[k] for k in ("curvature", "flatness_accuracy", "slices", "tracking"))
    return (
        f"* FedVSSAM's global model is not flatter than FedSAM's: its λ_max estimate is the higher in "
        f"{les_curv['vs_fedsam']['higher']} of {les_curv['vs_fedsam']['n']} seeds, settled so in "
        f"{les_curv['vs_fedsam']['settled_sharper']} and the other way in none, and its trace is higher by "
        f"{les_curv['vs_fedsam']['trace']['mean']:.0f} on average. fedlab's verdict is *{les_curv['verdict']}* only because "
        f"the power iteration converged for both models in {les_curv['vs_fedsam']['both_converged']} seeds, and in those "
        f"FedVSSAM is the sharper against either arm. Against FedAvg it is settled sharper in "
        f"{les_curv['vs_fedavg']['settled_sharper']} seeds, flatter in none, the rest open.\n"
        f"* FedSAM's λ_max estimate and trace are below FedAvg's at every seed, and its λ_max along both tracked runs; "
        f"FedNSAM is the flattest by its trace.\n"
        f"* Flatness does not clearly track accuracy: a rank correlation of {les_fa['lambda']['spearman']:.2f} for "
        f"λ_max, {les_fa['distinct_lambda']['spearman']:.2f} once FedAvg's models are counted once (not told from "
        f"chance), and {les_fa['trace']['spearman']:.2f} for the trace. The flattest method is not the most accurate.\n"
        f"* Random filter-normalised slices and planes show FedVSSAM slightly flatter than FedAvg "
        f"({les_sl['rise_fedvssam_smaller']} of {les_sl['seeds']} seeds on the line), against λ_max and the trace: a "
        f"landscape picture is one measure of flatness among several, and they disagree here.")
