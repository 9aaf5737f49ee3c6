"""What a run carries from round to round (checkpointed) and what one round hands back; and the
interruption a stopped run raises."""
from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from fedlab.algorithms import Algorithm, RoundInfo, State
from fedlab.config import Config
from fedlab.engine.clients import ClientResult
from fedlab.results import Checkpoint, CheckpointError
from fedlab.store.client_states import ClientStateError, DiskClientStates, use_disk


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
    client_states: MutableMapping[int, State]  # a dict, or DiskClientStates (see client_states)
    theta0: Tensor  # the initial global model (stateful methods initialise client state from it)
    next_round: int = 0


def client_states(config: Config, algorithm: Algorithm, theta0: Tensor, run_dir: Path,
                  saved: Mapping[int, State] | None = None) -> MutableMapping[int, State]:
    """Where a run keeps its clients' states: a dict (in RAM, saved inside ``checkpoint.pt``) or, with
    ``client_store="disk"`` (or ``"auto"`` and N × a state's bytes above ``client_state_budget_mb``),
    :class:`~fedlab.store.client_states.DiskClientStates` in the run folder. ``saved``: the states a
    checkpoint left (either kind), carried over into the store the config asks for, so a run may be
    resumed with the other store."""
    template = algorithm.client_init(theta0)
    if not use_disk(config.client_store, config.n_clients, template, config.client_state_budget_mb):
        return dict(saved.items()) if saved is not None else {}
    if isinstance(saved, DiskClientStates):
        return saved
    store = DiskClientStates.create(run_dir, config.n_clients, template, device=torch.device(config.device))
    for i, s in (saved or {}).items():
        store[i] = s
    return store


def saved_client_states(ckpt: Checkpoint, run_dir: Path, device: torch.device) -> Mapping[int, State]:
    """The client states a checkpoint left: inside it, or the run folder's disk store at the generation it
    names (CheckpointError, naming the file, if those files do not match)."""
    if ckpt.client_store is None:
        return {i: {k: v.to(device) for k, v in s.items()} for i, s in ckpt.client_states.items()}
    try:
        return DiskClientStates.resume(run_dir, ckpt.client_store, device=device)
    except ClientStateError as err:
        raise CheckpointError(str(err)) from None


def checkpointed_client_states(states: Mapping[int, State]) -> tuple[dict[int, State], dict | None]:
    """What a checkpoint keeps of ``states``: the states themselves, or (a disk store, its writes made
    durable now) none and the record :meth:`DiskClientStates.resume` reads them back with."""
    if isinstance(states, DiskClientStates):
        return {}, states.checkpoint()
    return dict(states), None


def personal_models(algorithm: Algorithm, state: TrainingState) -> Callable[[int], Tensor] | None:
    """Client i → its own model (:meth:`Algorithm.personal_model` of its state, of ``client_init(θ⁰)`` if it
    never took part), for a method whose clients keep models of their own; None for every other method."""
    if not algorithm.personal_models:
        return None
    return lambda i: algorithm.personal_model(state.client_states.get(i) or algorithm.client_init(state.theta0),
                                              state.server)


@dataclass
class RoundOutcome:
    clients: np.ndarray
    info: RoundInfo
    msg: State
    results: list[ClientResult]
