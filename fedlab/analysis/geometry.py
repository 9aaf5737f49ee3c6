"""Client geometry: how client gradients and one round's client updates point, and where the local
models land relative to the new global model.

* :func:`cosine_matrix` — pairwise cosine similarities of N vectors (client gradients, updates).
* :func:`gradient_similarity` — cos(∇F_i, ∇F_j) of the clients' full-batch gradients at θ; under
  heterogeneity off-diagonal entries drop, and turn negative for clients with disjoint classes.
* :func:`one_round_updates` — runs the engine's own client code (:class:`fedlab.engine.Simulation`:
  sampling, batches, algorithm, local steps) for one round and returns the local models θ_{i,K},
  the broadcast model θ^t and the aggregated θ^{t+1}.
* :meth:`RoundUpdates.flatness_distance` — per-client ‖θ_{i,K} − θ^{t+1}‖², the terms of FedNSAM's
  flatness distance Δ_D = (1/N) Σ_i ‖θ_{i,K} − θ^{t+1}‖² (the engine's ``flatness_distance`` metric is
  its mean over the sampled clients).
"""
from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor
from tqdm import tqdm

from fedlab.analysis.federation import check_clients, client_loss_fn
from fedlab.analysis.gradients import ClientGradients
from fedlab.models.functional import FlatModel

if TYPE_CHECKING:  # pragma: no cover
    from fedlab.config import Config
    from fedlab.data import Dataset

__all__ = ["RoundUpdates", "cosine_matrix", "flatness_distances", "gradient_similarity", "one_round_updates",
           "plot_similarity"]


def cosine_matrix(vectors: Tensor) -> Tensor:
    """``C[i, j] = ⟨v_i, v_j⟩ / (‖v_i‖ ‖v_j‖)`` for the rows of an ``(N, d)`` tensor (0 for a zero row)."""
    if not isinstance(vectors, Tensor) or vectors.ndim != 2 or vectors.shape[0] == 0:
        shape = tuple(vectors.shape) if isinstance(vectors, Tensor) else type(vectors).__name__
        raise ValueError(f"vectors must be a non-empty (N, d) tensor, got {shape}")
    v = vectors.detach().double()
    norms = torch.linalg.vector_norm(v, dim=1)
    unit = v / torch.where(norms > 0, norms, torch.ones_like(norms))[:, None]
    return (unit @ unit.T).clamp(-1.0, 1.0)


def flatness_distances(thetas_final: Tensor, theta_next: Tensor) -> Tensor:
    """Per-client ‖θ_{i,K} − θ^{t+1}‖² for a stack ``(m, d)`` of local models; their mean is FedNSAM's Δ_D."""
    if thetas_final.ndim != 2 or theta_next.shape != thetas_final.shape[1:]:
        raise ValueError(f"thetas_final must be (m, d) and theta_next (d,); got {tuple(thetas_final.shape)}, "
                         f"{tuple(theta_next.shape)}")
    return ((thetas_final - theta_next[None]) ** 2).sum(dim=1)


def gradient_similarity(
    model: FlatModel,
    clients: Sequence[tuple[Tensor, Tensor]],
    theta: Tensor,
    *,
    grads: ClientGradients | None = None,
    progress: bool = False,
) -> Tensor:
    """``(N, N)`` cosine similarities of the clients' full-batch gradients ∇F_i(θ) (float64)."""
    if grads is not None:
        return cosine_matrix(grads.full)
    check_clients(clients)
    full = [client_loss_fn(model, c).value_and_grad(theta.detach())[1]
            for c in tqdm(clients, desc="client gradients", disable=not progress, leave=False)]
    return cosine_matrix(torch.stack(full))


