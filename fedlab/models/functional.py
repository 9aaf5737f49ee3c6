"""Flat parameter vectors for ``torch.func``: the bridge between ``nn.Module`` and fedlab's math.

Algorithms see a model as one 1-D tensor θ ∈ R^d; :class:`FlatModel` knows how θ splits into the
module's parameters and runs ``forward(θ, x)`` through ``torch.func.functional_call``. Everything is
vmap-safe: θ may carry a leading batch dimension (one row per client)."""
from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value

Batch = tuple[Tensor, Tensor]
GradFn = Callable[[Tensor, Batch], tuple[Tensor, Tensor]]
"""``grad_fn(θ, (x, y)) -> (gradient, loss)`` of the mean cross-entropy; vmappable.

A model's oracles (``FlatModel.grad_fn``, ``FlatModel.autograd_grad_fn``) also take the keyword
``distill=Distill(...)``: the gradient of a distillation objective, with the same reported loss. An
oracle built on anything but logits (a quadratic, :mod:`fedlab.toy`) need not accept it; only
the methods that distil (FedGMT, FedSOL) pass it.
"""


@dataclass(frozen=True)
class Distill:
    """A teacher model for the gradient oracle's minibatch (knowledge distillation, Hinton et al. 2015).

    With ``distill`` the oracle differentiates ::

        [CE(f(x; θ), y)] + weight · KL( softmax(f(x; θ_T)/τ) ‖ softmax(f(x; θ)/τ) )

    (the bracket only when ``with_ce``; KL summed over classes and averaged over the batch, as
    ``nn.KLDivLoss(reduction="batchmean")``), where the teacher's logits f(x; θ_T) come from one
    forward pass without gradient on the same minibatch. The loss the oracle reports is still the plain
    cross-entropy at θ (computed from the same logits), so training curves mean the same for every method.
    """

    teacher: Tensor  # θ_T, flat like θ; never differentiated
    tau: float  # temperature τ > 0
    weight: float  # the KL's coefficient (FedGMT: γτ²; FedSOL: 1)
    with_ce: bool = True  # False: the objective is the weighted KL alone (FedSOL's proximal loss)


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

    @property
    def layout(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """(name, shape) of each parameter tensor, in θ's order (``fedlab.algorithms.base.Layout``)."""
        return tuple((n, tuple(s)) for n, s in zip(self.names, self.shapes))

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


def to_channels_last(t: Tensor) -> Tensor:
    """A 4-D tensor with explicit NHWC strides (others unchanged); differentiable. ``clone`` is needed:
    ``contiguous(memory_format=channels_last)`` is a no-op for C = 1, and the convolution then stays NCHW."""
    if t.dim() != 4:
        return t
    return t.clone(memory_format=torch.channels_last)


class FlatModel:
    """A module seen as a function of a flat parameter vector.

    ``forward(θ, x)``; ``loss(θ, batch)`` = mean cross-entropy; ``grad_fn(θ, batch)`` = (∇_θ loss, loss)
    by ``torch.func.grad_and_value`` (composes with ``vmap``, ``jvp``); ``autograd_grad_fn``: the same
    oracle by plain autograd. ``channels_last=True`` restrides 4-D inputs and weights to NHWC so that
    oneDNN/cuDNN pick their channels-last kernels (equal to NCHW to float rounding). ``amp=True``
    evaluates the *training* loss of the gradient oracles under bf16 autocast (float32 accumulation,
    softmax and normalisation; a gradient ~3 % off float32 on the ``cnn``); evaluation and the
    algorithms' vector arithmetic stay float32."""

    def __init__(self, model: nn.Module, *, channels_last: bool = False, amp: bool = False) -> None:
        for name, buf in model.named_buffers():
            if buf is not None and buf.numel() > 0:
                raise ValueError(
                    f"model has a buffer '{name}': fedlab's flat-vector path needs buffer-free models "
                    "(use GroupNorm, the default, instead of BatchNorm)"
                )
        self.module = model
        self.channels_last = channels_last
        self.amp = amp
        self.spec = param_spec(model)
        self._plain_grad = grad_and_value(self.train_loss)
        self._distill_grad = grad_and_value(self.distill_objective, has_aux=True)
        self.grad_fn: GradFn = self._functorch_grad
        self.autograd_grad_fn: GradFn = self._autograd_grad

    def _functorch_grad(self, theta: Tensor, batch: Batch, *, distill: Distill | None = None) -> tuple[Tensor, Tensor]:
        """(∇_θ objective, CE at θ) through ``torch.func.grad_and_value``: vmappable and composable.

        Without ``distill`` this is exactly ``grad_and_value(train_loss)`` (the branch is on a Python
        argument, never on a tensor value, so it is vmap-safe)."""
        if distill is None:
            return self._plain_grad(theta, batch)
        grad, (_, ce) = self._distill_grad(theta, batch, distill)
        return grad, ce

    def _autograd_grad(self, theta: Tensor, batch: Batch, *, distill: Distill | None = None) -> tuple[Tensor, Tensor]:
        """(∇_θ f(θ; batch), f(θ; batch)) by ``torch.autograd.grad`` on a detached leaf copy of θ.

        Equal to ``grad_fn`` to float rounding but 25–35 % cheaper on CPU (functorch's extra dispatch layer
        costs more than a small model's convolutions). Not vmappable: the sequential and threaded executors
        use it, the vectorised one and the analysis tools ``grad_fn``."""
        with torch.enable_grad():
            leaf = theta.detach().requires_grad_(True)
            if distill is None:
                loss = reported = self.train_loss(leaf, batch)
            else:
                loss, reported = self.distill_objective(leaf, batch, distill)
            (grad,) = torch.autograd.grad(loss, leaf)
        return grad, reported.detach()

    @property
    def dim(self) -> int:
        return self.spec.dim

    def replica(self) -> "FlatModel":
        """An independent ``FlatModel`` over a deep copy of the module: ``functional_call`` swaps θ into the
        module during a call, so each client thread needs its own."""
        return FlatModel(copy.deepcopy(self.module), channels_last=self.channels_last, amp=self.amp)

    def theta0(self) -> Tensor:
        """The module's current parameters as a flat vector."""
        return flatten_params(self.module)

    def forward(self, theta: Tensor, x: Tensor) -> Tensor:
        params = self.spec.unflatten(theta)
        if self.channels_last:
            params = {k: to_channels_last(v) for k, v in params.items()}
            x = to_channels_last(x)
        return functional_call(self.module, params, (x,))

    def loss(self, theta: Tensor, batch: Batch) -> Tensor:
        x, y = batch
        return F.cross_entropy(self.forward(theta, x), y)

    def train_loss(self, theta: Tensor, batch: Batch) -> Tensor:
        """``loss`` under bf16 autocast when ``amp`` is set, entered here rather than around a round: autocast
        is per thread, and the algorithms' dot products must not run in bf16."""
        if not self.amp:
            return self.loss(theta, batch)
        with torch.autocast(device_type=batch[0].device.type, dtype=torch.bfloat16):
            logits = self.forward(theta, batch[0])
        return F.cross_entropy(logits.float(), batch[1])

    def _train_logits(self, theta: Tensor, x: Tensor) -> Tensor:
        """f(x; θ) as the training loss sees it (bf16 autocast when ``amp``, returned in float32)."""
        if not self.amp:
            return self.forward(theta, x)
        with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16):
            logits = self.forward(theta, x)
        return logits.float()

    def distill_objective(self, theta: Tensor, batch: Batch, distill: Distill) -> tuple[Tensor, Tensor]:
        """(the objective of :class:`Distill`, the plain cross-entropy at θ); what ``distill=`` differentiates.

        The teacher's forward pass runs under ``no_grad``: no graph is kept for it, and no gradient
        could reach θ through it anyway (θ_T is a separate tensor).
        """
        x, y = batch
        with torch.no_grad():
            target = F.softmax(self._train_logits(distill.teacher, x) / distill.tau, dim=-1)
        logits = self._train_logits(theta, x)
        ce = F.cross_entropy(logits, y)
        kl = F.kl_div(F.log_softmax(logits / distill.tau, dim=-1), target, reduction="batchmean")
        objective = distill.weight * kl
        if distill.with_ce:
            objective = ce + objective
        return objective, ce.detach()
