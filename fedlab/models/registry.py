"""Models by name: ``build_model``, ``MODELS``, ``count_parameters``, ``model_info``."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from fedlab._rng import derive_seed
from .cnn import NORMS, build_cnn, build_lenet5, build_mlp
from .resnet import build_resnet18_gn, build_resnet18_gn_imagenet_stem
from .wrn import build_wrn28_4_gn

Builder = Callable[[tuple[int, ...], int, str, int], nn.Module]


def _image_at_least(min_side: int) -> Callable[[tuple[int, ...]], bool]:
    def check(shape: tuple[int, ...]) -> bool:
        return len(shape) == 3 and shape[1] >= min_side and shape[2] >= min_side

    return check


@dataclass(frozen=True)
class _Entry:
    builder: Builder
    accepts_shape: Callable[[tuple[int, ...]], bool]
    accepts_text: str
    norms: tuple[str, ...]


_NO_BATCH = ("group", "none")
_REGISTRY: dict[str, _Entry] = {
    "mlp": _Entry(build_mlp, lambda s: len(s) >= 1, "any non-empty shape (flattened)", _NO_BATCH),
    "cnn": _Entry(build_cnn, _image_at_least(4), "(C, H, W) with H, W >= 4", _NO_BATCH),
    "lenet5": _Entry(build_lenet5, _image_at_least(16), "(C, H, W) with H, W >= 16", _NO_BATCH),
    "resnet18_gn": _Entry(build_resnet18_gn, _image_at_least(16), "(C, H, W) with H, W >= 16", NORMS),
    "resnet18_gn_imagenet_stem": _Entry(
        build_resnet18_gn_imagenet_stem, _image_at_least(16), "(C, H, W) with H, W >= 16", NORMS
    ),
    "wrn28_4_gn": _Entry(build_wrn28_4_gn, _image_at_least(16), "(C, H, W) with H, W >= 16", NORMS),
}

MODELS: tuple[str, ...] = tuple(_REGISTRY)
"""Registered model names, in a fixed order."""


def _entry(name: str) -> _Entry:
    if name not in _REGISTRY:
        raise ValueError(f"unknown model {name!r}; allowed: {', '.join(MODELS)}")
    return _REGISTRY[name]


def _checked_shape(name: str, entry: _Entry, input_shape: Sequence[int]) -> tuple[int, ...]:
    try:
        shape = tuple(int(s) for s in input_shape)
    except (TypeError, ValueError):
        raise ValueError(
            f"input_shape must be a sequence of ints; model {name!r} accepts {entry.accepts_text}"
        ) from None
    if any(s < 1 for s in shape) or not entry.accepts_shape(shape):
        raise ValueError(
            f"input_shape {shape} does not fit model {name!r}; it accepts input_shape {entry.accepts_text} "
            "(per sample, without the batch dimension)"
        )
    return shape


def _check_options(name: str, entry: _Entry, n_classes: int, norm: str, groups: int) -> None:
    if isinstance(n_classes, bool) or not isinstance(n_classes, int) or n_classes < 1:
        raise ValueError(f"n_classes must be a positive int, got {n_classes!r}")
    if norm not in NORMS:
        raise ValueError(f"unknown norm {norm!r}; allowed: {', '.join(NORMS)}")
    if norm not in entry.norms:
        raise ValueError(f"norm {norm!r} is not available for model {name!r}; allowed: {', '.join(entry.norms)}")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ValueError(f"groups must be a positive int, got {groups!r}")


def build_model(name: str, input_shape: tuple[int, ...], n_classes: int, *, norm: str = "group", groups: int = 2,
                seed: int | None = None) -> nn.Module:
    """Build a registered model (one of ``MODELS``) for one sample of shape ``input_shape``.

    ``norm``: ``"group"`` (default, ``groups`` groups: buffer-free, vmap-safe) or ``"none"``; ``"batch"``
    only for the ResNets and the WRN as ordinary modules (``FlatModel`` refuses buffers); ``mlp`` and
    ``lenet5`` ignore it. ``seed``: initial weights from ``derive_seed(seed, "init", name)``, the global
    RNG left as it was (``None``: the global RNG). ValueError naming what is wrong (name, norm, shape,
    ``n_classes``, ``groups``)."""
    entry = _entry(name)
    shape = _checked_shape(name, entry, input_shape)
    _check_options(name, entry, n_classes, norm, groups)
    if seed is None:
        return entry.builder(shape, n_classes, norm, groups)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, "init", name))
        return entry.builder(shape, n_classes, norm, groups)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameter entries (d, the length of the flat vector θ)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def model_info(name: str, input_shape: tuple[int, ...], n_classes: int) -> dict:
    """Summary of a registered model (default GroupNorm) without allocating weights: ``{"name", "params",
    "input_shape", "n_classes", "accepts", "description"}``, the description the docstring's first line."""
    entry = _entry(name)
    with torch.device("meta"):
        model = build_model(name, input_shape, n_classes)
    doc = (entry.builder.__doc__ or "").strip()
    return {
        "name": name,
        "params": count_parameters(model),
        "input_shape": tuple(int(s) for s in input_shape),
        "n_classes": n_classes,
        "accepts": entry.accepts_text,
        "description": doc.splitlines()[0] if doc else "",
    }
