"""Datasets as whole tensors on one device: Fashion-MNIST, CIFAR-10/100, sklearn digits, Synthetic(α, β).

Every dataset is loaded once into memory, normalised, and returned as a :class:`Dataset` holding
``x_train``/``y_train``/``x_test``/``y_test`` tensors on the requested device; batching, partitioning
and augmentation (:mod:`fedlab.data.augment`) then work on those tensors directly.

Where the files come from (see shared/docs/ENVIRONMENT.md, "Real data offline"):

* ``fmnist`` — torchvision's ``FashionMNIST`` reads the four uncompressed IDX files in
  ``<root>/FashionMNIST/raw/``.  If they are missing they are gunzipped there from the Debian package
  ``dataset-fashion-mnist`` (``/usr/share/datasets/fashion-mnist/*.gz``); only then, unless
  ``download=False``, torchvision's own download is tried.
* ``cifar10`` / ``cifar100`` — torchvision's ``CIFAR10`` / ``CIFAR100`` read the python pickles in
  ``<root>/cifar-10-batches-py/`` / ``<root>/cifar-100-python/``; download only when asked or missing.
* ``digits`` — scikit-learn's bundled ``load_digits`` (no files needed).
* ``synthetic`` — generated in memory (FedProx's Synthetic(α, β)).

All randomness comes from generators derived from ``seed`` through :mod:`fedlab._rng`.

Why one ~560-line file: the five loaders share :class:`Dataset`, the normalisation and the not-found
errors; each loader is one short function.
"""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import math
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from fedlab.store.atomic import atomic_write_bytes
from fedlab._rng import numpy_generator
from fedlab._paths import data_root

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

# --- normalisation constants -------------------------------------------------------------------
# Fashion-MNIST: mean and std of the 60 000 training images' pixels in [0, 1].
FMNIST_MEAN: tuple[float, ...] = (0.2860,)
FMNIST_STD: tuple[float, ...] = (0.3530,)
# CIFAR: FL-Simulator's constants (../shared/docs/ALGORITHMS.md §20).
CIFAR10_MEAN: tuple[float, ...] = (0.491, 0.482, 0.447)
CIFAR10_STD: tuple[float, ...] = (0.247, 0.243, 0.262)
CIFAR100_MEAN: tuple[float, ...] = (0.5071, 0.4867, 0.4408)
CIFAR100_STD: tuple[float, ...] = (0.2675, 0.2565, 0.2761)

# --- where Fashion-MNIST may already be on disk -------------------------------------------------
DEBIAN_FMNIST_DIR: Path = Path("/usr/share/datasets/fashion-mnist")
"""Installed by ``apt-get install dataset-fashion-mnist`` (gzipped IDX files)."""
DEBIAN_FMNIST_PACKAGE = "dataset-fashion-mnist"
FMNIST_FILES: tuple[str, ...] = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
"""The uncompressed names torchvision's ``FashionMNIST`` expects in ``<root>/FashionMNIST/raw/``."""

# --- Synthetic(α, β) ----------------------------------------------------------------------------
SYNTHETIC_DIM = 60
SYNTHETIC_CLASSES = 10
SYNTHETIC_MIN_SAMPLES = 50
"""FedProx's generator: samples per device = int(lognormal(4, 2)) + 50."""
SYNTHETIC_MAX_SAMPLES = 2000
"""Cap on samples per device (ours): lognormal(4, 2) has a heavy tail (e^10 ≈ 22 000 at +3σ)."""
SYNTHETIC_TRAIN_FRACTION = 0.75
"""Per-device train share; the rest of each device's samples is pooled into the test set."""


class DatasetNotFoundError(FileNotFoundError):
    """A dataset's files are not on disk and could not (or were not allowed to) be downloaded."""


class DatasetError(RuntimeError):
    """A dataset's files are on disk but unusable: corrupt, truncated, not in the expected format, or
    holding labels outside the dataset's classes. The message names the file and how to restore it."""


def _check_label_range(y: Tensor, n_classes: int, where: str, fix: str) -> None:
    """DatasetError unless every label is a class id in ``[0, n_classes)`` (checked at load, so a bad
    byte is reported with its file instead of as an IndexError in the middle of a round)."""
    if y.numel() and (int(y.min()) < 0 or int(y.max()) >= n_classes):
        bad = int(y.min()) if int(y.min()) < 0 else int(y.max())
        raise DatasetError(f"{where} holds label {bad}, outside the {n_classes} classes (0..{n_classes - 1}): "
                           f"the file is corrupt; {fix}")


