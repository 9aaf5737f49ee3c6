"""The lessons of notebook 05 (FedSMOO): the paragraphs that read its committed cpu figures.

Each reader quotes the committed data of one figure and asserts every direction its paragraph states (see
:mod:`lab.lessons`); ``tests/test_cpu_lessons_05.py`` recomputes the numbers from the CSVs and records.
"""
from __future__ import annotations

import json
from typing import Any

import pandas as pd

import fedlab
from lab.evidence.facts import DRAWN_PER_SEED, partition_rule
from lab.evidence.protocol import tuning_dir
from lab.evidence.records import figure_runs
from lab.lessons import Context, Lesson, reads, summarises


@reads("05_quadratic_drift")
def quadratic(ctx: Context) -> Lesson:
    quad_cpu = ctx.table("05_quadratic_drift")
    quad_last = quad_cpu[quad_cpu["round"] == quad_cpu["round"].max()].set_index("method")["distance"]
    quad_l = {"rounds": int(quad_cpu["round"].max()),
                                         "final": {m: float(v) for m, v in quad_last.items()}}
    qf = quad_l["final"]
    assert abs(qf["fedsam"] - qf["fedavg"]) < 0.05 * qf["fedavg"], "FedAvg and FedSAM: nearly the same distance"
    assert qf["fedsmoo_adaptive"] > 1.5 * qf["fedavg"], "the blog variant: well above the other two"
    assert qf["feddyn"] < 1e-9 < qf["fedspeed"] < qf["fedsmoo"] < 0.1 * qf["fedavg"], "FedDyn at θ*, a SAM floor"
    text = (
        f"After {quad_l['rounds']} rounds FedAvg and FedSAM stand at ‖θ − θ*‖ = {qf['fedavg']:.3f} and {qf['fedsam']:.3f}: "
        f"two lines on top of each other in the log-scale figure. The blog's adaptive variant stalls at {qf['fedsmoo_adaptive']:.3f}, "
        f"clearly above them, not on them. FedDyn reaches {qf['feddyn']:.0e}; FedSpeed and FedSMOO stop at "
        f"{qf['fedspeed']:.4f} and {qf['fedsmoo']:.4f}.")
    return Lesson("quadratic", quad_l, text)



