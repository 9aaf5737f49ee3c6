"""The closing part of ``make run``: three methods on the cpu profile's federation, with tuned settings.

``python -m lab.tools.summary`` trains (or loads) FedAvg, FedSAM and FedVSSAM on the Dirichlet-0.1
split at seed 0 as the committed evidence ran them (:func:`evidence_runs`: the configs of notebook 10's
committed seed-0 records, hyperparameters tuned for that split on held-out validation data), so they are
loaded instead of trained; a method without such a record runs on the cpu profile's federation with its
tuned hyperparameters (:func:`~lab.evidence.protocol.tuned_params`). It prints
each method's settings and where they come from, its final test accuracy (the claims table's,
:func:`~lab.evidence.protocol.final_metric`, with how it was computed) and status, then the verdict
counts of the claims table and where the figures and executed notebooks are. One seed is a
demonstration, not evidence: the seeds and intervals are in the claims table.
"""
from __future__ import annotations

import argparse

METHODS = ("fedavg", "fedsam", "fedvssam")
"""The three methods; every setting comes from the tuning (as in notebook 10), else the method's defaults."""
BENCHMARK_FIGURE = "10_benchmarks_bars_fmnist"
"""The committed figure whose run records name the federation the committed evidence was measured on."""


def evidence_runs(figures_dir=None):  # type: ignore[no-untyped-def]
    """The committed evidence's seed-0 Dirichlet-0.1 run of each of :data:`METHODS`: ``{method: (config, record
    key)}``, read from the records behind :data:`BENCHMARK_FIGURE` (their settings are the ones the committed
    figures were measured with, whichever federation and tuning the cpu parameter files name for the next run)."""
    from pathlib import Path

    from lab.evidence.protocol import split_key
    from lab.evidence.records import load_record, sidecar
    from lab.repro import FIGURES_DIR

    figures_dir = FIGURES_DIR if figures_dir is None else Path(figures_dir)
    try:  # the sidecar decides which records are shown: checked against the manifest like them
        keys = sidecar(BENCHMARK_FIGURE, figures_dir).get("records") or []
    except FileNotFoundError:  # the figure was never made: every method is trained instead
        keys = []
    out = {}
    for key in (k for k in keys if k.split("-", 1)[0] in METHODS):
        res = load_record(key, figures_dir / "records")
        if res is not None and res.config.seed == 0 and split_key(res.config) == "dirichlet-0.1":
            out.setdefault(res.config.algorithm, (res.config, key))
    return out


def shown_comparisons(verdicts) -> list[str]:  # type: ignore[no-untyped-def]
    """One aligned line per paired comparison of the claims table between two of :data:`METHODS` as tuned (no
    hyperparameters pinned) at Dirichlet 0.1: the difference left − right on the protocol's final metric with its
    interval and n, the comparison's own verdict and the claim's."""
    from lab.tools.plots import method_label

    rows = []
    for v in verdicts:
        select = v.claim.select or {}
        if v.claim.left.get("algorithm") not in METHODS or v.claim.left.get("params") or v.claim.left.get("config") \
                or select.get("alpha") != 0.1:
            continue
        for c in v.comparisons:
            if c.right.get("algorithm") not in METHODS or c.right.get("params") or c.right.get("config") \
                    or c.difference is None:
                continue
            pair = f"{method_label(v.claim.left['algorithm'])} − {method_label(c.right['algorithm'])}"
            rows.append((pair, c.difference.format(scale=100) + " pts", c.verdict, f"{v.verdict} ({v.claim.id})"))
    if not rows:
        return ["(no claim compares two of these methods)"]
    head = ("comparison", "paired difference", "this comparison", "the claim")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(3)]
    return ["  ".join([r[0].ljust(widths[0]), r[1].ljust(widths[1]), r[2].ljust(widths[2]), r[3]])
            for r in [head, *rows]]


