"""The conventional baseline: a federated simulator written the way most research code is.

Used only by ``python -m lab bench --speed`` to measure what fedlab's design buys. Everything
here is the textbook ``nn.Module`` route that fedlab's engine deliberately avoids:

* one ``torch.utils.data.DataLoader`` per client over a ``Subset`` of a ``TensorDataset`` (default
  collate, one ``__getitem__`` per sample), its own seeded ``RandomSampler`` generator;
* the global model ``copy.deepcopy``-ed for every client in every round, a fresh
  ``torch.optim.SGD(lr, weight_decay=wd)``, ``clip_grad_norm_`` before each step;
* FedSAM as the usual two-pass SAM: backward, ε = ρ g/(‖g‖ + eps), ``p.add_(ε)``, second backward
  on the same batch, ``p.sub_(ε)``, clip, ``optimizer.step()``;
* the server averaging the clients' ``state_dict``s;
* with ``amp=True``, the usual mixed-precision recipe: each forward pass and loss under
  ``torch.autocast(device, torch.bfloat16)``, backward outside it (bf16 needs no loss scaler).

Same hyperparameters as fedlab (lr schedule, wd, clip, K, B, ρ, eps) and the same client sampling.
The sampler generator of client i is reseeded at round t with fedlab's batch-order seed
``derive_seed(seed, "batches", t, i)``, so as long as a client holds at least K·B samples its
batches are exactly fedlab's (``torch.randperm`` from the same generator state); with fewer samples
the DataLoader's epoch end (a partial batch, then a fresh permutation) makes the order differ.
Data tensors stay on the CPU and batches are copied to the device, as usual.
"""
from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import DataLoader, RandomSampler, Subset, TensorDataset

from fedlab.engine.sampling import sample_clients
from fedlab.engine.schedule import learning_rate
from fedlab import derive_seed

CONVENTIONAL_ALGORITHMS: tuple[str, ...] = ("fedavg", "fedsam")


