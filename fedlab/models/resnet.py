"""ResNet-18 with GroupNorm in the literature's two flavours, sharing ``BasicBlock`` and the stages
[2, 2, 2, 2] of widths 64-128-256-512: ``resnet18_gn`` (CIFAR stem: Liu's FedSWA/FedNSAM code with GN,
FedACG) and ``resnet18_gn_imagenet_stem`` (torchvision's stem: FL-Simulator's "ResNet-18-GN";
cheaper, less accurate)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .cnn import norm2d

STAGE_WIDTHS: tuple[int, ...] = (64, 128, 256, 512)
BLOCKS_PER_STAGE: tuple[int, ...] = (2, 2, 2, 2)


class BasicBlock(nn.Module):
    """conv3×3 → norm → ReLU → conv3×3 → norm, plus a (1×1 conv → norm) projection when the shape
    changes, then ReLU. Convolutions have a bias only when there is no normalisation."""

    def __init__(self, c_in: int, c_out: int, stride: int, norm: str, groups: int) -> None:
        super().__init__()
        use_bias = norm == "none"
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=use_bias)
        self.norm1 = norm2d(norm, c_out, groups)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, stride=1, padding=1, bias=use_bias)
        self.norm2 = norm2d(norm, c_out, groups)
        if stride != 1 or c_in != c_out:
            self.shortcut: nn.Module = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride=stride, bias=use_bias),
                norm2d(norm, c_out, groups),
            )
        else:
            self.shortcut = nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18 body with a selectable stem (``"cifar"`` or ``"imagenet"``)."""

    def __init__(self, c_in: int, n_classes: int, *, stem: str, norm: str, groups: int) -> None:
        super().__init__()
        use_bias = norm == "none"
        width = STAGE_WIDTHS[0]
        if stem == "cifar":
            self.conv1 = nn.Conv2d(c_in, width, 3, stride=1, padding=1, bias=use_bias)
            self.pool: nn.Module = nn.Identity()
        elif stem == "imagenet":
            self.conv1 = nn.Conv2d(c_in, width, 7, stride=2, padding=3, bias=use_bias)
            self.pool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        else:
            raise ValueError(f"unknown stem '{stem}'; allowed: cifar, imagenet")
        self.norm1 = norm2d(norm, width, groups)
        stages = []
        c_prev = width
        for i, (c_out, n_blocks) in enumerate(zip(STAGE_WIDTHS, BLOCKS_PER_STAGE)):
            first_stride = 1 if i == 0 else 2
            blocks = [BasicBlock(c_prev, c_out, first_stride, norm, groups)]
            blocks += [BasicBlock(c_out, c_out, 1, norm, groups) for _ in range(n_blocks - 1)]
            stages.append(nn.Sequential(*blocks))
            c_prev = c_out
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c_prev, n_classes)

    def forward(self, x: Tensor) -> Tensor:
        h = self.pool(F.relu(self.norm1(self.conv1(x))))
        h = self.layer4(self.layer3(self.layer2(self.layer1(h))))
        return self.fc(torch.flatten(self.avgpool(h), start_dim=1))


def _torchvision_init_(model: nn.Module) -> None:
    """torchvision's ResNet initialisation: Kaiming-normal (fan_out, ReLU) convolutions, norm
    weights 1 and biases 0; the fc layer keeps PyTorch's default."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, (nn.GroupNorm, nn.BatchNorm2d)):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def build_resnet18_gn(input_shape: tuple[int, ...], n_classes: int, norm: str, groups: int) -> nn.Module:
    """CIFAR-stem ResNet-18 with GroupNorm(2) (Liu's FedSWA/FedNSAM ``resnet18`` + GN, FedACG).

    conv3×3(C_in→64, stride 1) → norm → ReLU (no max-pool); BasicBlocks [2, 2, 2, 2] (stride 2 at
    stages 2-4, 1×1 projection shortcuts); average pool; fc 512→C; PyTorch default initialisation.
    11 173 962 parameters on 3×32×32 for 10 classes, 11 220 132 for 100. ``norm="batch"`` has buffers,
    which ``FlatModel`` rejects."""
    return ResNet18(input_shape[0], n_classes, stem="cifar", norm=norm, groups=groups)


def build_resnet18_gn_imagenet_stem(
    input_shape: tuple[int, ...], n_classes: int, norm: str, groups: int
) -> nn.Module:
    """ImageNet-stem ResNet-18 with GroupNorm(2): FL-Simulator's ``ResNet18`` (FedSpeed/FedSMOO/FedLESAM).

    conv7×7(stride 2) → norm → ReLU → max-pool 3×3 stride 2 (32×32 is 8×8 at the blocks), then as
    ``resnet18_gn``; Kaiming-normal fan_out initialisation. 11 181 642 parameters on 3×32×32 for 10
    classes, 11 227 812 for 100."""
    model = ResNet18(input_shape[0], n_classes, stem="imagenet", norm=norm, groups=groups)
    _torchvision_init_(model)
    return model
