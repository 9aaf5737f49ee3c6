"""What a run carries from round to round (checkpointed) and what one round hands back; and the
interruption a stopped run raises."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from torch import Tensor

from fedlab.algorithms import RoundInfo, State
from fedlab.engine.clients import ClientResult


class RunInterrupted(KeyboardInterrupt):
    """A run stopped on request (``stop`` was set, e.g. by Ctrl-C) at a round boundary, checkpointed there.

    A KeyboardInterrupt, so ``except Exception`` does not swallow it; running the same config again
    resumes the run from ``rounds_done`` bit-identically.
    """

    def __init__(self, run_dir: Path, rounds_done: int, rounds: int) -> None:
        self.run_dir, self.rounds_done, self.rounds = run_dir, rounds_done, rounds
        super().__init__(f"run {run_dir} stopped after round {rounds_done} of {rounds} and was checkpointed "
                         "there; run the same config again to resume it")


@dataclass
class TrainingState:
    """Everything that evolves during a run (and is checkpointed): server and client states."""

    server: State
    client_states: dict[int, State]
    theta0: Tensor  # the initial global model (stateful methods initialise client state from it)
    next_round: int = 0


@dataclass
class RoundOutcome:
    clients: np.ndarray
    info: RoundInfo
    msg: State
    results: list[ClientResult]
