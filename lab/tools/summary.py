"""The closing part of ``make run``: three methods on the cpu profile's federation, with tuned settings.

``python -m lab.tools.summary`` trains (or loads) FedAvg, FedSAM and FedVSSAM on the Dirichlet-0.1
split the committed evidence was measured on (:func:`evidence_federation`: the config of notebook 10's
committed seed-0 FedAvg record; the same rounds and local steps for all three), each
with the hyperparameters tuned for that split on held-out validation data
(:func:`~lab.evidence.protocol.tuned_params`), at seed 0. These are exactly notebook 10's seed-0 runs
of that split, so where their records are committed they are loaded instead of trained. It prints
each method's settings and where they come from, its final test accuracy and status, then the verdict
counts of the claims table and where the figures and executed notebooks are. One seed is a
demonstration, not evidence: the seeds and intervals are in the claims table.
"""
from __future__ import annotations

import argparse

METHODS = ("fedavg", "fedsam", "fedvssam")
"""The three methods; every setting comes from the tuning (as in notebook 10), else the method's defaults."""
BENCHMARK_FIGURE = "10_benchmarks_bars_fmnist"
"""The committed figure whose run records name the federation the committed evidence was measured on."""


def evidence_federation(figures_dir=None):  # type: ignore[no-untyped-def]
    """The federation of the committed evidence: the config of notebook 10's seed-0 FedAvg record on Dirichlet
    0.1 (behind :data:`BENCHMARK_FIGURE`), so ``make run`` loads committed runs whichever federation the cpu
    parameter files name for the next run; the cpu profile's (:func:`~lab.evidence.protocol.profile_federation`)
    when no such record is committed."""
    import json
    from pathlib import Path

    from lab.evidence.protocol import profile_federation, split_key
    from lab.evidence.records import load_record
    from lab.repro import FIGURES_DIR

    figures_dir = FIGURES_DIR if figures_dir is None else Path(figures_dir)
    sidecar = figures_dir / f"{BENCHMARK_FIGURE}.json"
    keys = json.loads(sidecar.read_text()).get("records") or [] if sidecar.exists() else []
    for key in (k for k in keys if k.startswith("fedavg-")):
        res = load_record(key, figures_dir / "records")
        if res is not None and res.config.seed == 0 and split_key(res.config) == "dirichlet-0.1":
            return res.config.replace(algorithm="fedavg", algorithm_params={})
    return profile_federation("cpu")


def main(argv: list[str] | None = None) -> int:
    import pandas as pd

    import fedlab
    from lab.evidence.claims import evaluate_claims_paired, verdict_counts
    from lab.evidence.paired import MIN_SEEDS_TO_DECIDE
    from lab.evidence.protocol import split_key, tuned_params
    from lab.evidence.records import run_or_load
    from lab.tools.plots import method_label

    p = argparse.ArgumentParser(prog="python -m lab.tools.summary", description=__doc__.splitlines()[0])
    p.add_argument("--client-threads", type=int, default=1, help="clients trained at once (same numbers)")
    p.add_argument("--rounds", type=int, default=None, help="fewer rounds (a quick look; then not notebook 10's runs)")
    p.add_argument("--runs-dir", default=None, help="where the runs live (default: <repo>/runs)")
    args = p.parse_args(argv)

    base = evidence_federation().replace(client_threads=args.client_threads, runs_dir=args.runs_dir)
    if args.rounds is not None:
        base = base.replace(rounds=args.rounds)
    print(f"Three methods on one federation: {base.dataset}, {base.model}, {base.n_clients} clients, "
          f"{split_key(base)}, {base.participation:.0%} per round, {base.rounds} rounds of K={base.local_steps}, "
          f"seed {base.seed}:")
    rows = []
    for method in METHODS:
        tuned = tuned_params(method, base)
        cfg = base.replace(algorithm=method, algorithm_params=dict(tuned.params))
        res = run_or_load(cfg)
        rows.append({"method": method_label(method), "settings": ", ".join(f"{k}={v}" for k, v in
                                                                         cfg.algorithm_params.items()) or "defaults",
                     "from": tuned.source, "final test acc": round(100 * res.final_accuracy, 2),
                     "status": res.status})
    table = pd.DataFrame(rows)
    with pd.option_context("display.max_colwidth", 70, "display.width", 200):
        print(table.to_string(index=False))
    claims = [v for v in evaluate_claims_paired() if v.claim.kind == "claim"]
    decided = verdict_counts([v.verdict for v in claims])
    at_n = verdict_counts([v.as_if if v.verdict.startswith("inconclusive (n <") else v.verdict for v in claims])
    print()
    print(f"One seed each: a demonstration. The evidence is the claims table (paired over seeds, a verdict from "
          f"n ≥ {MIN_SEEDS_TO_DECIDE} seed pairs): {decided}; read at the committed seeds: {at_n} "
          "(README 'Results', figures/claims_cpu.md).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
