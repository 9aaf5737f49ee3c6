"""Small models: the FedAvg 2NN (``mlp``), a GroupNorm CNN (``cnn``) and the FedSAM papers' LeNet-5.

Also home of ``norm2d``, the normalisation-layer factory the ResNets and the WRN share.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

NORMS: tuple[str, ...] = ("group", "none", "batch")
"""Every normalisation name fedlab knows; each model allows a subset (see the registry)."""


def norm2d(norm: str, channels: int, groups: int) -> nn.Module:
    """The normalisation layer for ``channels`` feature maps.

    ``"group"`` → ``GroupNorm(groups, channels)`` (no buffers, vmap-safe); ``"none"`` → identity;
    ``"batch"`` → ``BatchNorm2d`` (has running-statistics buffers, so ``FlatModel`` refuses it).
    """
    if norm == "group":
        if groups < 1 or channels % groups != 0:
            raise ValueError(
                f"groups={groups} must be a positive divisor of every channel count; "
                f"it does not divide {channels}"
            )
        return nn.GroupNorm(groups, channels)
    if norm == "none":
        return nn.Identity()
    if norm == "batch":
        return nn.BatchNorm2d(channels)
    raise ValueError(f"unknown norm '{norm}'; allowed: {', '.join(NORMS)}")


class MLP(nn.Module):
    """The FedAvg paper's "2NN": flatten → 200 → ReLU → 200 → ReLU → C."""

    def __init__(self, in_features: int, n_classes: int, hidden: int = 200) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, n_classes)
        self.act = nn.ReLU()

    def forward(self, x: Tensor) -> Tensor:
        h = torch.flatten(x, start_dim=1)
        h = self.act(self.fc1(h))
        h = self.act(self.fc2(h))
        return self.fc3(h)


class CNN(nn.Module):
    """Two 3×3 conv blocks (32, 64 channels, each norm → ReLU → 2×2 max-pool), fc 64, fc C."""

    def __init__(
        self, input_shape: tuple[int, int, int], n_classes: int, norm: str, groups: int, hidden: int = 64
    ) -> None:
        super().__init__()
        c_in, h, w = input_shape
        use_bias = norm == "none"
        self.conv1 = nn.Conv2d(c_in, 32, kernel_size=3, padding=1, bias=use_bias)
        self.norm1 = norm2d(norm, 32, groups)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=3, padding=1, bias=use_bias)
        self.norm2 = norm2d(norm, 64, groups)
        self.pool = nn.MaxPool2d(2)
        self.act = nn.ReLU()
        flat = 64 * (h // 4) * (w // 4)
        self.fc1 = nn.Linear(flat, hidden)
        self.fc2 = nn.Linear(hidden, n_classes)

    def forward(self, x: Tensor) -> Tensor:
        h = self.pool(self.act(self.norm1(self.conv1(x))))
        h = self.pool(self.act(self.norm2(self.conv2(h))))
        h = self.act(self.fc1(torch.flatten(h, start_dim=1)))
        return self.fc2(h)


class LeNet5(nn.Module):
    """conv5×5 64 → ReLU → pool → conv5×5 64 → ReLU → pool → fc 384 → fc 192 → fc C; no norm."""

    def __init__(self, input_shape: tuple[int, int, int], n_classes: int) -> None:
        super().__init__()
        c_in, h, w = input_shape
        self.conv1 = nn.Conv2d(c_in, 64, kernel_size=5)
        self.conv2 = nn.Conv2d(64, 64, kernel_size=5)
        self.pool = nn.MaxPool2d(2)
        self.act = nn.ReLU()
        side_h = ((h - 4) // 2 - 4) // 2
        side_w = ((w - 4) // 2 - 4) // 2
        self.fc1 = nn.Linear(64 * side_h * side_w, 384)
        self.fc2 = nn.Linear(384, 192)
        self.fc3 = nn.Linear(192, n_classes)

    def forward(self, x: Tensor) -> Tensor:
        h = self.pool(self.act(self.conv1(x)))
        h = self.pool(self.act(self.conv2(h)))
        h = torch.flatten(h, start_dim=1)
        h = self.act(self.fc1(h))
        h = self.act(self.fc2(h))
        return self.fc3(h)


def build_mlp(input_shape: tuple[int, ...], n_classes: int, norm: str, groups: int) -> nn.Module:
    """The FedAvg paper's "2NN": two hidden layers of 200 ReLU units on the flattened input.

    200·D + 40 400 + 201·C parameters for D input features (199 210 on 1×28×28, 10 classes); ``norm``
    and ``groups`` are ignored."""
    return MLP(math.prod(input_shape), n_classes)


def build_cnn(input_shape: tuple[int, ...], n_classes: int, norm: str, groups: int) -> nn.Module:
    """Small two-conv GroupNorm CNN for 28×28, 32×32 or 8×8 inputs, fedlab's CPU workhorse.

    conv3×3(C_in→32) → norm → ReLU → pool 2 → conv3×3(32→64) → norm → ReLU → pool 2 → fc 64 → ReLU →
    fc C; conv biases only with ``norm="none"``. 220 330 parameters on 1×28×28 for 10 classes, 282 346 on
    3×32×32, 36 010 on 1×8×8."""
    return CNN(input_shape, n_classes, norm, groups)  # type: ignore[arg-type]


def build_lenet5(input_shape: tuple[int, ...], n_classes: int, norm: str, groups: int) -> nn.Module:
    """LeNet-5-style CNN of the FedSAM papers (Caldarola fedsam/FedGloSS, FL-Simulator, Liu).

    conv5×5(3→64) → ReLU → pool 2 → conv5×5(64→64) → ReLU → pool 2 → fc 384 → ReLU → fc 192 → ReLU →
    fc C; no normalisation. Logits (Liu's log-softmax is the same under cross-entropy). 797 962
    parameters on 3×32×32 for 10 classes, 815 332 for 100."""
    return LeNet5(input_shape, n_classes)  # type: ignore[arg-type]
