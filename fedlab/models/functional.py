"""Flat parameter vectors for ``torch.func``: the bridge between ``nn.Module`` and fedlab's math.

Algorithms see a model as one 1-D tensor θ ∈ R^d. ``FlatModel`` remembers how θ splits into the
module's named parameters, so ``forward(θ, x)`` runs the module through
``torch.func.functional_call`` without copying weights into it. Everything here is vmap-safe: θ may
carry a leading batch dimension under ``torch.func.vmap`` (one row per client).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value

Batch = tuple[Tensor, Tensor]
GradFn = Callable[[Tensor, Batch], tuple[Tensor, Tensor]]
"""``grad_fn(θ, (x, y)) -> (gradient, loss)`` of the mean cross-entropy; vmappable."""


@dataclass(frozen=True)
class ParamSpec:
    """Names, shapes and sizes of a module's trainable parameters, in ``named_parameters`` order."""

    names: tuple[str, ...]
    shapes: tuple[torch.Size, ...]
    numels: tuple[int, ...]

    @property
    def dim(self) -> int:
        """d, the length of the flat vector."""
        return sum(self.numels)

    def unflatten(self, theta: Tensor) -> dict[str, Tensor]:
        """Split θ (shape ``[d]``) into a name → tensor dict of views."""
        chunks = torch.split(theta, list(self.numels), dim=-1)
        return {n: c.reshape(s) for n, c, s in zip(self.names, chunks, self.shapes)}


def param_spec(model: nn.Module) -> ParamSpec:
    """The ``ParamSpec`` of ``model``'s trainable parameters."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return ParamSpec(
        names=tuple(n for n, _ in named),
        shapes=tuple(p.shape for _, p in named),
        numels=tuple(p.numel() for _, p in named),
    )


def flatten_params(model: nn.Module) -> Tensor:
    """θ: all trainable parameters concatenated into one detached 1-D tensor (a copy)."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters() if p.requires_grad]).clone()


def load_flat_(model: nn.Module, theta: Tensor) -> nn.Module:
    """Copy θ back into ``model``'s parameters in place (for users who want an ordinary module)."""
    spec = param_spec(model)
    if theta.numel() != spec.dim:
        raise ValueError(f"theta has {theta.numel()} entries but the model has {spec.dim} parameters")
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in spec.unflatten(theta).items():
            params[name].copy_(value)
    return model


class FlatModel:
    """A module seen as a function of a flat parameter vector.

    ``forward(θ, x)`` = module(x) with parameters θ; ``loss(θ, batch)`` = mean cross-entropy;
    ``grad_fn(θ, batch)`` = (∇_θ loss, loss), built once with ``torch.func.grad_and_value``.
    """

    def __init__(self, model: nn.Module) -> None:
        for name, buf in model.named_buffers():
            if buf is not None and buf.numel() > 0:
                raise ValueError(
                    f"model has a buffer '{name}': fedlab's flat-vector path needs buffer-free models "
                    "(use GroupNorm, the default, instead of BatchNorm)"
                )
        self.module = model
        self.spec = param_spec(model)
        self.grad_fn: GradFn = grad_and_value(self.loss)

    @property
    def dim(self) -> int:
        return self.spec.dim

    def theta0(self) -> Tensor:
        """The module's current parameters as a flat vector."""
        return flatten_params(self.module)

    def forward(self, theta: Tensor, x: Tensor) -> Tensor:
        return functional_call(self.module, self.spec.unflatten(theta), (x,))

    def loss(self, theta: Tensor, batch: Batch) -> Tensor:
        x, y = batch
        return F.cross_entropy(self.forward(theta, x), y)