class ConventionalFL:
    """FedAvg / FedSAM with a module, SGD and per-client DataLoaders.

    ``run_round(t)`` trains the sampled clients of round t and averages their ``state_dict``s into
    ``self.model``; it returns the mean training loss (at the unperturbed weights, like fedlab).
    """

    def __init__(
        self, model: nn.Module, x: Tensor, y: Tensor, client_indices: Sequence[np.ndarray], *,
        algorithm: str = "fedavg", participation: float = 0.1, local_steps: int | None = 10, batch_size: int = 32,
        lr: float = 0.1, lr_schedule: str = "exponential", lr_decay: float = 0.998, rounds: int = 1,
        weight_decay: float = 1e-3, clip_norm: float | None = 10.0, rho: float = 0.1, eps: float = 1e-12,
        seed: int = 0, device: str | torch.device = "cpu", amp: bool = False,
    ) -> None:
        if algorithm not in CONVENTIONAL_ALGORITHMS:
            raise ValueError(f"conventional baseline has {', '.join(CONVENTIONAL_ALGORITHMS)}; got {algorithm!r}")
        self.device = torch.device(device)
        self.model = model.to(self.device)
        self.algorithm = algorithm
        self.participation, self.K, self.B = participation, local_steps, batch_size
        self.lr0, self.lr_schedule, self.lr_decay, self.rounds = lr, lr_schedule, lr_decay, rounds
        self.wd, self.clip, self.rho, self.eps, self.seed = weight_decay, clip_norm, rho, eps, seed
        self.amp = amp
        dataset = TensorDataset(x.cpu(), y.cpu())
        # a client without data gets no loader (None); run_round refuses to train it
        self.samplers: list[RandomSampler | None] = []
        self.loaders: list[DataLoader | None] = []
        for i, idx in enumerate(client_indices):
            if len(idx) == 0:
                self.samplers.append(None)
                self.loaders.append(None)
                continue
            subset = Subset(dataset, [int(j) for j in idx])
            sampler = RandomSampler(subset, generator=torch.Generator().manual_seed(derive_seed(seed, "batches", 0, i)))
            loader_gen = torch.Generator().manual_seed(derive_seed(seed, "loader", i))
            self.samplers.append(sampler)
            self.loaders.append(DataLoader(subset, batch_size=batch_size, sampler=sampler, generator=loader_gen))

    @classmethod
    def from_simulation(cls, sim, algorithm: str | None = None) -> "ConventionalFL":
        """The baseline with a fedlab ``Simulation``'s data, partition, initial model and hyperparameters
        (``amp`` included). A simulation in epoch mode (``local_steps=None``) gives a baseline whose
        ``run_round`` refuses to run; its :meth:`train_on` takes the batches of fedlab's client jobs."""
        from fedlab.models import build_model

        c = sim.config
        name = algorithm or c.algorithm
        hp = sim.algorithm.hp if name == c.algorithm else None
        module = build_model(c.model, sim.dataset.input_shape, sim.dataset.n_classes, seed=c.seed)
        return cls(module, sim.dataset.x_train, sim.dataset.y_train, sim.partition.client_indices,
                   algorithm=name, participation=c.participation, local_steps=c.local_steps,
                   batch_size=c.batch_size, lr=c.lr, lr_schedule=c.lr_schedule, lr_decay=c.lr_decay,
                   rounds=c.rounds, weight_decay=c.weight_decay, clip_norm=c.clip_norm,
                   rho=getattr(hp, "rho", 0.1), eps=getattr(hp, "eps", 1e-12), seed=c.seed, device=c.device,
                   amp=c.amp)

    # --------------------------------------------------------------------------------------------
    def _loss(self, model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
        with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=self.amp):
            return F.cross_entropy(model(x), y)

    def _sam_step(self, model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
        loss = self._loss(model, x, y)
        loss.backward()
        params = [p for p in model.parameters() if p.grad is not None]
        with torch.no_grad():
            grad_norm = torch.norm(torch.stack([p.grad.norm(2) for p in params]), 2)
            scale = self.rho / (grad_norm + self.eps)
            perturbations = []
            for p in params:
                e = p.grad * scale
                p.add_(e)
                perturbations.append(e)
        model.zero_grad()
        self._loss(model, x, y).backward()
        with torch.no_grad():
            for p, e in zip(params, perturbations):
                p.sub_(e)
        return loss.detach()

    def train_client(self, i: int, t: int, lr: float) -> tuple[dict[str, Tensor], Tensor]:
        """K local steps of client i in round t on a deep copy of the global model."""
        if self.K is None:
            raise ValueError("the conventional baseline's own loop runs a fixed number of local steps; this one "
                             "was built for local epochs (local_steps=None): give it batches with train_on")
        sampler = self.samplers[i]
        if sampler is None:
            raise ValueError(f"client {i} holds no data; the conventional baseline cannot train it")
        sampler.generator.manual_seed(derive_seed(self.seed, "batches", t, i))
        return self.train_on(self._loader_batches(i), lr)

    def _loader_batches(self, i: int) -> Iterator[tuple[Tensor, Tensor]]:
        """K batches from client i's DataLoader, a fresh pass whenever one ends."""
        it = iter(self.loaders[i])
        for _ in range(self.K):
            try:
                yield next(it)
            except StopIteration:
                it = iter(self.loaders[i])
                yield next(it)

    def train_on(self, batches: Iterable[tuple[Tensor, Tensor]], lr: float) -> tuple[dict[str, Tensor], Tensor]:
        """One local step per batch (SGD, or two-pass SAM) on a deep copy of the global model.

        Returns the local ``state_dict`` and the mean loss at the unperturbed weights.
        ``python -m lab bench flsim`` feeds it the batches of fedlab's own client jobs.
        """
        local = copy.deepcopy(self.model)
        local.train()
        optimizer = torch.optim.SGD(local.parameters(), lr=lr, weight_decay=self.wd)
        losses = []
        for x, y in batches:
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            optimizer.zero_grad()
            if self.algorithm == "fedsam":
                loss = self._sam_step(local, x, y)
            else:
                loss = self._loss(local, x, y)
                loss.backward()
                loss = loss.detach()
            if self.clip is not None:
                nn.utils.clip_grad_norm_(local.parameters(), self.clip)
            optimizer.step()
            losses.append(loss)
        return local.state_dict(), torch.stack(losses).mean()

    @staticmethod
    def average(states: Sequence[dict[str, Tensor]]) -> dict[str, Tensor]:
        """The element-wise mean of the clients' ``state_dict``s (FedAvg's unweighted server step)."""
        return {k: torch.stack([s[k].float() for s in states]).mean(dim=0).to(states[0][k].dtype) for k in states[0]}

    def run_round(self, t: int) -> float:
        clients = sample_clients(t, len(self.loaders), self.participation, seed=self.seed)
        lr = learning_rate(t, self.lr0, self.lr_schedule, self.rounds, self.lr_decay)
        states, losses = [], []
        for i in clients.tolist():
            state, loss = self.train_client(i, t, lr)
            states.append(state)
            losses.append(loss)
        self.model.load_state_dict(self.average(states))
        return float(torch.stack(losses).mean())
