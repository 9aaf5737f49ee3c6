"""Train on your own tensors: :func:`from_tensors` turns user-supplied arrays into a :class:`Dataset`,
for replaying another code base's exact samples and normalisation (the book's guide ``data.md``).
The run key includes :attr:`Dataset.digest`, so a run trained on other data is never returned."""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from .augment import AUGMENTATIONS
from .datasets import Dataset

__all__ = ["from_tensors"]


def _as_tensor(name: str, value: Any) -> Tensor:
    if isinstance(value, Tensor):
        return value.detach()
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    raise ValueError(f"{name} must be a torch.Tensor or a numpy array (got {type(value).__name__})")


def _features(name: str, value: Any) -> Tensor:
    x = _as_tensor(name, value)
    if x.ndim < 2 or x.shape[0] == 0:
        raise ValueError(f"{name} must have shape (n, ...) with n ≥ 1 samples: (n, C, H, W) images or "
                         f"(n, D) features (got shape {tuple(x.shape)})")
    if not x.is_floating_point():
        raise ValueError(f"{name} must hold floating-point features, already normalised (got dtype {x.dtype})")
    x = x.to(torch.float32)
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} contains NaN or infinite values")
    return x.contiguous()


def _labels(name: str, value: Any, n: int, x_name: str) -> Tensor:
    y = _as_tensor(name, value)
    if y.ndim != 1 or y.dtype in (torch.bool,) or y.is_floating_point() or y.is_complex():
        raise ValueError(f"{name} must be a 1-D tensor of integer class ids (got shape {tuple(y.shape)}, "
                         f"dtype {y.dtype})")
    if y.shape[0] != n:
        raise ValueError(f"{name} has {y.shape[0]} labels but {x_name} has {n} samples")
    y = y.to(torch.int64)
    if int(y.min()) < 0:
        raise ValueError(f"{name} must hold class ids ≥ 0 (got {int(y.min())})")
    return y


def from_tensors(x_train: Any, y_train: Any, x_test: Any, y_test: Any, *, n_classes: int | None = None,
                 name: str = "custom", augment: str | None = None, mean: tuple[float, ...] = (0.0,),
                 std: tuple[float, ...] = (1.0,), device: str | torch.device | None = None) -> Dataset:
    """A :class:`Dataset` from user tensors (torch or numpy), validated, as float32/int64 on one device.

    ``x_*``: floating features ``(n, ...)``, already normalised, the same per-sample shape; ``y_*``: 1-D
    integer ids in ``[0, n_classes)`` (default: largest label + 1). ``name`` labels it (not digested);
    ``augment``: ``None`` or ``"crop_flip"`` (images only); ``mean``/``std``: recorded, not applied;
    ``device``: default ``x_train``'s. ValueError naming the argument otherwise."""
    xs = {"x_train": _features("x_train", x_train), "x_test": _features("x_test", x_test)}
    if xs["x_train"].shape[1:] != xs["x_test"].shape[1:]:
        raise ValueError(f"x_train samples have shape {tuple(xs['x_train'].shape[1:])} but x_test samples "
                         f"have shape {tuple(xs['x_test'].shape[1:])}")
    ys = {"y_train": _labels("y_train", y_train, xs["x_train"].shape[0], "x_train"),
          "y_test": _labels("y_test", y_test, xs["x_test"].shape[0], "x_test")}
    top = max(int(ys["y_train"].max()), int(ys["y_test"].max())) + 1
    if n_classes is None:
        n_classes = top
    if isinstance(n_classes, bool) or not isinstance(n_classes, int) or n_classes < 2 or n_classes < top:
        raise ValueError(f"n_classes={n_classes!r} must be an integer ≥ 2 and > every label (largest label "
                         f"{top - 1})")
    if augment is not None and augment not in AUGMENTATIONS:
        raise ValueError(f"augment={augment!r} is invalid; allowed: None, {', '.join(AUGMENTATIONS)}")
    if augment is not None and xs["x_train"].ndim != 4:
        raise ValueError(f"augment={augment!r} needs images (n, C, H, W); x_train has shape "
                         f"{tuple(xs['x_train'].shape)}")
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string (got {name!r})")
    dev = torch.device(device) if device is not None else xs["x_train"].device
    return Dataset(
        name=name,
        x_train=xs["x_train"].to(dev), y_train=ys["y_train"].to(dev),
        x_test=xs["x_test"].to(dev), y_test=ys["y_test"].to(dev),
        n_classes=n_classes, augment=augment,
        mean=tuple(float(m) for m in mean), std=tuple(float(s) for s in std),
    )
