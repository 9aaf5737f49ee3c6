"""Train on your own tensors: :func:`from_tensors` turns user-supplied arrays into a :class:`Dataset`.

Replaying another code base's experiment needs its exact samples (any subset of indices, its own
normalisation), which a dataset name cannot express. Hand the tensors over instead::

    ds = fedlab.data.from_tensors(x_train, y_train, x_test, y_test, n_classes=10, name="theirs")
    cfg = fedlab.Config(dataset="custom", partition="file", partition_params={"path": "split.json"},
                        sampling="schedule", schedule_path="schedule.json", ...)
    result = fedlab.run(cfg, dataset=ds, theta0=their_initial_model)

The run key includes :attr:`Dataset.digest` (a SHA-256 of the tensors), so a stored run trained on
other data is never returned. fedlab does not normalise or augment user tensors unless asked: pass
them normalised as the other code base did (``augment="crop_flip"`` turns on the on-device crop +
flip, parametrised by ``Config.crop_prob/crop_padding/flip_prob``).
"""
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


def from_tensors(
    x_train: Any, y_train: Any, x_test: Any, y_test: Any, *, n_classes: int | None = None,
    name: str = "custom", augment: str | None = None, mean: tuple[float, ...] = (0.0,),
    std: tuple[float, ...] = (1.0,), device: str | torch.device | None = None,
) -> Dataset:
    """A :class:`Dataset` from user tensors (torch or numpy), validated, as float32/int64 on one device.

    Args:
        x_train, x_test: features ``(n, ...)``, floating point, already normalised the way the user's
            code base does it; both with the same per-sample shape. Stored as float32.
        y_train, y_test: 1-D integer class ids in ``[0, n_classes)``; stored as int64.
        n_classes: number of classes (default: the largest label + 1, over train and test).
        name: a label for plots and ``describe()``; not part of the digest.
        augment: ``None`` (default) or ``"crop_flip"`` (needs images ``(n, C, H, W)``).
        mean, std: the normalisation the user applied, recorded for reference only (fedlab does not
            apply it; ``as_cifar_shape`` and ``train_size`` do not apply to user tensors either).
        device: where the tensors live (default: ``x_train``'s device).

    Raises ValueError naming the argument for anything else.
    """
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
