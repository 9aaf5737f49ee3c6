"""A federation seen by the analysis tools: one flat model plus each client's data, and its losses.

Every analysis works on a *federation view*: a :class:`~fedlab.models.FlatModel` and per-client
training tensors ``[(x_1, y_1), ..., (x_N, y_N)]`` (:data:`ClientData`), with the papers' objective

    F(θ) = (1/N) Σ_i F_i(θ),      F_i(θ) = (1/n_i) Σ_{s ∈ client i} ℓ(θ; x_s, y_s),

an *unweighted* mean over clients (FedVSSAM, FedSMOO, FedNSAM), ℓ the cross-entropy. ``batches=b``
estimates F_i on b fixed seeded minibatches, so F stays a deterministic, twice-differentiable
function of θ. Since the model treats samples independently (GroupNorm), F = Σ_s w_s ℓ_s(θ) with
w_s = 1/(N n_i) can be cut into chunks of samples: gradients and Hessian-vector products are
accumulated chunk by chunk, bounding double-backward memory by ``chunk_size`` samples."""
from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.func import grad_and_value

from fedlab.engine.batches import fixed_step_batches
from fedlab.models.functional import FlatModel
from fedlab._rng import numpy_generator, torch_generator

from fedlab.analysis._checks import check_clients, check_count
from fedlab.analysis.points import evaluate_affine, evaluate_points  # re-exported (__all__)

if TYPE_CHECKING:  # pragma: no cover
    from fedlab.config import Config
    from fedlab.data import Dataset
    from fedlab.data.partition import Partition

__all__ = [
    "ClientData",
    "EmpiricalLoss",
    "LossFn",
    "client_data",
    "client_loss_fn",
    "evaluate_affine",
    "evaluate_points",
    "federation_from_config",
    "global_loss_fn",
    "sample_batches",
]

ClientData = list[tuple[Tensor, Tensor]]
"""Per-client training data ``[(x_i, y_i), ...]``, on the model's device."""

LossFn = Callable[[Tensor], Tensor]
"""θ ↦ scalar loss, differentiable (twice) with ``torch.func``."""

DEFAULT_CHUNK = 2048
"""Samples per forward pass inside :class:`EmpiricalLoss` (bounds activation memory)."""


# --- building a federation view ---
def client_data(dataset: "Dataset", partition: "Partition", max_per_client: int | None = None, seed: int = 0, *,
                drop_empty: bool = True) -> ClientData:
    """Each client's training tensors ``(x_train[idx_i], y_train[idx_i])`` on the dataset's device.

    ``max_per_client``: a sorted uniform subset of at most that many samples per client, drawn from
    ``numpy_generator(seed, "analysis-subset", i)``. Empty clients have no F_i: left out with a warning
    (``drop_empty``), else ValueError."""
    check_count("max_per_client", max_per_client, optional=True)
    device = dataset.x_train.device
    out: ClientData = []
    empty = []
    for i, idx in enumerate(partition.client_indices):
        idx = np.asarray(idx, dtype=np.int64)
        if idx.size == 0:
            empty.append(i)
            continue
        if max_per_client is not None and idx.size > max_per_client:
            rng = numpy_generator(seed, "analysis-subset", i)
            idx = np.sort(rng.choice(idx, size=int(max_per_client), replace=False))
        ix = torch.tensor(idx, dtype=torch.long, device=device)
        out.append((dataset.x_train[ix], dataset.y_train[ix]))
    if empty:
        if not drop_empty:
            raise ValueError(f"partition has empty clients {empty}; pass drop_empty=True to leave them out")
        warnings.warn(f"client_data: left out {len(empty)} empty client(s): {empty[:10]}", stacklevel=2)
    if not out:
        raise ValueError("partition: every client is empty")
    return out


