"""Datasets as whole tensors on one device: Fashion-MNIST, CIFAR-10/100, sklearn digits, Synthetic(α, β).

A dataset is loaded once, normalised, and returned as a :class:`Dataset` of train/test tensors;
batching, partitioning and augmentation (:mod:`fedlab.data.augment`) work on those tensors directly.
Reading Fashion-MNIST's and CIFAR's files (torchvision's readers; Debian's ``dataset-fashion-mnist``
before any download) is :mod:`fedlab.data._files`; ``digits`` is scikit-learn's bundled set and
``synthetic`` is generated in memory. Every draw uses a generator from :mod:`fedlab._rng`."""
from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from fedlab._rng import numpy_generator
from fedlab._paths import data_root
from fedlab.data._files import (CIFAR10_MEAN, CIFAR10_STD, CIFAR100_MEAN, CIFAR100_STD, FMNIST_MEAN, FMNIST_STD,
                                DatasetError, DatasetNotFoundError, _load_cifar, _load_fmnist)

__all__ = [
    "DATASETS",
    "Dataset",
    "DatasetError",
    "DatasetNotFoundError",
    "balanced_subset",
    "load_dataset",
    "pad_to_cifar_shape",
]

DATASETS: tuple[str, ...] = ("fmnist", "cifar10", "cifar100", "digits", "synthetic")
"""Names accepted by :func:`load_dataset`."""

# --- Synthetic(α, β) ----------------------------------------------------------------------------
SYNTHETIC_DIM = 60
SYNTHETIC_CLASSES = 10
SYNTHETIC_MIN_SAMPLES = 50
"""FedProx's generator: samples per device = int(lognormal(4, 2)) + 50."""
SYNTHETIC_MAX_SAMPLES = 2000
"""Cap on samples per device (ours): lognormal(4, 2) has a heavy tail (e^10 ≈ 22 000 at +3σ)."""
SYNTHETIC_TRAIN_FRACTION = 0.75
"""Per-device train share; the rest of each device's samples is pooled into the test set."""


