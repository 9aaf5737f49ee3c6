"""The lab's command line: ``python -m lab bench | claims | figures --dry-run | regime``.

These commands serve this repository's evidence (the committed records, the claims of
``figures/claims.yaml``, the cpu profile's budget and tuning) and its benchmarks; the library's own
commands (``run``, ``sweep``, ``algorithms``, ``flower-sim``) stay ``python -m fedlab ...``. Errors are
one line ``error: ...`` on stderr with the library's exit codes (:func:`fedlab.cli.dispatch`).
"""
from __future__ import annotations

import argparse
import sys

from fedlab.cli import dispatch
from lab.evidence.integrity import EvidenceError

__all__ = ["BENCH_COMMANDS", "build_parser", "main"]

BENCH_COMMANDS = {
    "analysis": "lab.bench.curvature",  # curvature and landscape: fedlab new/old vs plain autograd
    "flsim": "lab.bench.flsim",  # FL-Simulator's CPU configuration: seconds per round, training and evaluation
    "gpu": "lab.bench.gpu",  # the CUDA check of the speed goals (--dry-run: the same code on CPU)
    "step": "lab.bench.step",  # ms per local step: fedlab's engine vs the plain PyTorch loop, in pairs
    "store": "lab.bench.store",  # ms per client of state traffic: client states in RAM vs on disk, in pairs
    "sweep": "lab.bench.sweep",  # the sweep backends' wall time: sequential vs local pool vs Ray
}
"""``python -m lab bench NAME ...`` runs ``main`` of these modules; anything else goes to :mod:`lab.bench.speed`."""


def _cmd_bench(args: argparse.Namespace) -> int:
    import importlib

    rest = list(args.bench_args)
    if rest[:1] and rest[0] in BENCH_COMMANDS:
        return importlib.import_module(BENCH_COMMANDS[rest[0]]).main(rest[1:])
    from lab.bench.speed import main as bench_main

    return bench_main(rest)


def _cmd_claims(args: argparse.Namespace) -> int:
    """``claims [--decide-at N] [--csv PATH] [--write]``: the claims read by seed pairs (their one reading)."""
    from lab.evidence.paired import MIN_SEEDS_TO_DECIDE

    decide_at = MIN_SEEDS_TO_DECIDE if args.decide_at is None else args.decide_at
    if decide_at < 2:
        print(f"error: --decide-at must be at least 2 (an interval needs two pairs), got {decide_at}", file=sys.stderr)
        return 2
    if args.write and decide_at != MIN_SEEDS_TO_DECIDE:
        print(f"error: --write records the protocol's reading (decided from {MIN_SEEDS_TO_DECIDE} pairs); "
              "--decide-at is for reading only", file=sys.stderr)
        return 2
    return _claims_paired(args, decide_at)


def _claims_paired(args: argparse.Namespace, decide_at: int) -> int:
    """Every claim's verdict (with the unpaired finding's beside it), the findings; with ``--write`` the committed
    files."""
    from lab.evidence.claims import evaluate_claims_paired, paired_table, paired_text, write_claims
    from lab.evidence.findings import evaluate_findings, findings_table

    verdicts = evaluate_claims_paired(min_seeds_to_decide=decide_at)
    findings = evaluate_findings(decide_at=decide_at)
    print(paired_text(verdicts))
    print("\nfindings beyond the claims (figures/findings.yaml):")
    for f in findings:
        print(f"  {f.finding.id}: {f.answer}\n      {f.numbers}")
    if args.csv is not None:
        paired_table(verdicts).to_csv(args.csv, index=False, float_format="%.6g")
        print(f"wrote {args.csv}")
    if args.write:
        from lab.repro import FIGURES_DIR
        from lab.tools.forest import claims_forest

        from lab.evidence.integrity import rerecord

        forest = claims_forest()  # first: the pages link the plot
        rerecord([forest["csv"]], FIGURES_DIR)  # claims data (claims_*.csv): this named step records its digest
        for path in forest.values():
            print(f"wrote {path}")
        findings_table(findings).to_csv(FIGURES_DIR / "findings_cpu.csv", index=False, float_format="%.6g")
        rerecord([FIGURES_DIR / "findings_cpu.csv"], FIGURES_DIR)  # findings data: recorded as it is written
        print(f"wrote {FIGURES_DIR / 'findings_cpu.csv'}")
        for path in write_claims(verdicts, findings=findings).values():
            print(f"wrote {path}")
    return 0