@dataclass(eq=False)
class Dataset:
    """A whole dataset as tensors on one device.

    Images are ``(n, C, H, W)``, tabular data ``(n, D)``; ``x_*`` are float32 and already normalised
    with ``mean``/``std`` (per channel), ``y_*`` are int64 class indices.  ``augment`` names the
    training-time augmentation (:func:`fedlab.data.augment.apply_augment`), ``None`` for none.
    ``natural_clients`` holds per-client index arrays into the *training* set for datasets that are
    federated by construction (``synthetic``), otherwise ``None``.
    """

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
        """SHA-256 hex digest of what the numbers depend on: the four tensors and the classes.

        Hashes ``n_classes``, ``augment``, then for each of ``x_train, y_train, x_test, y_test`` its
        dtype, shape and raw bytes (read on the CPU, so the digest does not depend on the device).
        ``name``, ``mean`` and ``std`` are labels and are left out. It enters the run key
        (:meth:`fedlab.engine.Simulation.build`), so a run trained on other tensors is never returned
        from the store. Computed once per object: treat a dataset's tensors as immutable (build a new
        ``Dataset`` to change them).
        """
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


# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------
def balanced_subset(
    labels: np.ndarray | Tensor, size: int, *, seed: int, purpose: str = "subset"
) -> np.ndarray:
    """Sorted indices of a class-balanced random subset of ``size`` samples.

    Each class present in ``labels`` gets ``size // n_classes`` samples, and the ``size % n_classes``
    left over go to distinct classes chosen at random.  If a class has fewer samples than its share,
    it contributes all of them and the shortfall is spread evenly over the other classes (so the
    result is as balanced as the data allows).  Within a class the samples are drawn uniformly
    without replacement.  The draw uses ``numpy_generator(seed, "balanced_subset", purpose)``: the same
    ``(seed, purpose)`` gives the same indices.

    Raises ValueError if ``size`` exceeds ``len(labels)`` or is below the number of classes present.
    """
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
    """``(n, 1, 28, 28)`` → ``(n, 3, 32, 32)``: pad 2 px on each side, then repeat the channel 3×.

    The padding value is the *normalised zero*, i.e. the background of the original images:
    ``pad_value=None`` uses Fashion-MNIST's ``(0 - 0.2860) / 0.3530``; pass ``-mean/std`` for another
    dataset.  The original image sits unchanged in ``[..., 2:30, 2:30]``.  Lets LeNet-5 and the CIFAR
    ResNets run on Fashion-MNIST.  Any single-channel ``H, W ≤ 32`` is centred the same way (extra
    odd pixel at the bottom/right); 3-channel 32×32 input is returned as is.
    """
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