@dataclass(eq=False)
class Dataset:
    """A whole dataset as tensors on one device.

    Images ``(n, C, H, W)``, tabular data ``(n, D)``; ``x_*`` float32, normalised with ``mean``/``std``;
    ``y_*`` int64. ``augment`` names the training-time augmentation; ``natural_clients`` holds per-client
    training indices for datasets federated by construction (``synthetic``), else ``None``."""

    name: str
    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    n_classes: int
    augment: str | None
    mean: tuple[float, ...]
    std: tuple[float, ...]
    natural_clients: tuple[np.ndarray, ...] | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample, e.g. ``(1, 28, 28)`` or ``(60,)``."""
        return tuple(int(s) for s in self.x_train.shape[1:])

    @property
    def n_train(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def n_test(self) -> int:
        return int(self.x_test.shape[0])

    @cached_property
    def digest(self) -> str:
        """SHA-256 of what the numbers depend on: ``n_classes``, ``augment`` and each tensor's dtype, shape
        and bytes (read on the CPU). It enters the run key, so the store never returns a run trained on other
        tensors. Computed once per object: treat the tensors as immutable."""
        h = hashlib.sha256()
        h.update(f"n_classes={self.n_classes};augment={self.augment}".encode())
        for name in ("x_train", "y_train", "x_test", "y_test"):
            t = getattr(self, name).detach()
            h.update(f";{name}:{t.dtype}:{tuple(t.shape)};".encode())
            h.update(t.cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
        return h.hexdigest()

    def to(self, device: str | torch.device) -> "Dataset":
        """A copy with the four tensors on ``device`` (metadata and client indices are shared)."""
        return dataclasses.replace(
            self,
            x_train=self.x_train.to(device),
            y_train=self.y_train.to(device),
            x_test=self.x_test.to(device),
            y_test=self.y_test.to(device),
        )

    def describe(self) -> str:
        """One line: name, sizes, per-sample shape, classes (and natural clients if any)."""
        text = (
            f"{self.name}: {self.n_train} train / {self.n_test} test, input {self.input_shape}, "
            f"{self.n_classes} classes, augment={self.augment}, device={self.x_train.device}"
        )
        if self.natural_clients is not None:
            text += f", {len(self.natural_clients)} natural clients"
        return text


# --- helpers ---
def balanced_subset(
    labels: np.ndarray | Tensor, size: int, *, seed: int, purpose: str = "subset"
) -> np.ndarray:
    """Sorted indices of a class-balanced random subset of ``size`` samples.

    Each class gets ``size // n_classes`` (the remainder to distinct random classes); a class short of
    its share gives all it has and the shortfall is spread over the others. Drawn without replacement
    from ``numpy_generator(seed, "balanced_subset", purpose)``. ValueError if ``size`` exceeds the data
    or is below the number of classes."""
    y = labels.detach().cpu().numpy() if isinstance(labels, Tensor) else np.asarray(labels)
    y = y.reshape(-1)
    classes, counts = np.unique(y, return_counts=True)
    size = int(size)
    if size > len(y):
        raise ValueError(f"size={size} exceeds the {len(y)} samples available")
    if size < len(classes):
        raise ValueError(
            f"size={size} is smaller than the number of classes ({len(classes)}); "
            "a class-balanced subset needs at least one sample per class"
        )
    rng = numpy_generator(seed, "balanced_subset", purpose)
    alloc = np.zeros(len(classes), dtype=np.int64)
    remaining = size
    while remaining > 0:  # water-filling: at most n_classes + 1 passes
        open_ = np.flatnonzero(alloc < counts)
        share = remaining // len(open_)
        if share == 0:
            extra = rng.choice(open_, size=remaining, replace=False)
            alloc[extra] += 1
            break
        add = np.minimum(share, counts[open_] - alloc[open_])
        alloc[open_] += add
        remaining -= int(add.sum())
    picked = []
    for cls, k in zip(classes, alloc):
        members = np.flatnonzero(y == cls)
        picked.append(rng.choice(members, size=int(k), replace=False))
    return np.sort(np.concatenate(picked)).astype(np.int64)


def pad_to_cifar_shape(x: Tensor, *, pad_value: float | None = None) -> Tensor:
    """``(n, 1, H ≤ 32, W ≤ 32)`` → ``(n, 3, 32, 32)``: centre-pad with the normalised background
    (``pad_value=None``: Fashion-MNIST's ``-0.2860 / 0.3530``), then repeat the channel, so LeNet-5 and
    the CIFAR ResNets run on Fashion-MNIST. 3-channel 32×32 input is returned as is."""
    if x.ndim != 4:
        raise ValueError(f"pad_to_cifar_shape expects (n, C, H, W); got shape {tuple(x.shape)}")
    n, c, h, w = x.shape
    if c == 3 and h == 32 and w == 32:
        return x
    if c != 1 or h > 32 or w > 32:
        raise ValueError(f"pad_to_cifar_shape needs single-channel images of at most 32×32; got {tuple(x.shape)}")
    if pad_value is None:
        pad_value = (0.0 - FMNIST_MEAN[0]) / FMNIST_STD[0]
    top, left = (32 - h) // 2, (32 - w) // 2
    out = torch.full((n, 1, 32, 32), float(pad_value), dtype=x.dtype, device=x.device)
    out[:, :, top : top + h, left : left + w] = x
    return out.expand(n, 3, 32, 32).contiguous()


# --- sklearn digits ---
def _load_digits(seed: int) -> tuple[Tensor, Tensor, Tensor, Tensor, tuple[float, ...], tuple[float, ...]]:
    """1797 8×8 digits; stratified 80/20 split; [0, 1] scaling then train mean/std normalisation."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = bunch.data.astype(np.float32) / 16.0  # pixel values are 0..16
    y = bunch.target.astype(np.int64)
    rng = numpy_generator(seed, "digits", "split")
    test_idx = []
    for cls in np.unique(y):  # stratified: round(20 %) of every class goes to test
        members = rng.permutation(np.flatnonzero(y == cls))
        test_idx.append(members[: int(round(0.2 * len(members)))])
    is_test = np.zeros(len(y), dtype=bool)
    is_test[np.concatenate(test_idx)] = True
    x_train, x_test = x[~is_test], x[is_test]
    mean, std = float(x_train.mean()), float(x_train.std())
    to_img = lambda a: torch.from_numpy((a - mean) / std).reshape(-1, 1, 8, 8)  # noqa: E731
    return (
        to_img(x_train), torch.from_numpy(y[~is_test]), to_img(x_test), torch.from_numpy(y[is_test]),
        (mean,), (std,),
    )


# --- Synthetic(α, β) ---
def _make_synthetic(
    alpha: float, beta: float, n_clients: int, seed: int
) -> tuple[Tensor, Tensor, Tensor, Tensor, tuple[np.ndarray, ...]]:
    """FedProx's Synthetic(α, β) (Li et al., MLSys 2020, §5.1 and their ``generate_synthetic.py``).

    One generator ``numpy_generator(seed, "synthetic")``: ``n_k = min(int(lognormal(4, 2)) + 50,
    SYNTHETIC_MAX_SAMPLES)``; ``u_k ~ N(0, α)``; ``B_k ~ N(0, β)``; ``v_k ~ N(B_k, 1)^60``; per device
    ``W_k ~ N(u_k, 1)^{10×60}``, ``b_k ~ N(u_k, 1)^10``, ``x ~ N(v_k, diag(j^-1.2))``,
    ``y = argmax(W_k x + b_k)``. As in FedProx's code, α and β are standard deviations."""
    rng = numpy_generator(seed, "synthetic")
    sizes = np.minimum(rng.lognormal(4.0, 2.0, n_clients).astype(np.int64) + SYNTHETIC_MIN_SAMPLES,
                       SYNTHETIC_MAX_SAMPLES)
    u = rng.normal(0.0, 1.0, n_clients) * alpha
    big_b = rng.normal(0.0, 1.0, n_clients) * beta
    v = big_b[:, None] + rng.normal(0.0, 1.0, (n_clients, SYNTHETIC_DIM))
    sigma_sqrt = np.arange(1, SYNTHETIC_DIM + 1, dtype=np.float64) ** (-1.2 / 2)
    xs_tr, ys_tr, xs_te, ys_te, clients = [], [], [], [], []
    offset = 0
    for k in range(n_clients):
        w = u[k] + rng.normal(0.0, 1.0, (SYNTHETIC_CLASSES, SYNTHETIC_DIM))
        b = u[k] + rng.normal(0.0, 1.0, SYNTHETIC_CLASSES)
        x = v[k] + rng.normal(0.0, 1.0, (int(sizes[k]), SYNTHETIC_DIM)) * sigma_sqrt
        y = np.argmax(x @ w.T + b, axis=1)
        n_tr = int(SYNTHETIC_TRAIN_FRACTION * sizes[k])
        xs_tr.append(x[:n_tr]); ys_tr.append(y[:n_tr])  # noqa: E702
        xs_te.append(x[n_tr:]); ys_te.append(y[n_tr:])  # noqa: E702
        clients.append(np.arange(offset, offset + n_tr, dtype=np.int64))
        offset += n_tr
    f32 = lambda parts: torch.from_numpy(np.concatenate(parts).astype(np.float32))  # noqa: E731
    i64 = lambda parts: torch.from_numpy(np.concatenate(parts).astype(np.int64))  # noqa: E731
    return f32(xs_tr), i64(ys_tr), f32(xs_te), i64(ys_te), tuple(clients)


# --- entry point ---
VERIFY_ENV = "FEDLAB_DATA_VERIFY"
"""Environment variable: ``0`` skips the md5 check of CIFAR's files where ``verify`` is not passed."""


def cifar_verify_default() -> bool:
    """Whether CIFAR's md5 sums are checked when :func:`load_dataset` is not told: ``$FEDLAB_DATA_VERIFY``
    ``1`` or unset → yes, ``0`` → no (read at each call). Any other value is a ValueError naming it,
    so a typo cannot silently switch the check off or on."""
    value = os.environ.get(VERIFY_ENV, "1").strip()
    if value not in ("0", "1"):
        raise ValueError(f"${VERIFY_ENV}={value!r} is invalid; allowed: 0 (skip CIFAR's md5 check) or 1 (check, "
                         "the default)")
    return value == "1"


def load_dataset(name: str, *, root: str | Path | None = None, device: str | torch.device = "cpu",
                 train_size: int | None = None, test_size: int | None = None, seed: int = 0,
                 download: bool | None = None, as_cifar_shape: bool = False, verify: bool | None = None,
                 synthetic_alpha: float = 1.0, synthetic_beta: float = 1.0, synthetic_clients: int = 30) -> Dataset:
    """Load dataset ``name`` (one of :data:`DATASETS`) as normalised tensors on ``device``.

    ``root``: default ``$FEDLAB_DATA`` or ``<repo>/data``. ``train_size`` / ``test_size``: a
    class-balanced seeded subset (:func:`balanced_subset`; for ``synthetic`` a train subset drops
    ``natural_clients``). ``seed`` seeds the subsets, the digits split and the synthetic generator.
    ``download``: ``None`` only if files are missing, ``False`` never (:class:`DatasetNotFoundError`),
    ``True`` passed to torchvision. ``as_cifar_shape``: :func:`pad_to_cifar_shape`. ``verify``: CIFAR's
    md5 check (``None``: :func:`cifar_verify_default`, unless ``$FEDLAB_DATA_VERIFY`` is ``0``).
    ``synthetic_*``: Synthetic(α, β) — α shifts all logits of a device equally, so with a
    fixed seed the labels do not depend on α (as in FedProx); heterogeneity comes from β.

    Normalisation: the constants of :mod:`fedlab.data._files` (FL-Simulator's for CIFAR); digits:
    [0, 1] then the training set's mean/std; synthetic: none."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; allowed: {', '.join(DATASETS)}")
    for field, value in (("train_size", train_size), ("test_size", test_size)):
        if value is not None and (int(value) != value or value <= 0):
            raise ValueError(f"{field} must be a positive integer or None; got {value!r}")
    if name == "synthetic":
        if int(synthetic_clients) != synthetic_clients or synthetic_clients <= 0:
            raise ValueError(f"synthetic_clients must be a positive integer; got {synthetic_clients!r}")
        if synthetic_alpha < 0 or synthetic_beta < 0:
            raise ValueError(
                f"synthetic_alpha and synthetic_beta must be >= 0; got {synthetic_alpha!r}, {synthetic_beta!r}"
            )
    root = Path(root).expanduser() if root is not None else data_root()

    natural: tuple[np.ndarray, ...] | None = None
    augment: str | None = None
    if name == "fmnist":
        x_tr, y_tr, x_te, y_te = _load_fmnist(root, download)
        mean, std, n_classes = FMNIST_MEAN, FMNIST_STD, 10
    elif name in ("cifar10", "cifar100"):
        x_tr, y_tr, x_te, y_te = _load_cifar(name, root, download, cifar_verify_default() if verify is None else verify)
        if name == "cifar10":
            mean, std, n_classes = CIFAR10_MEAN, CIFAR10_STD, 10
        else:
            mean, std, n_classes = CIFAR100_MEAN, CIFAR100_STD, 100
        augment = "crop_flip"
    elif name == "digits":
        x_tr, y_tr, x_te, y_te, mean, std = _load_digits(seed)
        n_classes = 10
    else:
        x_tr, y_tr, x_te, y_te, natural = _make_synthetic(
            float(synthetic_alpha), float(synthetic_beta), int(synthetic_clients), seed
        )
        mean, std, n_classes = (0.0,), (1.0,), SYNTHETIC_CLASSES

    for field, value, y in (("train_size", train_size, y_tr), ("test_size", test_size, y_te)):
        if value is not None and value > len(y):
            raise ValueError(f"{field}={value} exceeds the {len(y)} samples available in {name}")
    if train_size is not None:
        keep = torch.from_numpy(balanced_subset(y_tr, train_size, seed=seed, purpose=f"{name}/train"))
        x_tr, y_tr = x_tr[keep], y_tr[keep]
        natural = None  # device indices no longer refer to this training set
    if test_size is not None:
        keep = torch.from_numpy(balanced_subset(y_te, test_size, seed=seed, purpose=f"{name}/test"))
        x_te, y_te = x_te[keep], y_te[keep]

    if as_cifar_shape:
        if x_tr.ndim != 4:
            raise ValueError(f"as_cifar_shape=True needs an image dataset; {name} samples have shape {tuple(x_tr.shape[1:])}")
        if x_tr.shape[1] == 1:
            background = (0.0 - mean[0]) / std[0]
            x_tr = pad_to_cifar_shape(x_tr, pad_value=background)
            x_te = pad_to_cifar_shape(x_te, pad_value=background)
            mean, std = mean * 3, std * 3

    return Dataset(
        name=name,
        x_train=x_tr.contiguous().to(device),
        y_train=y_tr.to(device),
        x_test=x_te.contiguous().to(device),
        y_test=y_te.to(device),
        n_classes=n_classes,
        augment=augment,
        mean=tuple(float(m) for m in mean),
        std=tuple(float(s) for s in std),
        natural_clients=natural,
    )