def _cmd_figures(args: argparse.Namespace) -> int:
    from lab.evidence.budget import estimate, print_estimate

    if not args.dry_run:
        print("error: only `figures --dry-run` is implemented here; `make figures` runs the notebooks",
              file=sys.stderr)
        return 2
    costs = None
    if args.grad_ms is not None:  # a quiet-machine calibration instead of measuring on a busy one
        fwd = args.forward_ms if args.forward_ms is not None else args.grad_ms / 3
        costs = {"cnn": {"grad_per_sample": args.grad_ms / 1e3, "forward_per_sample": fwd / 1e3}}
    est = estimate(seeds=args.seeds, cores=args.cores, costs=costs)
    return 0 if print_estimate(est, args.budget_hours) else 1


def _cmd_regime(args: argparse.Namespace) -> int:
    """``regime pilot|analyse|decide``: aliases of ``study plan|train|analyse|decide lab/regime/pilot.yaml``
    (``pilot --dry-run`` plans, ``pilot`` trains); ``regime rerun-*``: the rerun of the chosen regime."""
    if args.regime_command in ("pilot", "analyse", "decide"):
        from lab.regime.pilot import PILOT_FILE
        from lab.study.runner import main as study_main

        command = ("plan" if args.dry_run else "train") if args.regime_command == "pilot" else args.regime_command
        return study_main(argparse.Namespace(**{**vars(args), "file": PILOT_FILE, "study_command": command}))
    if args.regime_command in ("rerun-plan", "rerun-tune", "rerun-train", "rerun-measured"):
        from lab.regime import rerun

        return {"rerun-plan": rerun.main, "rerun-tune": rerun.main_tune, "rerun-train": rerun.main_train,
                "rerun-measured": rerun.main_measured}[args.regime_command](args)
    from lab.regime.params import main as params_main

    return params_main(args)