def federation_from_config(config: "Config", *, max_per_client: int | None = None, seed: int = 0,
                           dataset: "Dataset | None" = None) -> tuple[FlatModel, ClientData, tuple[Tensor, Tensor]]:
    """``(model, clients, (x_test, y_test))`` exactly as :class:`fedlab.engine.Simulation` builds them:
    ``model.theta0()`` is the run's θ⁰ and the clients its partition. Nothing is trained or written."""
    from fedlab.engine.loop import Simulation

    sim = Simulation.build(config, dataset)
    clients = client_data(sim.dataset, sim.partition, max_per_client, seed)
    return sim.model, clients, (sim.dataset.x_test, sim.dataset.y_test)


def sample_batches(n: int, batches: int, batch_size: int, generator: torch.Generator) -> Tensor:
    """``(batches, batch_size)`` indices into ``range(n)`` by consecutive random permutations — the
    engine's rule for local minibatches (disjoint while the data last; a small client repeats samples)."""
    check_count("batches", batches)
    check_count("batch_size", batch_size)
    return fixed_step_batches(torch.arange(n), batches, batch_size, generator)


# --- the loss as a function of θ ---
class EmpiricalLoss:
    """F(θ) = Σ_s w_s ℓ(θ; x_s, y_s) on a fixed sample, evaluated in chunks of samples.

    Samples belong to groups (clients): ``group_losses(θ)`` gives the F_i and F = Σ_i c_i F_i (c_i = 1/N
    for the federated objective). Calling it is differentiable with ``torch.func`` and vmappable over θ;
    ``parts()`` yields one function per chunk (their sum is F), over which :func:`~fedlab.analysis.hessian.hvp`
    and :meth:`value_and_grad` accumulate."""

    def __init__(self, model: FlatModel, x: Tensor, y: Tensor, groups: Tensor, group_weights: Tensor, *,
                 chunk_size: int = DEFAULT_CHUNK) -> None:
        if x.shape[0] != y.shape[0] or x.shape[0] != groups.shape[0]:
            raise ValueError(f"x, y and groups must have the same length; got {x.shape[0]}, {y.shape[0]}, "
                             f"{groups.shape[0]}")
        if x.shape[0] == 0:
            raise ValueError("x: the loss needs at least one sample")
        check_count("chunk_size", chunk_size)
        self.model = model
        self.x, self.y = x, y
        self.groups = groups.to(device=x.device, dtype=torch.long)
        self.n_groups = int(group_weights.numel())
        counts = torch.bincount(self.groups, minlength=self.n_groups)
        if bool((counts == 0).any()):
            raise ValueError(f"group {int(torch.nonzero(counts == 0)[0])} has no samples")
        self.group_sizes = counts
        wdtype = x.dtype if x.is_floating_point() else torch.float32
        self.group_weights = group_weights.to(device=x.device, dtype=wdtype)
        # w_s = c_{g(s)} / n_{g(s)}: the weight of sample s in F; 1/n_{g(s)} in its group's mean.
        self._mean_weight = (1.0 / counts.to(wdtype))[self.groups]
        self._weight = self.group_weights[self.groups] * self._mean_weight
        self.chunk_size = int(chunk_size)

    @property
    def n_samples(self) -> int:
        return int(self.x.shape[0])

    def with_channels_last(self, channels_last: bool = True) -> "EmpiricalLoss":
        """The same F with its model run in NHWC (or NCHW) layout; values agree to float rounding, not bit
        for bit. ``self`` when the layout already matches."""
        if bool(self.model.channels_last) == bool(channels_last):
            return self
        twin = copy.copy(self)
        twin.model = FlatModel(self.model.module, channels_last=channels_last, amp=self.model.amp)
        return twin

    def with_chunk_size(self, chunk_size: int) -> "EmpiricalLoss":
        """The same F with ``chunk_size`` samples per forward pass (another summation order: float rounding)."""
        check_count("chunk_size", chunk_size)
        if int(chunk_size) == self.chunk_size:
            return self
        twin = copy.copy(self)
        twin.chunk_size = int(chunk_size)
        return twin

    def replica(self) -> "EmpiricalLoss":
        """The same F over its own copy of the module: ``functional_call`` swaps θ into the module during a
        call, so concurrent threads need one replica each."""
        twin = copy.copy(self)
        twin.model = self.model.replica()
        return twin

    def _chunks(self) -> Iterator[slice]:
        for start in range(0, self.n_samples, self.chunk_size):
            yield slice(start, min(start + self.chunk_size, self.n_samples))

    def _chunk_loss(self, theta: Tensor, sl: slice) -> Tensor:
        logits = self.model.forward(theta, self.x[sl])
        per_sample = F.cross_entropy(logits, self.y[sl], reduction="none")
        return (per_sample * self._weight[sl].to(per_sample.dtype)).sum()

    def __call__(self, theta: Tensor) -> Tensor:
        total = None
        for sl in self._chunks():
            part = self._chunk_loss(theta, sl)
            total = part if total is None else total + part
        assert total is not None
        return total

    def parts(self) -> list[LossFn]:
        """Functions θ ↦ (chunk's share of F); their sum is F."""
        return [lambda theta, sl=sl: self._chunk_loss(theta, sl) for sl in self._chunks()]

    def group_losses(self, theta: Tensor) -> Tensor:
        """``[n_groups]`` tensor of per-group mean losses F_i(θ) (vmappable over θ)."""
        out = None
        for sl in self._chunks():
            logits = self.model.forward(theta, self.x[sl])
            per_sample = F.cross_entropy(logits, self.y[sl], reduction="none")
            scaled = per_sample * self._mean_weight[sl].to(per_sample.dtype)
            zero = torch.zeros(self.n_groups, dtype=per_sample.dtype, device=per_sample.device)
            part = zero.index_add(0, self.groups[sl], scaled)
            out = part if out is None else out + part
        assert out is not None
        return out

    def value_and_grad(self, theta: Tensor) -> tuple[Tensor, Tensor]:
        """``(F(θ), ∇F(θ))``, accumulated chunk by chunk (detached)."""
        value = torch.zeros((), dtype=theta.dtype, device=theta.device)
        grad = torch.zeros_like(theta)
        for part in self.parts():
            g, v = grad_and_value(part)(theta)
            grad = grad + g.detach()
            value = value + v.detach()
        return value, grad