@reads("05_fedsmoo_curves")
def curves(ctx: Context) -> Lesson:
    # the final accuracy of the claims table (lab.evidence.protocol.final_metric): the mean of the last 20 % of rounds
    smoo_fin = ctx.seed_accuracies("05_fedsmoo_curves")  # seeds × methods, %
    assert partition_rule(r.config for r in figure_runs("05_fedsmoo_curves")) == DRAWN_PER_SEED, \
        "the paragraph above says each seed of the committed runs has its own partition"
    smoo_params = ctx.parameters("05_fedsmoo_curves")["algorithm_params"]

    def smoo_paired(left, right):
        """left − right over the seeds both ran: their number, mean, smallest, largest and how many are > 0."""
        diff = (smoo_fin[left] - smoo_fin[right]).dropna()
        return {"seeds": int(len(diff)), "mean": float(diff.mean()), "min": float(diff.min()), "max": float(diff.max()),
                "positive": int((diff > 0).sum())}

    smoo_warm = int(smoo_params["fedsmoo_adaptive"]["warmup_rounds"])
    warm_same = True
    for panel, col in (("train_loss_per_seed", "train_loss"), ("test_acc_pct_per_seed", "test_acc_pct")):
        w_tab = ctx.table("05_fedsmoo_curves", panel)
        w_tab = w_tab[w_tab["round"] <= smoo_warm].pivot_table(index=["seed", "round"], columns="method", values=col)
        w_both = w_tab[["fedavg", "fedsmoo_adaptive"]].dropna()
        warm_same &= bool(len(w_both) == smoo_warm * smoo_fin["fedsmoo_adaptive"].notna().sum()
                          and (w_both["fedavg"] == w_both["fedsmoo_adaptive"]).all())
    sc_l = {
        "k": len(smoo_fin.attrs["final_rounds"]), "warmup": smoo_warm, "warmup_is_fedavg": warm_same,
        "lam": {m: float(smoo_params[m]["lam"]) for m in ("feddyn", "fedspeed", "fedsmoo")},
        "pairs": {f"{a}-{b}": smoo_paired(a, b) for a, b in (
            ("fedsmoo", "fedsam"), ("feddyn", "fedsam"), ("fedsmoo", "feddyn"), ("fedspeed", "feddyn"),
            ("fedsmoo", "fedspeed"), ("fedsmoo_adaptive", "fedavg"), ("fedsmoo_adaptive", "fedsmoo"))}}
    sp = sc_l["pairs"]
    assert sp["fedsmoo-fedsam"]["positive"] == sp["fedsmoo-fedsam"]["seeds"] == 6, "FedSMOO above FedSAM, every seed"
    assert sp["feddyn-fedsam"]["positive"] == sp["feddyn-fedsam"]["seeds"], "FedDyn above FedSAM, every seed"
    assert 0 < sp["fedsmoo-feddyn"]["mean"] < 0.1 * sp["fedsmoo-fedsam"]["mean"], "nearly all of it is FedDyn's"
    assert 0 < sp["fedsmoo-feddyn"]["positive"] < sp["fedsmoo-feddyn"]["seeds"], "not every seed above FedDyn"
    assert 0 < sp["fedspeed-feddyn"]["positive"] < sp["fedspeed-feddyn"]["seeds"], "FedSpeed: not every seed"
    assert sp["fedsmoo-fedspeed"]["positive"] == 0, "FedSMOO below FedSpeed in each seed both ran"
    assert sp["fedsmoo_adaptive-fedavg"]["positive"] == sp["fedsmoo_adaptive-fedavg"]["seeds"], "above FedAvg"
    assert sp["fedsmoo_adaptive-fedsmoo"]["positive"] == 0, "below FedSMOO in each seed"
    assert warm_same, "the warm-up rounds are FedAvg's, seed by seed"
    assert sc_l["lam"]["fedspeed"] == sc_l["lam"]["fedsmoo"], "the paragraph gives one λ for both"
    ss, ds, sd, pd_, sps = (sp[k] for k in ("fedsmoo-fedsam", "feddyn-fedsam", "fedsmoo-feddyn", "fedspeed-feddyn",
                                            "fedsmoo-fedspeed"))
    af, asm = sp["fedsmoo_adaptive-fedavg"], sp["fedsmoo_adaptive-fedsmoo"]
    text = (
        f"Final accuracy as in the claims table (the mean of the last {sc_l['k']} evaluations), paired by seed. "
        f"**FedSMOO is above FedSAM in every seed**, by {ss['mean']:+.2f} points (from {ss['min']:+.2f} to {ss['max']:+.2f}), "
        f"but nearly all of that is FedDyn's dual: FedDyn alone is {ds['mean']:+.2f} points above FedSAM, and FedSMOO − "
        f"FedDyn is {sd['mean']:+.2f}, positive in {sd['positive']} of {sd['seeds']} seeds. **SAM on top of the same dual "
        f"correction** adds little: FedSpeed (FedDyn + local SAM) is {pd_['mean']:+.2f} points from FedDyn "
        f"({pd_['positive']} of {pd_['seeds']} seeds above), and FedSMOO's globally corrected perturbation adds nothing to "
        f"FedSpeed's local one: FedSMOO − FedSpeed {sps['mean']:+.2f}, below in each of the {sps['seeds']} seeds both ran "
        f"(both at their tuned λ = {sc_l['lam']['fedsmoo']:g}, FedDyn at {sc_l['lam']['feddyn']:g}). The blog's adaptive variant, "
        f"{af['seeds']} seeds: {af['mean']:+.2f} points from FedAvg and {asm['mean']:+.2f} from FedSMOO, above the one and "
        f"below the other in each seed; in its {sc_l['warmup']} warm-up rounds its training loss and accuracy equal "
        f"FedAvg's exactly, seed by seed (the grey line of its panels is FedAvg's mean over six seeds, its own mean is over "
        f"three, so the two do not coincide there).")
    return Lesson("curves", sc_l, text)



