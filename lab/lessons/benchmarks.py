"""The lessons of notebook 10 (the benchmarks): the paragraphs that read its committed cpu figures.

Each reader quotes the committed data of one figure and asserts every direction its paragraph states (see
:mod:`lab.lessons`); ``tests/test_cpu_lessons_10.py`` recomputes the numbers from the CSVs and records.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from lab.evidence.claims import evaluate_claim_paired, load_claims
from lab.evidence.protocol import Curve, final_metric
from lab.lessons import Context, Lesson, reads, summarises
from lab.style import method_label


@reads("10_benchmarks_bars_fmnist")
def bars(ctx: Context) -> Lesson:
    bench_seeds = ctx.table("10_benchmarks_bars_fmnist", "per_seed")

    def against_fedavg(split):
        """Per method at ``split``: mean accuracy (%) of its finished seeds, and its paired difference from FedAvg
        (points) over the seeds where both finished: mean, seeds above, seeds equal."""
        at = bench_seeds[bench_seeds["split"] == split]
        acc = at[at["status"] == "finished"].pivot(index="seed", columns="method", values="final_acc")
        status = at.pivot(index="seed", columns="method", values="status")
        out = {}
        for m in acc.columns:
            both = pd.DataFrame({"method": acc[m], "fedavg": acc["fedavg"]}).dropna()
            diff = 100 * (both["method"] - both["fedavg"])
            out[m] = {"mean": float(100 * acc[m].mean()), "diff": float(diff.mean()), "above": int((diff > 0).sum()),
                      "equal": int((diff == 0).sum()), "largest": float(diff.abs().max()), "paired": int(len(diff)),
                      "seeds": int(status[m].notna().sum()),
                      "lost": int((status[m].dropna() != "finished").sum())}
        return out

    b01, b05 = against_fedavg("Dir 0.1"), against_fedavg("Dir 0.5")
    numbers = {"dir01": b01, "dir05": b05}
    corrections = ("scaffold", "feddyn")
    assert all(b01[m]["above"] == b01[m]["paired"] == 6 for m in corrections), "drift correction above FedAvg in every seed"
    assert b01["fedsam"]["above"] == b01["fedsam"]["paired"] and 0 < b01["fedsam"]["diff"] < min(
        b01[m]["diff"] for m in corrections), "FedSAM: above FedAvg in every seed, by less than either drift correction"
    assert b01["mofedsam"]["above"] == 0, "MoFedSAM below FedAvg in every seed"
    ranked = sorted((m for m in b01 if b01[m]["lost"] == 0), key=lambda m: -b01[m]["mean"])
    # the best of the methods run on every seed (a method on fewer seeds, which no claim judges, is named beside it)
    best_full = next(m for m in ranked if b01[m]["seeds"] == b01["fedavg"]["seeds"])
    assert best_full == "fedgmt", "the paragraph describes FedGMT as the best method run on every seed at Dir 0.1"
    # corrects drift: a control variate (SCAFFOLD, FedGAMMA, FedMoSWA) or a dual/dynamic regulariser (FedDyn, FedSpeed,
    # FedSMOO, FedGMT's FedDyn server) in its update (notebooks 04–08 and the methods page)
    DRIFT_CORRECTING = {"scaffold", "fedgamma", "fedmoswa", "feddyn", "fedspeed", "fedsmoo", "fedgmt"}
    assert set(ranked[:5]) <= DRIFT_CORRECTING, "the paragraph says each of the five best corrects drift"
    # FedAvg itself, up to float rounding: equal in all but at most one seed and within a quarter point in that one
    # (last-bit differences carried through 100 rounds: a few hundredths on the last evaluation, a tenth on the mean of
    # the final window in the committed runs)
    as_fedavg = sorted(m for m in b01 if m != "fedavg" and b01[m]["equal"] >= b01[m]["paired"] - 1
                       and b01[m]["largest"] < 0.25)
    assert set(as_fedavg) == {"fedlesam", "fedswa"}, "the paragraph names FedLESAM and FedSWA as FedAvg seed for seed"
    odd = {b01[m]["paired"] - b01[m]["equal"] for m in as_fedavg}
    assert len(odd) == 1 and len({b01[m]["largest"] for m in as_fedavg}) == 1, "both differ from FedAvg alike"
    tuned_off = {m: bench_seeds[(bench_seeds["split"] == "Dir 0.1") & (bench_seeds["method"] == m)].iloc[0] for m in as_fedavg}
    assert tuned_off["fedlesam"]["rho"] == 0 and tuned_off["fedswa"]["rho"] == tuned_off["fedswa"]["alpha"] == 1
    assert b01["fedgf"]["mean"] < 20 and b01["fedgf"]["lost"] >= 1, "FedGF fails"
    near05 = {m: v for m, v in b05.items() if m not in ("fedavg", "mofedsam")}
    assert 0 < b01["fedgamma"]["diff"] - b01["scaffold"]["diff"] < 1 and 0 < b01["fedsmoo"]["diff"] - b01["feddyn"]["diff"] < 1, \
        "FedGAMMA and FedSMOO less than a point above their bases (SCAFFOLD, FedDyn)"
    assert set(sorted(near05, key=lambda m: -near05[m]["mean"])[:3]) <= DRIFT_CORRECTING
    assert b05["mofedsam"]["above"] == 0 and max(abs(v["diff"]) for v in near05.values()) < b01["scaffold"]["diff"]

    def points(m, at=b01):
        return f"{method_label(m)} {at[m]['diff']:+.1f}"

    text = (
        f"**At Dirichlet 0.1** FedAvg ends at {b01['fedavg']['mean']:.1f} %, {b05['fedavg']['mean'] - b01['fedavg']['mean']:.1f} "
        f"points below its Dirichlet-0.5 runs ({b05['fedavg']['mean']:.1f} %). Against FedAvg, seed by seed:\n\n"
        f"* **Correcting client drift pays**: {points('scaffold')} and {points('feddyn')} points, above FedAvg in every "
        f"one of the {b01['scaffold']['paired']} seeds.\n"
        f"* **Local SAM alone adds little**: FedSAM is {b01['fedsam']['diff']:+.2f} points, above FedAvg in "
        f"{b01['fedsam']['above']} of {b01['fedsam']['paired']} seeds: consistent, but a fraction of what drift correction "
        f"gives. MoFedSAM (local SAM with local momentum) loses {-b01['mofedsam']['diff']:.1f} points, below FedAvg in every seed.\n"
        f"* **Each of the five best methods corrects drift** (a control variate or a dual regulariser in its update): "
        + ", ".join(f"{method_label(m)} ({b01[m]['mean']:.1f} %, {b01[m]['diff']:+.1f}"
                    + (f", {b01[m]['seeds']} seeds" if b01[m]['seeds'] != 6 else "") + ")" for m in ranked[:5])
        + f". FedGMT, the 2025 successor (a trajectory teacher on a FedDyn server), is the best of the methods run on "
        f"all {b01['fedavg']['seeds']} seeds"
        + (f" ({method_label(ranked[0])}, on {b01[ranked[0]]['seeds']} seeds, is higher still)" if ranked[0] != best_full
           else "") + ".\n"
        f"* **Two methods are FedAvg**: tuning switched their extra part off (FedLESAM at ρ = "
        f"{tuned_off['fedlesam']['rho']:g}; FedSWA at ρ = {tuned_off['fedswa']['rho']:g}, α = {tuned_off['fedswa']['alpha']:g}, "
        f"where its cyclic learning rate and its server step reduce to FedAvg's: notebook 06). Their accuracy equals "
        f"FedAvg's in {b01['fedlesam']['equal']} of {b01['fedlesam']['paired']} seeds"
        + ("." if b01["fedlesam"]["equal"] == b01["fedlesam"]["paired"] else
           f"; in the other the two are {b01['fedlesam']['largest']:.2f} points apart from FedAvg's record, which was "
           f"written on a machine whose floats round differently (FedAvg trained again here gives their number to the "
           f"last digit): last-bit differences, carried through 100 rounds, moved this final accuracy by "
           f"{b01['fedlesam']['largest']:.2f} points.") + "\n"
        f"* **FedGF fails**: {b01['fedgf']['lost']} of its {b01['fedgf']['seeds']} seeds collapsed and the others end at "
        f"{b01['fedgf']['mean']:.1f} %: at K = 50 every client's drift passes FedGF's threshold, so every local step takes "
        f"its gradient at one globally perturbed point (the claim `fedgf_above_fedsam_dir01`; FedGF's rule: notebook 09b).\n\n"
        f"**At Dirichlet 0.5** every method but MoFedSAM ({b05['mofedsam']['diff']:+.1f}) is within "
        f"{max(abs(v['diff']) for v in near05.values()):.1f} points of FedAvg, and the top is again drift correction "
        f"(" + ", ".join(points(m, b05) for m in sorted(near05, key=lambda m: -near05[m]['mean'])[:3]) + ").")
    return Lesson("bars", numbers, text)


@reads("10_benchmarks_curves_fmnist")
def final_round(ctx: Context) -> Lesson:
    b01 = ctx.earlier["bars"]["dir01"]  # the dot plot's paired differences, shown first in the section
    curves_cpu = ctx.table("10_benchmarks_curves_fmnist")
    total_rounds = int(curves_cpu["round"].max())
    wobble, window_how = {}, set()
    for split_name, at in curves_cpu[curves_cpu["status"] == "finished"].groupby("split"):
        gaps = []
        for _, one in at.groupby(["method", "seed"]):
            by_round = dict(zip(one["round"].astype(int), one["test_acc"].astype(float)))
            # the protocol's final metric of the curve (lab.evidence.protocol.final_metric), and beside it, labelled,
            # the last round's accuracy: the gap between the two is what this paragraph measures
            fin = final_metric(Curve(by_round, total_rounds, last=by_round[max(by_round)]))
            assert fin.protocol, "every committed curve holds the whole final window"
            window_how.add(fin.how)
            gaps.append(100 * (by_round[max(by_round)] - fin.value))
        wobble[split_name] = {"runs": len(gaps), "mean": float(np.mean(gaps)), "largest": float(np.max(np.abs(gaps))),
                              "below": int(np.sum(np.array(gaps) < 0))}
    assert wobble["Dir 0.1"]["largest"] > 2 * wobble["Dir 0.5"]["largest"], "Dir 0.1's last round moves far more"
    assert len(window_how) == 1, window_how
    text = (
        f"At Dir 0.1 a run's last round lies up to {wobble['Dir 0.1']['largest']:.1f} points from its own final metric "
        f"({next(iter(window_how))}; on average {wobble['Dir 0.1']['mean']:+.1f}; {wobble['Dir 0.1']['below']} of "
        f"{wobble['Dir 0.1']['runs']} runs end below it), against at most {wobble['Dir 0.5']['largest']:.1f} at Dir 0.5: with "
        f"ten clients of very different label mixes per round, the global model swings with the clients drawn. A gap of "
        f"one point between two single runs there is noise; the paired differences above average it over "
        f"{b01['scaffold']['paired']} seeds that share their clients, and the claims are judged on them, on that final "
        f"metric.")
    return Lesson("final_round", wobble, text)


@reads("10_cost_accuracy_fmnist")
def to_target(ctx: Context) -> Lesson:
    cost_cpu = ctx.table("10_cost_accuracy_fmnist")
    target_cpu = 100 * float(pd.read_csv(ctx.report.figures_dir / "10_benchmarks_cpu.csv")["target"].iloc[0])
    to_target = {}
    for m, curve in cost_cpu.groupby("algorithm"):
        hit = curve[curve["acc_pct"] >= target_cpu].sort_values("round")
        if len(hit):
            to_target[m] = {"round": int(hit["round"].iloc[0]), "grads": float(hit["grad_evals"].iloc[0]),
                            "mb": float(hit["comm_mb"].iloc[0])}
    numbers = {"target": target_cpu, **to_target}
    fewest_grads = min(to_target, key=lambda m: to_target[m]["grads"])
    assert fewest_grads == "scaffold" and to_target["scaffold"]["mb"] > to_target["fedavg"]["mb"]
    assert to_target["fedsam"]["grads"] == max(v["grads"] for v in to_target.values()), "FedSAM needs the most gradients"
    fewest_rounds = min(to_target, key=lambda m: (to_target[m]["round"], to_target[m]["mb"]))
    assert fewest_rounds == "fednsam" and to_target["fednsam"]["mb"] == min(v["mb"] for v in to_target.values())
    text = (
        f"To reach {target_cpu:.0f} % (mean curve over six seeds) SCAFFOLD needs the fewest gradient evaluations (summed "
        f"over each round's clients: {to_target['scaffold']['grads']:.0f}, against FedAvg's {to_target['fedavg']['grads']:.0f}) "
        f"but uploads twice the "
        f"model each round ({to_target['scaffold']['mb']:.0f} MB by then, against {to_target['fedavg']['mb']:.0f}). FedNSAM "
        f"gets there first, in {to_target['fednsam']['round']} rounds and {to_target['fednsam']['mb']:.0f} MB: its server "
        f"momentum speeds the start. FedSAM pays two gradients a step and needs {to_target['fedsam']['grads']:.0f} for the "
        f"same accuracy, the most of the six methods drawn: per gradient, local SAM is the most expensive way to "
        f"{target_cpu:.0f} % here.")
    return Lesson("to_target", numbers, text)


@reads("10_claim_arms_fmnist")
def claim_arms(ctx: Context) -> Lesson:
    arms_cpu = ctx.table("10_claim_arms_fmnist")
    arms_cpu = arms_cpu[arms_cpu["status"] == "finished"]
    arm_step = ctx.parameters("10_claim_arms_fmnist")["small_step"]
    # what the committed figure's accuracies are: it states them (final_how); the claims table reads the same runs on the
    # protocol's final metric, so the two must agree to float rounding
    arm_how = ctx.parameters("10_claim_arms_fmnist")["final_how"]
    by_arm = {a: g.set_index("seed")["diff_points"] for a, g in arms_cpu.groupby("arm")}
    arm_key = {"sam": method_label("fedsam"), "vssam": method_label("fedvssam"), "rho01": "FedSAM, ρ = 0.1",
               "step": f"FedSAM, η = γ_l·η = {arm_step:g}"}
    arms_l = {k: {"diff": float(by_arm[v].mean()), "above": int((by_arm[v] > 0).sum()),
                                             "seeds": int(len(by_arm[v]))} for k, v in arm_key.items()}
    vs_step = by_arm[arm_key["vssam"]] - by_arm[arm_key["step"]]  # FedVSSAM − FedSAM at the small step, per seed
    arms_l["vssam_minus_step"] = {"diff": float(vs_step.mean()), "above": int((vs_step > 0).sum()), "seeds": int(len(vs_step))}
    # the claims table's reading of the same comparison (paired, Holm-adjusted in its family)
    step_claim = next(c for c in load_claims(ctx.report.figures_dir / "claims.yaml") if c.id == "fedvssam_above_fedsam_small_step")
    step_paired = evaluate_claim_paired(step_claim)
    step_d = step_paired.comparisons[0].difference
    arms_l["protocol_vs_step"] = {"diff": 100 * step_d.mean, "low": 100 * step_d.low, "high": 100 * step_d.high,
                                  "n": int(step_d.n), "verdict": step_paired.verdict}
    assert arm_how == step_paired.final_how, "the figure plots the claims table's final metric"
    # tolerance 1e-3 points: the CSV keeps 6 significant digits of each per-seed difference (about 1e-5 points here)
    assert abs(arms_l["vssam_minus_step"]["diff"] - arms_l["protocol_vs_step"]["diff"]) < 1e-3, \
        "the figure's paired difference is the claims table's"
    assert arms_l["rho01"]["diff"] > 0, "at ρ = 0.1 FedSAM is above FedAvg on average, not below"
    assert arms_l["protocol_vs_step"]["low"] < 0 < arms_l["protocol_vs_step"]["high"], "undecided on the protocol's metric"
    assert arms_l["step"]["diff"] < arms_l["sam"]["diff"] and arms_l["vssam"]["diff"] < arms_l["sam"]["diff"], \
        "the smaller step and FedVSSAM both end below FedSAM at its tuned radius"
    text = (
        f"On the protocol's final metric ({arm_how}), at the papers' radius FedSAM is **not** below FedAvg: "
        f"{arms_l['rho01']['diff']:+.2f} points on average, above it in {arms_l['rho01']['above']} of "
        f"{arms_l['rho01']['seeds']} seeds (at its tuned radius {arms_l['sam']['diff']:+.2f}). The paper's five-point loss "
        f"does not appear on this model at either radius. At FedVSSAM's effective step γ_l·η = {arm_step:g} FedSAM ends "
        f"{arms_l['step']['diff']:+.2f} from FedAvg; FedVSSAM, at {arms_l['vssam']['diff']:+.2f}, is "
        f"{arms_l['vssam_minus_step']['diff']:+.2f} points from that control ({arms_l['vssam_minus_step']['above']} of "
        f"{arms_l['vssam_minus_step']['seeds']} seeds above it; 95 % paired interval "
        f"[{arms_l['protocol_vs_step']['low']:+.2f}, {arms_l['protocol_vs_step']['high']:+.2f}]): the claims table reads "
        f"it **{arms_l['protocol_vs_step']['verdict']}**. Both the smaller step and FedVSSAM end below FedSAM at its tuned "
        f"radius: on this metric FedVSSAM's suppressed step gains nothing over FedSAM here.")
    return Lesson("claim_arms", arms_l, text)


@summarises("10_benchmarks")
def summary(lessons: dict[str, dict[str, Any]]) -> str:
    b01, wob, tt = lessons["bars"]["dir01"], lessons["final_round"]["Dir 0.1"], lessons["to_target"]
    on_top = (b01["fedgamma"]["diff"] - b01["scaffold"]["diff"], b01["fedsmoo"]["diff"] - b01["feddyn"]["diff"])
    assert 0 < min(on_top) and max(on_top) < 0.1, "the bullet says SAM on top of a drift correction adds almost nothing"
    return (
        f"* Under strong heterogeneity (Dir 0.1), the gains come from **correcting drift** (SCAFFOLD "
        f"{b01['scaffold']['diff']:+.1f}, FedDyn {b01['feddyn']['diff']:+.1f} points over FedAvg), not from local SAM "
        f"(FedSAM {b01['fedsam']['diff']:+.1f}, MoFedSAM {b01['mofedsam']['diff']:+.1f}). Local SAM on top of a drift "
        f"correction adds almost nothing: FedGAMMA {b01['fedgamma']['diff']:+.1f} and FedSMOO {b01['fedsmoo']['diff']:+.1f}, "
        f"{b01['fedgamma']['diff'] - b01['scaffold']['diff']:.2f} and {b01['fedsmoo']['diff'] - b01['feddyn']['diff']:.2f} "
        f"points above SCAFFOLD and FedDyn, their bases. Of the methods run on every seed FedGMT is the best "
        f"({b01['fedgmt']['diff']:+.1f}).\n"
        f"* Read a single run with care: at Dir 0.1 a run's last round can sit {wob['largest']:.1f} points from its own "
        f"recent mean. Paired differences over {b01['scaffold']['paired']} seeds are what the claims table judges.\n"
        f"* Per unit of computation, local SAM is the dearest route to {tt['target']:.0f} % "
        f"({tt['fedsam']['grads']:.0f} gradient evaluations against SCAFFOLD's {tt['scaffold']['grads']:.0f}).")
