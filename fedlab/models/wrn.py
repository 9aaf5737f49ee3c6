"""Wide-ResNet-28-4 with GroupNorm (Zagoruyko & Komodakis, BMVC 2016), used by FedVSSAM on CIFAR-100."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .cnn import norm2d


class WideBlock(nn.Module):
    """Pre-activation block: norm → ReLU → conv3×3 → norm → ReLU → conv3×3, plus a shortcut.

    When the shape changes the shortcut is a 1×1 convolution of the *pre-activated* input, as in the
    reference WRN code; otherwise it is the identity.
    """

    def __init__(self, c_in: int, c_out: int, stride: int, norm: str, groups: int) -> None:
        super().__init__()
        use_bias = norm == "none"
        self.norm1 = norm2d(norm, c_in, groups)
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=use_bias)
        self.norm2 = norm2d(norm, c_out, groups)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, stride=1, padding=1, bias=use_bias)
        self.shortcut: nn.Module | None = None
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Conv2d(c_in, c_out, 1, stride=stride, bias=use_bias)

    def forward(self, x: Tensor) -> Tensor:
        a = F.relu(self.norm1(x))
        out = self.conv2(F.relu(self.norm2(self.conv1(a))))
        skip = x if self.shortcut is None else self.shortcut(a)
        return out + skip


class WideResNet(nn.Module):
    """WRN-``depth``-``widen``: conv3×3 16, three groups of (depth-4)/6 pre-activation blocks with
    widths 16k, 32k, 64k (strides 1, 2, 2), final norm → ReLU → global average pool → fc."""

    def __init__(
        self, c_in: int, n_classes: int, *, depth: int = 28, widen: int = 4, norm: str, groups: int
    ) -> None:
        super().__init__()
        if (depth - 4) % 6 != 0:
            raise ValueError(f"WRN depth must be 6n+4, got {depth}")
        n = (depth - 4) // 6
        widths = (16, 16 * widen, 32 * widen, 64 * widen)
        self.conv1 = nn.Conv2d(c_in, widths[0], 3, stride=1, padding=1, bias=norm == "none")
        groups_of_blocks = []
        c_prev = widths[0]
        for c_out, stride in zip(widths[1:], (1, 2, 2)):
            blocks = [WideBlock(c_prev, c_out, stride, norm, groups)]
            blocks += [WideBlock(c_out, c_out, 1, norm, groups) for _ in range(n - 1)]
            groups_of_blocks.append(nn.Sequential(*blocks))
            c_prev = c_out
        self.block1, self.block2, self.block3 = groups_of_blocks
        self.norm = norm2d(norm, c_prev, groups)
        self.fc = nn.Linear(c_prev, n_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, x: Tensor) -> Tensor:
        h = self.block3(self.block2(self.block1(self.conv1(x))))
        h = F.relu(self.norm(h))
        h = F.adaptive_avg_pool2d(h, 1)
        return self.fc(torch.flatten(h, start_dim=1))


def build_wrn28_4_gn(input_shape: tuple[int, ...], n_classes: int, norm: str, groups: int) -> nn.Module:
    """Wide-ResNet-28-4 with GroupNorm, the CIFAR-100 model of FedVSSAM (no public code exists).

    Zagoruyko & Komodakis (2016): 4 pre-activation blocks per group, widths 16 → 64 → 128 → 256,
    strides 1, 2, 2, then norm → ReLU → average pool → fc; no dropout; Kaiming-normal (fan_out) convs and
    zero fc bias; GroupNorm(``groups``) for BatchNorm. 5 872 180 parameters on 3×32×32 for 100 classes,
    5 849 050 for 10."""
    return WideResNet(input_shape[0], n_classes, depth=28, widen=4, norm=norm, groups=groups)