def main(argv: list[str] | None = None) -> int:
    """``python -m lab.tools.summary``: damaged evidence (a record, sidecar, CSV or tuning file refused by
    :mod:`lab.evidence.integrity`) is one line ``error: <file>: <what>; <fix>`` on stderr and exit 4, as in
    ``python -m lab claims``, never a traceback."""
    import sys

    from lab.evidence.integrity import EvidenceError

    try:
        return _summary(argv)
    except EvidenceError as err:
        print(f"error: {err}", file=sys.stderr)
        return 4


def _summary(argv: list[str] | None) -> int:
    import pandas as pd

    import fedlab
    from lab.evidence.claims import evaluate_claims_paired, verdict_counts
    from lab.evidence.paired import MIN_SEEDS_TO_DECIDE
    from lab.evidence.protocol import final_metric, profile_federation, split_key, tuned_params
    from lab.evidence.records import run_or_load
    from lab.tools.plots import method_label

    p = argparse.ArgumentParser(prog="python -m lab.tools.summary", description=__doc__.splitlines()[0])
    p.add_argument("--client-threads", type=int, default=1, help="clients trained at once (same numbers)")
    p.add_argument("--rounds", type=int, default=None, help="fewer rounds (a quick look; then not notebook 10's runs)")
    p.add_argument("--runs-dir", default=None, help="where the runs live (default: <repo>/runs)")
    args = p.parse_args(argv)

    committed = evidence_runs()
    configs, sources = {}, {}
    for method in METHODS:
        if method in committed:  # the evidence's own run: loaded, not trained
            configs[method], sources[method] = committed[method][0], f"committed record {committed[method][1]}"
        else:
            tuned = tuned_params(method, profile_federation("cpu"))
            configs[method] = profile_federation("cpu").replace(algorithm=method, algorithm_params=dict(tuned.params))
            sources[method] = tuned.source
    configs = {m: c.replace(client_threads=args.client_threads, runs_dir=args.runs_dir,
                            **({} if args.rounds is None else {"rounds": args.rounds})) for m, c in configs.items()}
    base = configs[METHODS[0]]
    print(f"Three methods on one federation: {base.dataset}, {base.model}, {base.n_clients} clients, "
          f"{split_key(base)}, {base.participation:.0%} per round, {base.rounds} rounds of K={base.local_steps}, "
          f"seed {base.seed}:")
    rows, hows = [], []
    for method, cfg in configs.items():
        res = run_or_load(cfg)
        final = final_metric(res)  # the claims table's final accuracy, not the last round's
        hows.append(final.how)
        rows.append({"method": method_label(method), "settings": ", ".join(f"{k}={v}" for k, v in
                                                                         cfg.algorithm_params.items()) or "defaults",
                     "from": sources[method], "final test acc": round(100 * final.value, 2),
                     "status": res.status})
    table = pd.DataFrame(rows)
    with pd.option_context("display.max_colwidth", 70, "display.width", 200):
        print(table.to_string(index=False))
    print(f"final test acc: {'; '.join(dict.fromkeys(hows))} (lab.evidence.protocol.final_metric)")
    verdicts = evaluate_claims_paired()
    claims = [v for v in verdicts if v.claim.kind == "claim"]
    print()
    print("The same methods over every seed (the claims table's paired comparisons among them, Dirichlet 0.1):")
    for line in shown_comparisons(verdicts):
        print("  " + line)
    tested = [v for v in claims if v.tested]  # holds / fails / inconclusive: the only verdicts counted
    decided = verdict_counts([v.verdict for v in tested])
    at_n = verdict_counts([v.as_if if v.verdict.startswith("inconclusive (n <") else v.verdict for v in tested])
    apart = verdict_counts([v.verdict for v in claims if not v.tested])
    print()
    print(f"One seed each: a demonstration. The evidence is the claims table (paired over seeds, a verdict from "
          f"n ≥ {MIN_SEEDS_TO_DECIDE} seed pairs, Holm-adjusted within each paper's family): {decided}; read at the "
          f"committed seeds: {at_n}; not tested, each with its reason: {apart} "
          "(README 'Results', figures/claims_cpu.md).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