def _study_options(parser: argparse.ArgumentParser, command: str, *, file: bool = True) -> None:
    """The options of ``study COMMAND`` (``file``: the study file; its ``regime`` aliases name the pilot's).
    Every command takes every kind's options, so one parser serves a map and the staged pilot alike: a map
    refuses ``--stage`` and ``--candidate`` when training, the pilot ignores ``--no-figure``."""
    if file:
        parser.add_argument("file", type=__import__("pathlib").Path,
                            help="the study file (lab/study/failure_map.yaml, lab/regime/pilot.yaml)")
    if command in ("plan", "train"):
        parser.add_argument("--stage", choices=("A", "B"), default=None, help="a staged study's stage (default A)")
        parser.add_argument("--workers", type=int, default=2, help="runs trained at once (one process, one thread "
                                                                   "each); what a staged plan's wall time is for")
    if command != "analyse":
        parser.add_argument("--candidate", action="append", default=None, metavar="NAME",
                            help="a staged study: only this candidate (repeatable; default: all, cheapest first; "
                                 "decide: every candidate with stage-B records)")
    if command == "plan":
        parser.add_argument("--write", action="store_true", help="a map: write figures/<study>/plan.md")
        parser.add_argument("--probe", type=int, default=0, metavar="ROUNDS",
                            help="a staged study: first measure ROUNDS rounds of FedAvg and FedSAM per candidate "
                                 "(a temporary runs folder) to cost what no record measured")
    if command == "train":
        parser.add_argument("--max-runs", type=int, default=None, help="stop after this many runs")
    if command in ("analyse", "decide"):
        parser.add_argument("--no-figure", action="store_true", help="a map: write the decision and table only")
        parser.add_argument("--readme", action="store_true", help="a map: also write the headline into README.md")


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m lab`` parser (bench, claims, figures, regime)."""
    parser = argparse.ArgumentParser(prog="python -m lab", description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--debug", action="store_true", help="show the Python traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("bench", help="timings: ms per round per algorithm, speed modes (`bench --help`); "
                                     "bench step (ms per local step vs a plain loop) | store (client states in RAM vs on disk) | analysis | flsim | gpu | sweep",
                       add_help=False)
    b.add_argument("bench_args", nargs=argparse.REMAINDER)
    c = sub.add_parser("claims", allow_abbrev=False,
                       help="evaluate the papers' claims (figures/claims.yaml) by seed pairs, and the findings "
                            "(figures/findings.yaml), from committed results")
    c.add_argument("--write", action="store_true",
                   help="write figures/claims_cpu.md (compact table), figures/claims_cpu.csv (numeric), "
                        "figures/findings_cpu.csv, the forest plot figures/claims_forest.* and the generated "
                        "blocks of README.md and figures/README.md")
    c.add_argument("--paired", action="store_true", help="the default reading (kept as a no-op for old scripts)")
    c.add_argument("--decide-at", type=int, default=None, metavar="N",
                   help="pairs needed for a verdict (default 6; 3 reads the committed evidence as if decided)")
    c.add_argument("--csv", type=str, default=None, metavar="PATH",
                   help="write the numeric table (one row per comparison) to PATH")
    f = sub.add_parser("figures", allow_abbrev=False,
                       help="`--dry-run`: estimate the cpu profile's time (make figures) without training",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    f.add_argument("--dry-run", action="store_true", help="print the per-notebook estimate; train nothing")
    f.add_argument("--seeds", type=int, default=3, help="seeds per comparison")
    f.add_argument("--cores", type=int, default=2, help="CPU cores (client_threads)")
    f.add_argument("--grad-ms", type=float, default=None,
                   help="ms per sample-gradient of the cnn instead of measuring it (README Benchmarks, quiet "
                        "2-core machine: 2145 ms per FedAvg round / 3200 sample-gradients = 0.67)")
    f.add_argument("--forward-ms", type=float, default=None, help="ms per sample-forward (default: grad-ms / 3)")
    f.add_argument("--budget-hours", type=float, default=4.0, help="exit 1 if the estimate exceeds this")
    r = sub.add_parser("regime", allow_abbrev=False,
                       help="the regime pilot of issue 28 (lab/regime/criteria.yaml): `regime pilot` trains a "
                            "stage resumably, `regime analyse` writes figures/regime/pilot.*, `regime decide` "
                            "stage B's decisions figures/regime/stage_b.*, `regime rerun-plan` the rerun's R5")
    rsub = r.add_subparsers(dest="regime_command", required=True)
    pilot = rsub.add_parser("pilot", allow_abbrev=False, help="train the runs of a stage that have no record "
                            "(figures/regime/records): `study train lab/regime/pilot.yaml`; --dry-run: `study plan`")
    _study_options(pilot, "train", file=False)
    pilot.add_argument("--dry-run", action="store_true", help="print the planned runs and the expected wall time")
    pilot.add_argument("--probe", type=int, default=0, metavar="ROUNDS", help="with --dry-run: see `study plan --help`")
    _study_options(rsub.add_parser("analyse", allow_abbrev=False, help="stage A's R1-R5 from the records: figures/"
                                   "regime/pilot_table.csv, pilot.png/pdf, pilot.md (`study analyse` of pilot.yaml)"),
                   "analyse", file=False)
    _study_options(rsub.add_parser("decide", allow_abbrev=False, help="stage B's decisions R1-R5 and the selection "
                                   "outcome: figures/regime/stage_b.* (`study decide` of pilot.yaml)"),
                   "decide", file=False)
    rp = rsub.add_parser("rerun-plan", allow_abbrev=False,
                         help="R5 for the rerun: every run of lab/regime/rerun.yaml and the claims, costed from "
                              "the regime's stage-B seconds: figures/regime/rerun_plan.md (exit 1 over budget)")
    rp.add_argument("--plan", type=__import__("pathlib").Path, default=None,
                    help="the plan file (default lab/regime/rerun.yaml)")
    rm = rsub.add_parser("rerun-measured", allow_abbrev=False,
                         help="the rerun plan's estimate against the committed records' wall times: "
                              "figures/regime/rerun_measured.md")
    rm.add_argument("--plan", type=__import__("pathlib").Path, default=None,
                    help="the plan file (default lab/regime/rerun.yaml)")
    rt = rsub.add_parser("rerun-tune", allow_abbrev=False,
                         help="tune the rerun's methods on its tuning split, resumably: figures/rerun/tuning, "
                              "figures/records")
    rt.add_argument("--plan", type=__import__("pathlib").Path, default=None,
                    help="the plan file (default lab/regime/rerun.yaml)")
    rt.add_argument("--methods", default=None,
                    help="comma-separated methods (default: every method the plan trains that has a grid)")
    rt.add_argument("--client-threads", type=int, default=2, help="clients trained at once (same numbers)")
    rr = rsub.add_parser("rerun-train", allow_abbrev=False,
                         help="train the rerun plan's runs that have no record, resumably, seed-major: "
                              "figures/records (a tuned method waits for its tuning file)")
    rr.add_argument("--plan", type=__import__("pathlib").Path, default=None,
                    help="the plan file (default lab/regime/rerun.yaml)")
    rr.add_argument("--workers", type=int, default=2, help="runs trained at once (one process, one thread each)")
    rr.add_argument("--max-runs", type=int, default=None, help="stop after this many runs")
    rr.add_argument("--only", default=None, metavar="NOTEBOOKS",
                    help="comma-separated notebooks of the plan's analyses: train only the models they read "
                         "(then run those notebooks in the same session)")
    rq = rsub.add_parser("rerun-params", allow_abbrev=False,
                         help="write the rerun's federation into notebooks/params/*.cpu.yaml (between marker lines)")
    rq.add_argument("--plan", type=__import__("pathlib").Path, default=None,
                    help="the plan file (default lab/regime/rerun.yaml)")
    rq.add_argument("--check", action="store_true", help="only list the stale files (exit 1 if any)")
    st = sub.add_parser("study", allow_abbrev=False,
                        help="a pre-registered study (lab/study/failure_map.yaml, lab/regime/pilot.yaml): `study plan` "
                             "its runs and cost, `study train` them resumably (refused unless committed), `study "
                             "analyse|decide` its estimands and decisions")
    ssub = st.add_subparsers(dest="study_command", required=True)
    for command, text in (("plan", "the runs and their estimated cost; a map writes its budget (exit 1 over it)"),
                          ("train", "train the runs no committed record holds, writing each record as it finishes"),
                          ("analyse", "the estimands from the committed records (a map: figures/<study>/decision.md, "
                                      "map.csv, the figure; the pilot: stage A's screening)"),
                          ("decide", "the pre-registered decisions (the pilot: stage B's; a map: as analyse)")):
        _study_options(ssub.add_parser(command, allow_abbrev=False, help=text), command)
    return parser


def _cmd_study(args: argparse.Namespace) -> int:
    from lab.study.runner import main as study_main

    return study_main(args)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:  # the benchmark has its own parser: pass its options through untouched
        return _cmd_bench(argparse.Namespace(bench_args=[a for a in argv[1:] if a != "--"]))
    args = build_parser().parse_args(argv)
    commands = {"claims": _cmd_claims, "figures": _cmd_figures, "regime": _cmd_regime, "study": _cmd_study}
    from lab.study.spec import StudyError

    return dispatch(commands[args.command], args, errors=((EvidenceError, 4), (StudyError, 2)))
