"""Cumulative cost columns of the metrics: what a run has sent, received and computed so far.

Each round adds, to the round's own ``uplink_floats`` / ``downlink_floats`` (counted from the tensors
really uploaded and broadcast, so SCAFFOLD's control variates count: 2·d each way), the columns

* ``grad_evals`` — minibatch gradient evaluations of the round: ``grad_evals_per_step`` of the method
  (the registry's ``grads/step``: 1 for SGD-based methods, 2 for SAM-based ones, whose ascent step
  costs one more gradient) times Σ_{i ∈ S_t} K_i, the local steps each sampled client ran (K in
  fixed-step mode, E·⌈n_i/B⌉ in epoch mode);
* ``cum_uplink_floats``, ``cum_downlink_floats``, ``cum_grad_evals`` — their sums over rounds 1..t;
* ``cum_uplink_bytes``, ``cum_downlink_bytes`` — the same traffic in bytes at the dtype of the
  tensors sent (4 per float32 element), the payload only (no protocol framing).

These are the x-axes of cost-normalised comparisons: accuracy against cumulative communication, or
against cumulative compute, where FedSAM's two gradients per step cost what they cost. They are
computed from the round's outcome, never from a model of it, and change no other number.
"""
from __future__ import annotations

from typing import Any

from fedlab.engine.state import RoundOutcome

COST_COLUMNS = ("grad_evals", "cum_uplink_floats", "cum_downlink_floats", "cum_uplink_bytes", "cum_downlink_bytes",
                "cum_grad_evals")


def _bytes(state: dict[str, Any]) -> int:
    return sum(int(v.numel()) * v.element_size() for v in state.values())


def cost_columns(row: dict[str, Any], previous: dict[str, Any] | None, outcome: RoundOutcome,
                 grad_evals_per_step: int) -> dict[str, int]:
    """The cost columns of one round's ``row`` (which already has its uplink/downlink floats), given the
    previous round's row (``None`` for round 1) and the round's outcome."""
    before = previous if previous is not None else dict.fromkeys(COST_COLUMNS, 0)
    grads = grad_evals_per_step * sum(outcome.info.client_steps)
    up_bytes = sum(_bytes(r.upload) for r in outcome.results)
    down_bytes = _bytes(outcome.msg) * len(outcome.clients)
    return {"grad_evals": grads,
            "cum_uplink_floats": before["cum_uplink_floats"] + row["uplink_floats"],
            "cum_downlink_floats": before["cum_downlink_floats"] + row["downlink_floats"],
            "cum_uplink_bytes": before["cum_uplink_bytes"] + up_bytes,
            "cum_downlink_bytes": before["cum_downlink_bytes"] + down_bytes,
            "cum_grad_evals": before["cum_grad_evals"] + grads}