def _normalise_images(pixels: Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> Tensor:
    """uint8 ``(n, C, H, W)`` → float32 ``((pixels / 255) - mean) / std`` per channel."""
    x = pixels.to(torch.float32).div_(255.0)
    m = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
    return x.sub_(m).div_(s)


def _not_found(name: str, tried: list[Path], reason: str, folder: Path, files, hint: str = "") -> DatasetNotFoundError:
    where = ", ".join(str(p) for p in tried)
    msg = (
        f"dataset {name!r} not found in {where}; download failed/disabled: {reason}; "
        f"place the files at {folder}{os.sep} ({', '.join(files)})"
    )
    if hint:
        msg += f" or {hint}"
    return DatasetNotFoundError(msg)


# ------------------------------------------------------------------------------------------------
# Fashion-MNIST
# ------------------------------------------------------------------------------------------------
def _fmnist_missing(raw: Path) -> list[str]:
    return [f for f in FMNIST_FILES if not (raw / f).is_file()]


def _gunzip_from_debian(raw: Path, source: Path) -> str:
    """Gunzip the missing IDX files from ``source`` into ``raw`` atomically; '' or a failure reason."""
    missing = _fmnist_missing(raw)
    absent = [f + ".gz" for f in missing if not (source / (f + ".gz")).is_file()]
    if absent:
        return f"{source} lacks {', '.join(absent)}"
    try:
        raw.mkdir(parents=True, exist_ok=True)
        for f in missing:
            with gzip.open(source / (f + ".gz"), "rb") as src:
                atomic_write_bytes(raw / f, src.read())  # readers never see a half-written file
    except (OSError, EOFError) as exc:
        return f"could not extract {source} into {raw}: {exc}"
    return ""


_IDX_UBYTE = 0x08
"""The IDX element type of Fashion-MNIST's files: unsigned bytes."""
FMNIST_SHAPES: dict[str, tuple[int, ...]] = {"images": (28, 28), "labels": ()}
"""The per-sample shape of each kind of IDX file (after the sample count)."""


def _idx_count(path: Path, sample_shape: tuple[int, ...], fix: str) -> int:
    """The number of samples of an IDX file of unsigned bytes, after checking its header and its size.

    Layout: two zero bytes, the element type, the number of dimensions, each dimension as a big-endian
    int32, then the bytes. A file that is truncated, padded, or not that layout raises DatasetError
    naming it (torchvision would raise a bare RuntimeError or AssertionError, or read a short file).
    """
    ndim = 1 + len(sample_shape)
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            header = fh.read(4 + 4 * ndim)
    except OSError as err:
        raise DatasetError(f"Fashion-MNIST file {path} cannot be read ({err.strerror or err}); {fix}") from None
    if len(header) < 4 + 4 * ndim or header[:2] != b"\0\0" or header[2] != _IDX_UBYTE or header[3] != ndim:
        raise DatasetError(f"Fashion-MNIST file {path} is not an IDX file of {ndim}-dimensional unsigned bytes "
                           f"(corrupt or truncated header); {fix}")
    dims = [int.from_bytes(header[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    if tuple(dims[1:]) != sample_shape:
        raise DatasetError(f"Fashion-MNIST file {path} holds samples of shape {tuple(dims[1:])}, expected "
                           f"{sample_shape}; {fix}")
    expected = 4 + 4 * ndim + math.prod(dims)
    if size != expected:
        raise DatasetError(f"Fashion-MNIST file {path} has {size:,} bytes but its header announces {dims[0]:,} "
                           f"samples ({expected:,} bytes): it is truncated or corrupt; {fix}")
    return dims[0]


def _check_fmnist_files(raw: Path) -> str:
    """DatasetError unless the four IDX files are intact and pairwise consistent; returns the fix hint."""
    fix = (f"delete {raw} and load again (the files are unpacked again from {DEBIAN_FMNIST_DIR} — "
           f"`apt-get install --reinstall {DEBIAN_FMNIST_PACKAGE}` — or downloaded)")
    for split in ("train", "t10k"):
        images = raw / f"{split}-images-idx3-ubyte"
        labels = raw / f"{split}-labels-idx1-ubyte"
        n_images = _idx_count(images, FMNIST_SHAPES["images"], fix)
        n_labels = _idx_count(labels, FMNIST_SHAPES["labels"], fix)
        if n_images != n_labels:
            raise DatasetError(f"Fashion-MNIST files {images} ({n_images:,} images) and {labels} ({n_labels:,} "
                               f"labels) do not match; {fix}")
    return fix


def _load_fmnist(root: Path, download: bool | None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    from torchvision.datasets import FashionMNIST

    raw = root / "FashionMNIST" / "raw"
    tried = [raw]
    reasons = []
    if _fmnist_missing(raw):
        tried.append(DEBIAN_FMNIST_DIR)
        why = _gunzip_from_debian(raw, DEBIAN_FMNIST_DIR)
        if why:
            reasons.append(why)
    if _fmnist_missing(raw):
        if download is False:
            reasons.append("download=False")
        else:
            try:
                FashionMNIST(str(root), train=True, download=True)
            except Exception as exc:  # torchvision raises RuntimeError/URLError/OSError offline
                reasons.append(f"torchvision download: {type(exc).__name__}: " + " ".join(str(exc).split()))
        if _fmnist_missing(raw):
            raise _not_found(
                "fmnist", tried, "; ".join(reasons), raw, FMNIST_FILES,
                f"`apt-get install {DEBIAN_FMNIST_PACKAGE}`",
            )
    fix = _check_fmnist_files(raw)
    tensors = []
    for train in (True, False):
        try:
            ds = FashionMNIST(str(root), train=train, download=False)
        except Exception as exc:  # noqa: BLE001 — whatever torchvision trips on, the files are unusable
            raise DatasetError(f"Fashion-MNIST files in {raw} cannot be parsed ({type(exc).__name__}: "
                               f"{' '.join(str(exc).split())}); {fix}") from None
        labels = raw / f"{'train' if train else 't10k'}-labels-idx1-ubyte"
        _check_label_range(ds.targets, 10, f"Fashion-MNIST file {labels}", fix)
        tensors.append(_normalise_images(ds.data.unsqueeze(1), FMNIST_MEAN, FMNIST_STD))
        tensors.append(ds.targets.to(torch.int64))
    return tensors[0], tensors[1], tensors[2], tensors[3]


# ------------------------------------------------------------------------------------------------
# CIFAR-10 / CIFAR-100
# ------------------------------------------------------------------------------------------------
class _SkipMd5:
    """Mixin for torchvision's CIFAR classes that skips *only* the md5 comparisons.

    Why: torchvision checks each pickle against the md5 of the official release.  That is right
    for real data (``verify=True``, the default) but makes it impossible to exercise the real parsing
    code on small files written in the same format (tests; this machine cannot download CIFAR), or
    on a re-pickled copy.  With ``verify=False`` the same files are opened and parsed by torchvision's
    own ``__init__``; only "present" replaces "present and md5 matches".
    """

    def _check_integrity(self) -> bool:
        folder = os.path.join(self.root, self.base_folder)
        return all(os.path.isfile(os.path.join(folder, f)) for f, _ in self.train_list + self.test_list)

    def _load_meta(self) -> None:
        import pickle

        path = os.path.join(self.root, self.base_folder, self.meta["filename"])
        if not os.path.isfile(path):
            raise RuntimeError(f"Dataset metadata file not found: {path}")
        with open(path, "rb") as infile:
            data = pickle.load(infile, encoding="latin1")
        self.classes = data[self.meta["key"]]
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}


def _cifar_classes(name: str, verify: bool):
    from torchvision.datasets import CIFAR10, CIFAR100

    base = CIFAR10 if name == "cifar10" else CIFAR100
    if verify:
        return base
    return type(f"_Unverified{base.__name__}", (_SkipMd5, base), {"__module__": __name__})


def _load_cifar(name: str, root: Path, download: bool | None, verify: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    cls = _cifar_classes(name, verify)
    folder = root / cls.base_folder
    files = [f for f, _ in cls.train_list + cls.test_list] + [cls.meta["filename"]]

    def missing() -> list[str]:
        return [f for f in files if not (folder / f).is_file()]

    reason = ""
    if download is True or (download is None and missing()):
        try:  # torchvision skips the download when the files are present (and, if verify, intact)
            cls(str(root), train=True, download=True)
        except Exception as exc:  # offline: URLError/OSError/RuntimeError
            reason = f"torchvision download: {type(exc).__name__}: " + " ".join(str(exc).split())
    elif missing():
        reason = "download=False"
    if missing():
        raise _not_found(
            name, [folder], reason or "files still missing after download",
            folder, files,
            f"run load_dataset({name!r}, download=True) on a machine with internet",
        )
    fix = (f"delete {folder} and load it again with download=True (or restore the official "
           f"{', '.join(files)})")
    n_classes = 10 if name == "cifar10" else 100
    tensors = []
    for train in (True, False):
        try:
            ds = cls(str(root), train=train, download=False)
        except RuntimeError as exc:
            if verify:
                raise DatasetError(
                    f"{name} files in {folder} failed torchvision's md5 integrity check ({exc}); they are "
                    "corrupted, truncated or not the official release. Re-download them, or pass "
                    "verify=False to skip the md5 check and parse them anyway"
                    + (f" [{reason}]" if reason else "")
                ) from None
            raise DatasetError(f"{name} files in {folder} cannot be parsed ({' '.join(str(exc).split())}); "
                               f"{fix}") from None
        except Exception as exc:  # noqa: BLE001 — unpickling a truncated/corrupt batch fails in many ways
            raise DatasetError(f"{name} files in {folder} cannot be parsed ({type(exc).__name__}: "
                               f"{' '.join(str(exc).split())}); {fix}") from None
        split = ", ".join(f for f, _ in (cls.train_list if train else cls.test_list))
        _check_label_range(torch.as_tensor(np.asarray(ds.targets, dtype=np.int64)), n_classes,
                           f"{name} labels in {folder} ({split})", fix)
        mean, std = (CIFAR10_MEAN, CIFAR10_STD) if name == "cifar10" else (CIFAR100_MEAN, CIFAR100_STD)
        pixels = torch.from_numpy(np.ascontiguousarray(ds.data.transpose(0, 3, 1, 2)))  # HWC -> CHW
        tensors.append(_normalise_images(pixels, mean, std))
        tensors.append(torch.as_tensor(np.asarray(ds.targets, dtype=np.int64)))
    return tensors[0], tensors[1], tensors[2], tensors[3]


# ------------------------------------------------------------------------------------------------
# sklearn digits
# ------------------------------------------------------------------------------------------------
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


# ------------------------------------------------------------------------------------------------
# Synthetic(α, β)
# ------------------------------------------------------------------------------------------------
def _make_synthetic(
    alpha: float, beta: float, n_clients: int, seed: int
) -> tuple[Tensor, Tensor, Tensor, Tensor, tuple[np.ndarray, ...]]:
    """FedProx's Synthetic(α, β) (Li et al., MLSys 2020, §5.1 and their ``generate_synthetic.py``).

    Draw order (one numpy generator ``numpy_generator(seed, "synthetic")``; α and β only scale draws,
    so the same seed gives the same standard-normal draws for every α, β):
    ``n_k = min(int(lognormal(4, 2)) + 50, SYNTHETIC_MAX_SAMPLES)``; ``u_k ~ N(0, α)``;
    ``B_k ~ N(0, β)``; ``v_k ~ N(B_k, 1)^60``; then per device ``W_k ~ N(u_k, 1)^{10×60}``,
    ``b_k ~ N(u_k, 1)^10``, ``x ~ N(v_k, Σ)`` with ``Σ = diag(j^-1.2)``, ``y = argmax(W_k x + b_k)``
    (argmax of the softmax).  As in FedProx's code, α and β are standard deviations.
    """
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


# ------------------------------------------------------------------------------------------------
# entry point
# ------------------------------------------------------------------------------------------------
def load_dataset(
    name: str,
    *,
    root: str | Path | None = None,
    device: str | torch.device = "cpu",
    train_size: int | None = None,
    test_size: int | None = None,
    seed: int = 0,
    download: bool | None = None,
    as_cifar_shape: bool = False,
    verify: bool = True,
    synthetic_alpha: float = 1.0,
    synthetic_beta: float = 1.0,
    synthetic_clients: int = 30,
) -> Dataset:
    """Load dataset ``name`` (one of :data:`DATASETS`) as normalised tensors on ``device``.

    Args:
        root: data directory; default :func:`fedlab._paths.data_root` (``$FEDLAB_DATA`` or ``<repo>/data``).
        train_size, test_size: if given, keep a class-balanced seeded subset of that many samples
            (:func:`balanced_subset`, purposes ``"<name>/train"`` and ``"<name>/test"``).  For
            ``synthetic`` a train subset breaks the per-device structure, so ``natural_clients`` is
            then ``None``.
        seed: seeds the subsets, the digits split and the synthetic generator.
        download: ``None`` = download only if the files are missing; ``False`` = never (raise
            :class:`DatasetNotFoundError`); ``True`` = passed to torchvision (which re-downloads
            only files that are missing or fail the md5 check).
        as_cifar_shape: turn single-channel images into ``(3, 32, 32)`` (:func:`pad_to_cifar_shape`,
            padded with the normalised background); no-op for CIFAR; error for ``synthetic``.
        verify: CIFAR only — check the md5 sums of the official release (default).  ``False`` parses
            the same files with torchvision's code but without the md5 check (see ``_SkipMd5``).
        synthetic_alpha, synthetic_beta, synthetic_clients: Synthetic(α, β) parameters.  Note: α
            shifts all 10 logits of a device by the same amount ``u_k (1 + Σ_j x_j)``, so it cannot
            change the argmax labels — with a fixed seed the data do not depend on α at all (as in
            FedProx's generator).  Heterogeneity across devices comes from β (and from the
            independent ``W_k``).

    Normalisation: Fashion-MNIST mean 0.2860 / std 0.3530; CIFAR-10 (0.491, 0.482, 0.447) /
    (0.247, 0.243, 0.262); CIFAR-100 (0.5071, 0.4867, 0.4408) / (0.2675, 0.2565, 0.2761)
    (FL-Simulator's); digits: [0, 1] then the training set's own mean/std; synthetic: none
    (``mean=(0.0,)``, ``std=(1.0,)``, the raw features as in FedProx).
    """
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
        x_tr, y_tr, x_te, y_te = _load_cifar(name, root, download, verify)
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
