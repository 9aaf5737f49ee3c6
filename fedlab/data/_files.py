"""Datasets read from files: Fashion-MNIST's IDX files (Debian's package, a local copy or torchvision's
download) and CIFAR-10/100 through torchvision, each checked before it is trusted.

:func:`fedlab.data.datasets.load_dataset` calls these loaders; their normalisation constants and the
errors a dataset's files raise are defined here (and re-exported there).
"""
from __future__ import annotations

import gzip
import math
import os
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from fedlab.store.atomic import atomic_write_bytes

# --- normalisation constants -------------------------------------------------------------------
# Fashion-MNIST: mean and std of the 60 000 training images' pixels in [0, 1].
FMNIST_MEAN: tuple[float, ...] = (0.2860,)
FMNIST_STD: tuple[float, ...] = (0.3530,)
# CIFAR: FL-Simulator's constants.
CIFAR10_MEAN: tuple[float, ...] = (0.491, 0.482, 0.447)
CIFAR10_STD: tuple[float, ...] = (0.247, 0.243, 0.262)
CIFAR100_MEAN: tuple[float, ...] = (0.5071, 0.4867, 0.4408)
CIFAR100_STD: tuple[float, ...] = (0.2675, 0.2565, 0.2761)


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



# --- Fashion-MNIST ---
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


# --- CIFAR-10 / CIFAR-100 ---
# A CIFAR batch holds arrays (numpy's reconstructor, ndarray, dtype; protocol 2 stores their buffers through
# _codecs.encode), lists and strings. An unverified file may hold anything, and unpickling a global runs it.
_CIFAR_GLOBALS = frozenset({("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
                            ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")})


def _read_unverified(path: Path) -> dict:
    """One CIFAR pickle read with only :data:`_CIFAR_GLOBALS` allowed: a file that names any other callable
    (``os.system``, ``builtins.eval``, ...) is refused before that callable is looked up, let alone run."""
    import pickle

    class ArraysOnly(pickle.Unpickler):
        def find_class(self, module: str, name: str):  # type: ignore[override]
            if (module, name) not in _CIFAR_GLOBALS:
                raise pickle.UnpicklingError(f"{path.name} names {module}.{name}, which no CIFAR file holds; "
                                             "it was not loaded")
            return super().find_class(module, name)

    with open(path, "rb") as f:
        entry = ArraysOnly(f, encoding="latin1").load()
    if not isinstance(entry, dict) or "data" not in entry:
        raise ValueError(f"{path.name} is not a CIFAR batch (no 'data' entry)")
    return entry


def _unverified_split(cls, folder: Path, train: bool):
    """``data`` (N, 32, 32, 3 uint8) and ``targets`` of one split, parsed without torchvision's ``pickle.load``
    (which would run whatever an unverified file names) by :func:`_read_unverified`."""
    from types import SimpleNamespace

    rows, targets = [], []
    for name, _ in (cls.train_list if train else cls.test_list):
        entry = _read_unverified(folder / name)
        rows.append(np.asarray(entry["data"], dtype=np.uint8))
        targets.extend(entry["labels"] if "labels" in entry else entry["fine_labels"])
    return SimpleNamespace(data=np.vstack(rows).reshape(-1, 3, 32, 32).transpose((0, 2, 3, 1)), targets=targets)


def _cifar_class(name: str):
    from torchvision.datasets import CIFAR10, CIFAR100

    return CIFAR10 if name == "cifar10" else CIFAR100


def _load_cifar(name: str, root: Path, download: bool | None, verify: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    cls = _cifar_class(name)
    folder = root / cls.base_folder
    files = [f for f, _ in cls.train_list + cls.test_list] + [cls.meta["filename"]]

    def missing() -> list[str]:
        return [f for f in files if not (folder / f).is_file()]

    reason = ""
    if download is True or (download is None and missing()):
        try:  # torchvision downloads unless the official files are present, md5 checked; it never parses others
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
            ds = cls(str(root), train=train, download=False) if verify else _unverified_split(cls, folder, train)
        except RuntimeError as exc:
            if verify:
                raise DatasetError(
                    f"{name} files in {folder} failed torchvision's md5 integrity check ({exc}); they are "
                    "corrupted, truncated or not the official release. Re-download them, or pass "
                    "verify=False to skip the md5 check and parse them with a reader that loads arrays, lists "
                    "and strings only (a file naming any other callable is refused, never run)"
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