@reads("05_adaptive_lambda_rho")
def adaptive(ctx: Context) -> Lesson:
    smoo_params = ctx.parameters("05_fedsmoo_curves")["algorithm_params"]
    ada_cpu = ctx.table("05_adaptive_lambda_rho", "per_seed")
    ada_params = ctx.parameters("05_adaptive_lambda_rho")["algorithm_params"]
    ada_cpu_hp = fedlab.get_algorithm("fedsmoo_adaptive", ada_params).hp  # what the committed runs ran with
    ada_post = ada_cpu[ada_cpu["round"] > ada_cpu_hp.warmup_rounds]
    ada_by_round = ada_post.groupby("round")["lambda_k_mean"].mean()  # the mean over seeds, per round
    ada_tune = pd.read_csv(tuning_dir() / "dirichlet-0.1" / "fedsmoo_adaptive.csv").sort_values("rho_max")
    ada_tune_meta = json.loads((tuning_dir() / "dirichlet-0.1" / "fedsmoo_adaptive.json").read_text())
    ad_l = {
        "seeds": int(ada_cpu["seed"].nunique()), "warmup": int(ada_cpu_hp.warmup_rounds),
        "rho_max": float(ada_cpu_hp.rho_max), "grid": [float(v) for v in ada_tune["rho_max"]],
        "declared": [float(v) for v in ada_tune_meta["protocol"]["declared_grid"]["rho_max"]],
        "score_floor": 100 * float(ada_tune["score"].iloc[0]), "score_top": 100 * float(ada_tune["score"].iloc[-1]),
        "lam_min": float(ada_post["lambda_k_mean"].min()), "lam_max": float(ada_post["lambda_k_mean"].max()),
        "lam_ceiling": float(ada_cpu_hp.lam_max),
        "at_ceiling": int((ada_post["lambda_k_mean"] >= ada_cpu_hp.lam_max - 1e-6).sum()),
        "lam_first10": float(ada_by_round.iloc[:10].mean()), "lam_last10": float(ada_by_round.iloc[-10:].mean()),
        "rho_min": float(ada_post["rho_k_mean"].min()), "rho_max_seen": float(ada_post["rho_k_mean"].max()),
        "fedsam_rho": float(smoo_params["fedsam"]["rho"])}
    assert ad_l["rho_max"] == min(ad_l["grid"]) < min(ad_l["declared"]), "ρ_max: the floor of a grid extended below"
    assert "rho_max" in ada_tune_meta["protocol"]["on_edge"], "still on the edge after the extensions"
    assert (ada_tune["score"].diff().dropna() < 0).all(), "the score falls with every larger ρ_max"
    assert ad_l["at_ceiling"] == 0 and ad_l["lam_max"] < ad_l["lam_ceiling"], "λ_k never at its ceiling"
    assert ad_l["lam_last10"] > ad_l["lam_first10"], "λ_k grows over the run"
    assert ad_l["rho_max_seen"] < ad_l["rho_max"], "ρ_k below ρ_max"
    text = (
        f"**The blog variant's SAM tunes towards off.** Its radius ρ_max tuned to {ad_l['rho_max']:g}, the smallest value "
        f"tried: its declared grid ({', '.join(f'{v:g}' for v in ad_l['declared'])}) was extended downwards to "
        f"{', '.join(f'{v:g}' for v in ad_l['grid'])}, and the optimum stayed on the lower edge, the validation score "
        f"falling with every larger ρ_max ({ad_l['score_floor']:.1f} % at {ad_l['grid'][0]:g}, {ad_l['score_top']:.1f} % at "
        f"{ad_l['grid'][-1]:g}). After the {ad_l['warmup']} warm-up rounds the mean λ_k over the sampled clients stays "
        f"between {ad_l['lam_min']:.3f} and {ad_l['lam_max']:.3f}, never at its ceiling {ad_l['lam_ceiling']:g}, and grows "
        f"over the run (mean over seeds {ad_l['lam_first10']:.3f} in the first 10 rounds after the warm-up, "
        f"{ad_l['lam_last10']:.3f} in the last 10); ρ_k stays between {ad_l['rho_min']:.4f} and {ad_l['rho_max_seen']:.4f}. "
        f"The rule does not saturate, and its radius is small: at most {100 * ad_l['rho_max_seen'] / ad_l['fedsam_rho']:.0f} % "
        f"of FedSAM's tuned ρ = {ad_l['fedsam_rho']:g} ({ad_l['seeds']} seeds).")
    return Lesson("adaptive", ad_l, text)


@summarises("05_fedsmoo")
def summary(lessons: dict[str, dict[str, Any]]) -> str:
    ql, cvl, adl = (lessons[k] for k in ("quadratic", "curves", "adaptive"))
    cvp = cvl["pairs"]
    assert cvp["fedsmoo-feddyn"]["mean"] < cvp["feddyn-fedsam"]["mean"], "checked in §5"
    return (
        f"* **On Fashion-MNIST FedSMOO's lead over FedSAM ({cvp['fedsmoo-fedsam']['mean']:+.2f} points, every seed) is "
        f"FedDyn's** ({cvp['feddyn-fedsam']['mean']:+.2f}); what FedSMOO adds to FedDyn, {cvp['fedsmoo-feddyn']['mean']:+.2f} "
        f"points, is not there in every seed ({cvp['fedsmoo-feddyn']['positive']} of {cvp['fedsmoo-feddyn']['seeds']}).\n"
        f"* **SAM on top of the dual correction does little at this scale, and the global perturbation correction "
        f"nothing**: FedSpeed − FedDyn {cvp['fedspeed-feddyn']['mean']:+.2f}, FedSMOO − FedSpeed "
        f"{cvp['fedsmoo-fedspeed']['mean']:+.2f} points ({cvp['fedsmoo-fedspeed']['seeds']} seeds).\n"
        f"* **The blog's variant** ({adl['seeds']} seeds) sits between FedAvg and FedSMOO "
        f"({cvp['fedsmoo_adaptive-fedavg']['mean']:+.2f} and {cvp['fedsmoo_adaptive-fedsmoo']['mean']:+.2f} points), with its "
        f"radius tuned to the floor of its grid (ρ_max = {adl['rho_max']:g}) and λ_k below its ceiling throughout; "
        f"on the quadratic it stalls farther out than FedAvg ({ql['final']['fedsmoo_adaptive']:.3f} against "
        f"{ql['final']['fedavg']:.3f}).")