def _loss_from_clients(model: FlatModel, clients: Sequence[tuple[Tensor, Tensor]], batches: int | None, batch_size: int,
                       seed: int, chunk_size: int, name: str) -> EmpiricalLoss:
    check_clients(clients, name)
    xs, ys, gs = [], [], []
    for i, (x, y) in enumerate(clients):
        if batches is not None:
            gen = torch_generator(seed, "analysis-loss-batches", i)
            idx = sample_batches(x.shape[0], batches, batch_size, gen).reshape(-1).to(x.device)
            x, y = x[idx], y[idx]
        xs.append(x)
        ys.append(y)
        gs.append(torch.full((x.shape[0],), i, dtype=torch.long, device=x.device))
    n = len(clients)
    weights = torch.full((n,), 1.0 / n, dtype=torch.float64)
    return EmpiricalLoss(model, torch.cat(xs), torch.cat(ys), torch.cat(gs), weights, chunk_size=chunk_size)


def global_loss_fn(model: FlatModel, clients: Sequence[tuple[Tensor, Tensor]], batches: int | None = None,
                   batch_size: int = 64, seed: int = 0, *, chunk_size: int = DEFAULT_CHUNK) -> EmpiricalLoss:
    """The global objective F(θ) = (1/N) Σ_i F_i(θ) as a deterministic function of θ; ``batches=b``
    estimates F_i on b minibatches drawn once from ``torch_generator(seed, "analysis-loss-batches", i)``."""
    check_count("batches", batches, optional=True)
    return _loss_from_clients(model, clients, batches, batch_size, seed, chunk_size, "clients")


def client_loss_fn(model: FlatModel, client: tuple[Tensor, Tensor], batches: int | None = None, batch_size: int = 64,
                   seed: int = 0, *, chunk_size: int = DEFAULT_CHUNK) -> EmpiricalLoss:
    """One client's loss F_i(θ) (full data, or ``batches`` seeded minibatches), as for the global one."""
    check_count("batches", batches, optional=True)
    return _loss_from_clients(model, [client], batches, batch_size, seed, chunk_size, "client")
