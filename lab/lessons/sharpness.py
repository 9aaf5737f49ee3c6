"""The lessons of notebook 09 (sharpness and landscapes): the paragraphs that read its committed cpu figures.

Each reader quotes the committed data of one figure and asserts every direction its paragraph states (see
:mod:`lab.lessons`); ``tests/test_cpu_lessons_09.py`` recomputes the numbers from the CSVs and records.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from lab.evidence.claims import evaluate_claim_paired, load_claims
from lab.evidence.paired import paired_difference
from lab.evidence.records import figure_runs
from lab.evidence.validity import RecordPool, degenerate_arms
from lab.lessons import Context, Lesson, paired_numbers, reads, summarises
from lab.style import method_label


@reads("09_curvature")
def curvature(ctx: Context) -> Lesson:
    curv_cpu = ctx.table("09_curvature", "per_seed")
    curv_cpu = curv_cpu.assign(seed=curv_cpu["seed"].astype(int), converged=curv_cpu["converged"].astype(str) == "True")
    curv_par = ctx.parameters("09_curvature")
    curv_by = {m: g.set_index("seed") for m, g in curv_cpu.groupby("method")}

    def curv_compare(left, right):
        """``left`` against ``right`` seed by seed: how often its λ_max is the higher, and the paired differences of
        λ_max and of the trace."""
        a, b = curv_by[left], curv_by[right]
        both = sorted(set(a.index) & set(b.index))
        return {"n": len(both), "higher": int(sum(a.loc[s, "lambda_max"] > b.loc[s, "lambda_max"] for s in both)),
                "lambda_max": paired_numbers(paired_difference(a["lambda_max"].to_dict(), b["lambda_max"].to_dict())),
                "trace": paired_numbers(paired_difference(a["trace"].to_dict(), b["trace"].to_dict()))}

    curv_claim = next(evaluate_claim_paired(c) for c in load_claims(ctx.report.figures_dir / "claims.yaml")
                      if c.id == "fedvssam_flatter_lambda_max")
    curv_seeds = sorted(curv_by["fedvssam"].index)
    nsam_seeds = sorted(curv_by["fednsam"].index)
    lowest = {col: {s_: str(curv_cpu[curv_cpu["seed"] == s_].set_index("method")[col].idxmin()) for s_ in nsam_seeds}
              for col in ("lambda_max", "trace")}
    means = curv_cpu.groupby("method")["lambda_max"].mean()
    runner_up = str(means.drop("fednsam").idxmin())
    les_curv = {
        "seeds": len(curv_seeds), "models": len(curv_cpu), "converged": int(curv_cpu["converged"].sum()),
        "steps_max": int(curv_cpu["lanczos_steps"].max()), "eig_tol": float(curv_par["eig_tol"]),
        "eig_max_iter": int(curv_par["eig_max_iter"]), "curvature_size": int(curv_par["curvature_size"]),
        "trace_probes": int(curv_par["trace_samples"]),
        "lambda_max": {m: {str(s_): float(curv_by[m].loc[s_, "lambda_max"]) for s_ in curv_seeds}
                       for m in ("fedvssam", "fedsam", "fedavg")},
        "vs_fedsam": curv_compare("fedvssam", "fedsam"), "vs_fedavg": curv_compare("fedvssam", "fedavg"),
        "fedsam_vs_fedavg": curv_compare("fedsam", "fedavg"),
        "verdict": curv_claim.verdict, "verdict_pairs": [c.difference.n for c in curv_claim.comparisons],
        "nsam_seeds": len(nsam_seeds),
        "nsam_lowest_lambda": int(sum(m == "fednsam" for m in lowest["lambda_max"].values())),
        "nsam_lowest_trace": int(sum(m == "fednsam" for m in lowest["trace"].values())),
        "nsam_lambda_mean": float(means["fednsam"]), "runner_up": runner_up,
        "runner_up_lambda_mean": float(means[runner_up])}
    lc_s, lc_a, lc_sa = les_curv["vs_fedsam"], les_curv["vs_fedavg"], les_curv["fedsam_vs_fedavg"]
    assert [c.right for c in curv_claim.comparisons] == [{"algorithm": "fedsam"}, {"algorithm": "fedavg"}]
    assert les_curv["converged"] == les_curv["models"] and les_curv["steps_max"] < les_curv["eig_max_iter"], \
        "every Lanczos estimate converged"
    assert les_curv["verdict"] == "fails" and les_curv["verdict_pairs"] == [les_curv["seeds"]] * 2
    for vs in (lc_s, lc_a):
        assert vs["n"] == vs["higher"] == les_curv["seeds"], "FedVSSAM's λ_max the higher at every seed"
        assert vs["lambda_max"]["low"] > 0 and vs["trace"]["low"] > 0, "both intervals above 0"
    assert lc_sa["n"] == les_curv["seeds"] and lc_sa["higher"] == 0 and lc_sa["trace"]["positive"] == 0
    assert lc_sa["lambda_max"]["high"] < 0 and lc_sa["trace"]["high"] < 0, "FedSAM flatter than FedAvg"
    assert les_curv["nsam_lowest_lambda"] == les_curv["nsam_lowest_trace"] == les_curv["nsam_seeds"], \
        "FedNSAM the flattest at every seed it has, by both measures"

    def diff(x):
        return f"{x['mean']:+.1f} [{x['low']:+.1f}, {x['high']:+.1f}]"

    text = (
        f"**The claim fails at this scale: FedVSSAM's global model is not flatter than FedSAM's or FedAvg's, it is the "
        f"sharpest of the three at every seed.** λ_max per seed, by Lanczos on $L_S$ (the training loss on the fixed "
        f"class-balanced sample of {les_curv['curvature_size']:,} images); every one of the {les_curv['models']} "
        f"estimates converged to a relative residual of {les_curv['eig_tol']:g} within {les_curv['steps_max']} steps:\n\n"
        "| seed | FedVSSAM | FedSAM | FedAvg |\n|---|---|---|---|\n"
        + "".join(f"| {s_} | " + " | ".join(f"{les_curv['lambda_max'][m][str(s_)]:.1f}" for m in
                                             ("fedvssam", "fedsam", "fedavg")) + " |\n" for s_ in curv_seeds)
        + f"\nPaired over the {les_curv['seeds']} seeds (mean and 95 % interval), FedVSSAM − FedSAM is "
        f"{diff(lc_s['lambda_max'])} in λ_max and {diff(lc_s['trace'])} in the Hessian trace "
        f"({les_curv['trace_probes']} probes); FedVSSAM − FedAvg is {diff(lc_a['lambda_max'])} and "
        f"{diff(lc_a['trace'])}. fedlab's verdict on the claim, Holm-adjusted within FedVSSAM's family of claims: "
        f"*{les_curv['verdict']}*.\n\n"
        f"What is flatter than FedAvg here is FedSAM itself (a lower λ_max at every seed; FedSAM − FedAvg "
        f"{diff(lc_sa['lambda_max'])}, trace {diff(lc_sa['trace'])}), and most of all FedNSAM: the smallest λ_max and "
        f"the smallest trace of all methods at each of its {les_curv['nsam_seeds']} seeds (mean λ_max "
        f"{les_curv['nsam_lambda_mean']:.1f}; the next method, {method_label(les_curv['runner_up'])}, "
        f"{les_curv['runner_up_lambda_mean']:.1f}).")
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
    fa_mean_acc = fa_distinct.groupby("method")["test_acc"].mean()
    # each point's accuracy is its run record's; θ was trained again here: how far the retrained runs' own final
    # metric is from their records'
    fa_gap = 100 * (fa_pts["retrained_acc"] - fa_pts["test_acc"]).abs()
    les_fa = {
        "models": int((fa_pts["status"] == "finished").sum()), "copies": fa_copies, "distinct": len(fa_distinct),
        **{key: {"points": int(fa_rank.loc[key, "points"]), "spearman": float(fa_rank.loc[key, "spearman"]),
                 "p": float(fa_rank.loc[key, "p_permutation"])} for key in ("lambda_max", "trace")},
        "nsam_acc": 100 * float(fa_mean_acc["fednsam"]), "best": str(fa_mean_acc.idxmax()),
        "best_acc": 100 * float(fa_mean_acc.max()),
        "retrained_same": int((fa_gap < 1e-9).sum()), "retrained_max_gap": float(fa_gap.max()),
        "retrained_mean_gap": float(fa_gap.mean())}
    assert les_fa["copies"] == ["fedlesam", "fedswa"], "FedLESAM and FedSWA are FedAvg at their tuned hyperparameters"
    assert les_fa["lambda_max"]["points"] == les_fa["trace"]["points"] == les_fa["distinct"], \
        "the correlations are over the distinct models, every λ_max converged"
    assert les_fa["lambda_max"]["p"] > 0.05 and les_fa["trace"]["p"] > 0.05, "neither told from chance"
    assert les_fa["best"] != "fednsam" and les_fa["nsam_acc"] < les_fa["best_acc"]
    assert les_fa["retrained_max_gap"] < 1, "a retrained run within a point of its record"
    text = (
        f"**Flatness does not track accuracy at this scale.** FedLESAM and FedSWA are degenerate arms "
        f"(`lab.evidence.validity`: their tuned hyperparameters, ρ = 0 and ρ = α = 1, make them FedAvg), so their "
        f"models are left out and FedAvg's count once: {les_fa['distinct']} distinct models. Over them the rank "
        f"correlation of λ_max with test accuracy is {les_fa['lambda_max']['spearman']:+.2f} (permutation p = "
        f"{les_fa['lambda_max']['p']:.2f}) and that of the trace {les_fa['trace']['spearman']:+.2f} (p = "
        f"{les_fa['trace']['p']:.2f}): neither can be told from chance. The flattest method is not the most accurate: "
        f"FedNSAM, the smallest λ_max and trace at every seed it was analysed at, averages {les_fa['nsam_acc']:.1f} % against the "
        f"{les_fa['best_acc']:.1f} % of {method_label(les_fa['best'])}.\n\n"
        f"The caveat, in numbers: each point's accuracy is its run record's (the protocol's final metric), while its "
        f"curvature is that of θ trained again on this CPU. {les_fa['retrained_same']} of the {les_fa['models']} "
        f"retrained runs reproduced their record's final accuracy exactly; on average they differ from it by "
        f"{les_fa['retrained_mean_gap']:.2f} points, at most {les_fa['retrained_max_gap']:.2f}: the same run in "
        f"everything but the last bits of its floating-point arithmetic.")
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
        f"* FedVSSAM's global model is not flatter than FedSAM's or FedAvg's: its λ_max (Lanczos, every estimate "
        f"converged) is the higher at all {les_curv['seeds']} seeds against each, by "
        f"{les_curv['vs_fedsam']['lambda_max']['mean']:.1f} and {les_curv['vs_fedavg']['lambda_max']['mean']:.1f} on "
        f"average, and its trace too. fedlab's verdict on its paper's claim: *{les_curv['verdict']}*.\n"
        f"* FedSAM's λ_max and trace are below FedAvg's at every seed, and its λ_max along both tracked runs; "
        f"FedNSAM is the flattest by both measures.\n"
        f"* Flatness does not track accuracy: rank correlations of {les_fa['lambda_max']['spearman']:+.2f} (λ_max) "
        f"and {les_fa['trace']['spearman']:+.2f} (trace) over {les_fa['distinct']} distinct models, neither told from "
        f"chance; the flattest method is not the most accurate.\n"
        f"* Random filter-normalised slices and planes show FedVSSAM slightly flatter than FedAvg "
        f"({les_sl['rise_fedvssam_smaller']} of {les_sl['seeds']} seeds on the line), against λ_max and the trace: a "
        f"landscape picture is one measure of flatness among several, and they disagree here.")
