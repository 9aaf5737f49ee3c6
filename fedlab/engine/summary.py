"""A run's summary (``summary.json``, ``RunResult.summary``): derived from its rows and status alone,
so the view written after a checkpoint and the one rebuilt from it agree byte for byte."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedlab._version import __version__


def run_summary(sim: Any, rows: list[dict[str, Any]], status: str) -> dict[str, Any]:
    """Status, accuracies, timing and provenance of the run of ``sim`` (a :class:`fedlab.engine.Simulation`)
    after ``rows``; with ``client_eval``, the last evaluated round's per-client statistics
    (:meth:`fedlab.engine.client_eval.ClientEval.summary`)."""
    config = sim.config
    accs = [r["test_acc"] for r in rows if not math.isnan(r["test_acc"])]
    return {
        "status": status,
        "algorithm": config.algorithm,
        "dataset": config.dataset,
        "rounds_done": len(rows),
        "rounds": config.rounds,
        "final_test_acc": accs[-1] if accs else None,
        "best_test_acc": max(accs) if accs else None,
        "final_train_loss": rows[-1]["train_loss"] if math.isfinite(rows[-1]["train_loss"]) else None,
        "mean_round_seconds": float(np.mean([r["wall_seconds"] for r in rows])),
        "uplink_floats_total": int(sum(r["uplink_floats"] for r in rows)),
        "n_params": sim.model.dim,
        "n_classes": sim.dataset.n_classes,
        # what "test_acc" was measured on: the held-out validation part of the training set when tuning
        "eval_set": "validation" if config.validation_size is not None else "test",
        "config_hash": sim.config_hash,
        "partition_fingerprint": sim.partition.fingerprint,
        "fedlab_version": __version__,
        **(sim.client_eval.summary(rows) if sim.client_eval is not None else {}),
    }
