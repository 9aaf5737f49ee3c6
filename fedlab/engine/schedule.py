"""Per-round learning-rate schedules (constant inside a round unless a method says otherwise).

* exponential: η_t = η_0 · γ^t, γ = 0.998 (FL-Simulator, FedACG; decay applied after each round)
* cosine:      η_t = ½ η_0 (1 + cos(π t / T)) (Liu's FedSWA/FedNSAM code, T = total rounds)
* constant:    η_t = η_0 (Caldarola's fedsam/fedgloss)
"""
from __future__ import annotations

import math


def learning_rate(round_: int, lr0: float, schedule: str, rounds: int, decay: float = 0.998) -> float:
    if schedule == "exponential":
        return lr0 * decay**round_
    if schedule == "cosine":
        return 0.5 * lr0 * (1.0 + math.cos(math.pi * round_ / rounds))
    if schedule == "constant":
        return lr0
    raise ValueError(f"lr_schedule={schedule!r} is invalid; allowed: exponential, cosine, constant")