@dataclass
class RoundUpdates:
    """One engine round from a known server state.

    ``thetas_final[j]`` is θ_{i,K} of client ``clients[j]``; ``theta_start`` is the broadcast global
    model θ^t, ``theta_next`` the aggregated θ^{t+1}.
    """

    round: int
    clients: np.ndarray
    theta_start: Tensor
    thetas_final: Tensor  # (m, d)
    theta_next: Tensor
    mean_losses: np.ndarray  # mean local minibatch loss of each client in this round

    @property
    def updates(self) -> Tensor:
        """Δ_i = θ_{i,K} − θ^t (descent displacements), ``(m, d)``."""
        return self.thetas_final - self.theta_start[None]

    def similarity(self) -> Tensor:
        """Pairwise cosine similarity of the client updates Δ_i."""
        return cosine_matrix(self.updates)

    def flatness_distance(self) -> pd.DataFrame:
        """Per client: ‖θ_{i,K} − θ^{t+1}‖², ‖Δ_i‖² and cos(Δ_i, mean Δ)."""
        dist = flatness_distances(self.thetas_final, self.theta_next)
        upd = self.updates
        mean = upd.mean(dim=0, keepdim=True)
        cos = torch.nn.functional.cosine_similarity(upd, mean.expand_as(upd), dim=1)
        return pd.DataFrame({
            "client": self.clients,
            "flatness_distance": dist.detach().cpu().double().numpy(),
            "update_sq": (upd ** 2).sum(dim=1).detach().cpu().double().numpy(),
            "cosine_to_mean_update": cos.detach().cpu().double().numpy(),
            "mean_local_loss": self.mean_losses,
        })

    def summary(self) -> pd.DataFrame:
        """One row: Δ_D (the engine's ``flatness_distance``), mean off-diagonal update cosine."""
        fd = self.flatness_distance()
        sim = self.similarity().cpu().numpy()
        m = sim.shape[0]
        off = sim[~np.eye(m, dtype=bool)] if m > 1 else np.array([np.nan])
        return pd.DataFrame([{
            "round": self.round + 1,
            "n_clients": m,
            "flatness_distance": float(fd["flatness_distance"].mean()),
            "mean_update_cosine": float(off.mean()),
            "min_update_cosine": float(off.min()),
        }])


def one_round_updates(
    config: "Config",
    round_: int = 0,
    *,
    all_clients: bool = False,
    dataset: "Dataset | None" = None,
    progress: bool = False,
) -> RoundUpdates:
    """Run round ``round_`` (0-based) of ``config`` with the engine's client code; return the updates.

    ``round_ = 0`` starts from the initial model. For ``round_ > 0`` the engine first trains rounds
    0..round_−1 in a temporary run directory (``Simulation.run(stop_after_rounds=round_)``) and the
    server and client states are read back from it (``Simulation.saved_state``), so round ``round_`` runs exactly as in
    a full run. ``all_clients=True`` trains every client instead of the round's sampled ones (the
    returned θ^{t+1} then aggregates all of them). Nothing is written to ``config.runs_dir``.
    """
    from fedlab.engine.loop import Simulation

    if isinstance(round_, bool) or not isinstance(round_, int) or round_ < 0:
        raise ValueError(f"round_ must be an integer >= 0, got {round_!r}")
    if round_ >= config.rounds:
        raise ValueError(f"round_={round_} is beyond the run's rounds (0..{config.rounds - 1})")
    with tempfile.TemporaryDirectory(prefix="fedlab-round-") as tmp:
        sim = Simulation.build(config.replace(runs_dir=tmp), dataset)
        if round_ == 0:
            state = sim.initial_state()
        else:
            sim.run(progress=progress, stop_after_rounds=round_)
            saved = sim.saved_state()
            if saved is None or saved.next_round != round_:
                raise RuntimeError(f"the run stopped before round {round_} (diverged?)")
            state = saved
    alg = sim.algorithm
    theta_start = alg.global_model(state.server).detach()
    clients = np.arange(config.n_clients, dtype=np.int64) if all_clients else None
    outcome = sim.train_round(state, round_, clients)
    results = outcome.results
    return RoundUpdates(
        round=round_,
        clients=outcome.clients,
        theta_start=theta_start,
        thetas_final=torch.stack([r.theta_final for r in results]).detach(),
        theta_next=alg.global_model(state.server).detach(),
        mean_losses=np.array([float(r.mean_loss) for r in results]),
    )


def plot_similarity(ax: Any, matrix: Tensor | np.ndarray, *, labels: Sequence[Any] | None = None,
                    title: str | None = None, cmap: str = "RdBu_r", colorbar: bool = True) -> Any:
    """Heat map of a cosine-similarity matrix on [−1, 1] (diverging colours, colorbar)."""
    m = matrix.detach().cpu().numpy() if isinstance(matrix, Tensor) else np.asarray(matrix)
    im = ax.imshow(m, vmin=-1.0, vmax=1.0, cmap=cmap)
    if labels is not None:
        ticks = np.arange(len(labels))
        ax.set_xticks(ticks, [str(x) for x in labels], rotation=90)
        ax.set_yticks(ticks, [str(x) for x in labels])
    ax.set_xlabel("client")
    ax.set_ylabel("client")
    if title:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(im, ax=ax, label="cosine similarity")
    return im
