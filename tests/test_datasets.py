"""Tests for fedlab.data.datasets: real Fashion-MNIST, CIFAR parsing on tiny real-format files,
digits, Synthetic(α, β), subsets, padding and error messages."""
from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from fedlab.data import (
    DATASETS,
    Dataset,
    DatasetError,
    DatasetNotFoundError,
    balanced_subset,
    load_dataset,
    pad_to_cifar_shape,
)
from fedlab.data import _files as files_mod
from fedlab.data import datasets as ds_mod
from fedlab import numpy_generator
from fedlab._paths import data_root

FMNIST_BACKGROUND = (0.0 - 0.2860) / 0.3530


# ------------------------------------------------------------------------------------------------
# Fashion-MNIST
# ------------------------------------------------------------------------------------------------
def _fmnist_source() -> tuple[str, Path | None]:
    if all((files_mod.DEBIAN_FMNIST_DIR / (f + ".gz")).is_file() for f in files_mod.FMNIST_FILES):
        return "debian", None
    raw = data_root() / "FashionMNIST" / "raw"
    if all((raw / f).is_file() for f in files_mod.FMNIST_FILES):
        return "data_root", data_root()
    return "none", None


_FMNIST_KIND, _FMNIST_ROOT = _fmnist_source()
needs_fmnist = pytest.mark.skipif(
    _FMNIST_KIND == "none",
    reason=f"no Fashion-MNIST: neither {files_mod.DEBIAN_FMNIST_DIR} (apt-get install dataset-fashion-mnist) "
    f"nor {data_root() / 'FashionMNIST' / 'raw'}",
)


@pytest.fixture(scope="module")
def fmnist_root(tmp_path_factory) -> Path:
    # With the Debian package present, exercise the real copy+gunzip path into a fresh root.
    return tmp_path_factory.mktemp("fmnist_root") if _FMNIST_KIND == "debian" else _FMNIST_ROOT


@pytest.fixture(scope="module")
def fmnist(fmnist_root) -> Dataset:
    return load_dataset("fmnist", root=fmnist_root, download=False)


@needs_fmnist
def test_real_fmnist_loads_and_is_normalised(fmnist, fmnist_root):
    d = fmnist
    assert (d.n_train, d.n_test) == (60000, 10000)
    assert d.input_shape == (1, 28, 28) and d.x_test.shape == (10000, 1, 28, 28)
    assert d.x_train.dtype == torch.float32 and d.y_train.dtype == torch.int64
    assert d.n_classes == 10 and d.augment is None
    assert d.mean == (0.2860,) and d.std == (0.3530,)
    for y in (d.y_train, d.y_test):
        assert int(y.min()) == 0 and int(y.max()) == 9
        assert torch.bincount(y, minlength=10).min() > 0
    sub = d.x_train[numpy_generator(0, "test-sub").choice(60000, 5000, replace=False)]
    assert abs(float(sub.mean())) < 0.05
    assert abs(float(sub.std()) - 1.0) < 0.05
    # background pixels (raw 0) map exactly to the normalised zero
    assert torch.isclose(d.x_train.min(), torch.tensor(FMNIST_BACKGROUND), atol=1e-5)
    raw = Path(fmnist_root) / "FashionMNIST" / "raw"
    assert all((raw / f).is_file() for f in files_mod.FMNIST_FILES)
    assert not list(raw.glob("*.tmp")), "atomic extraction left temporary files behind"


@needs_fmnist
def test_real_fmnist_subset_as_cifar_shape(fmnist, fmnist_root):
    d = load_dataset("fmnist", root=fmnist_root, download=False, train_size=200, test_size=100,
                     as_cifar_shape=True, seed=3)
    assert d.input_shape == (3, 32, 32) and (d.n_train, d.n_test) == (200, 100)
    assert torch.bincount(d.y_train, minlength=10).tolist() == [20] * 10
    assert d.mean == (0.2860,) * 3
    idx = balanced_subset(fmnist.y_train, 200, seed=3, purpose="fmnist/train")
    orig = fmnist.x_train[torch.from_numpy(idx)]
    for c in range(3):
        assert torch.equal(d.x_train[:, c : c + 1, 2:30, 2:30], orig)
    assert torch.all(d.x_train[:, :, :2, :] == torch.tensor(FMNIST_BACKGROUND))


def _write_idx(path_gz: Path, images: np.ndarray | None = None, labels: np.ndarray | None = None) -> None:
    if images is not None:
        payload = struct.pack(">IIII", 0x0803, *images.shape) + images.astype(np.uint8).tobytes()
    else:
        payload = struct.pack(">II", 0x0801, len(labels)) + labels.astype(np.uint8).tobytes()
    with gzip.open(path_gz, "wb") as f:
        f.write(payload)


def test_fmnist_extracts_from_debian_dir(tmp_path, monkeypatch):
    """The copy+gunzip path on tiny IDX files in the real format, independent of the package."""
    deb = tmp_path / "debian"
    deb.mkdir()
    rng = numpy_generator(1, "fake-idx")
    tr_img = rng.integers(0, 256, (20, 28, 28), dtype=np.uint8)
    te_img = rng.integers(0, 256, (10, 28, 28), dtype=np.uint8)
    tr_lab, te_lab = np.arange(20) % 10, np.arange(10)[::-1] % 10
    _write_idx(deb / "train-images-idx3-ubyte.gz", images=tr_img)
    _write_idx(deb / "train-labels-idx1-ubyte.gz", labels=tr_lab)
    _write_idx(deb / "t10k-images-idx3-ubyte.gz", images=te_img)
    _write_idx(deb / "t10k-labels-idx1-ubyte.gz", labels=te_lab)
    monkeypatch.setattr(files_mod, "DEBIAN_FMNIST_DIR", deb)
    d = load_dataset("fmnist", root=tmp_path / "root", download=False)
    assert (d.n_train, d.n_test) == (20, 10)
    expected = (torch.from_numpy(tr_img).float() / 255 - 0.2860) / 0.3530
    torch.testing.assert_close(d.x_train[:, 0], expected)
    assert d.y_train.tolist() == tr_lab.tolist() and d.y_test.tolist() == te_lab.tolist()
    raw = tmp_path / "root" / "FashionMNIST" / "raw"
    assert sorted(p.name for p in raw.iterdir()) == sorted(files_mod.FMNIST_FILES)
    assert all((raw / f).stat().st_mode & 0o044 == 0o044 for f in files_mod.FMNIST_FILES), "not group/world readable"


def test_fmnist_missing_without_download_raises(tmp_path, monkeypatch):
    monkeypatch.setattr(files_mod, "DEBIAN_FMNIST_DIR", tmp_path / "no-such-debian-dir")
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("fmnist", root=tmp_path / "empty", download=False)
    msg = str(info.value)
    assert isinstance(info.value, FileNotFoundError)
    assert str(tmp_path / "empty" / "FashionMNIST" / "raw") in msg
    assert str(tmp_path / "no-such-debian-dir") in msg
    assert "dataset-fashion-mnist" in msg and "download=False" in msg and "'fmnist'" in msg


# ------------------------------------------------------------------------------------------------
# CIFAR-10 / CIFAR-100 on tiny files in the real pickle format
# ------------------------------------------------------------------------------------------------
def _dump(path: Path, obj) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def _write_cifar10(root: Path, n_train: int = 20, n_test: int = 10) -> tuple[np.ndarray, ...]:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = numpy_generator(0, "fake-cifar10")
    x_tr = rng.integers(0, 256, (n_train, 3072), dtype=np.uint8)
    y_tr = np.arange(n_train) % 10
    x_te = rng.integers(0, 256, (n_test, 3072), dtype=np.uint8)
    y_te = (np.arange(n_test) * 3) % 10
    per = n_train // 5
    for b in range(5):
        sl = slice(b * per, (b + 1) * per)
        _dump(folder / f"data_batch_{b + 1}", {"batch_label": f"training batch {b + 1} of 5",
              "labels": y_tr[sl].tolist(), "data": x_tr[sl], "filenames": [f"img{i}.png" for i in range(per)]})
    _dump(folder / "test_batch", {"batch_label": "testing batch 1 of 1", "labels": y_te.tolist(),
          "data": x_te, "filenames": [f"t{i}.png" for i in range(n_test)]})
    _dump(folder / "batches.meta", {"num_cases_per_batch": per, "num_vis": 3072,
          "label_names": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]})
    return x_tr, y_tr, x_te, y_te


def _write_cifar100(root: Path, n_train: int = 20, n_test: int = 10) -> tuple[np.ndarray, ...]:
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    rng = numpy_generator(0, "fake-cifar100")
    x_tr = rng.integers(0, 256, (n_train, 3072), dtype=np.uint8)
    y_tr = (np.arange(n_train) * 7) % 100
    x_te = rng.integers(0, 256, (n_test, 3072), dtype=np.uint8)
    y_te = (np.arange(n_test) * 11) % 100
    for fname, x, y in (("train", x_tr, y_tr), ("test", x_te, y_te)):
        _dump(folder / fname, {"filenames": [f"{fname}{i}.png" for i in range(len(y))], "batch_label": fname,
              "fine_labels": y.tolist(), "coarse_labels": (y // 5).tolist(), "data": x})
    _dump(folder / "meta", {"fine_label_names": [f"fine{i}" for i in range(100)],
          "coarse_label_names": [f"coarse{i}" for i in range(20)]})
    return x_tr, y_tr, x_te, y_te


def _expected_cifar(x_rows: np.ndarray, mean, std) -> torch.Tensor:
    # pickled rows are channel-major: 1024 R, then 1024 G, then 1024 B values
    img = torch.from_numpy(x_rows.reshape(-1, 3, 32, 32)).float() / 255
    return (img - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)


def test_cifar10_tiny_unverified(tmp_path):
    x_tr, y_tr, x_te, y_te = _write_cifar10(tmp_path)
    d = load_dataset("cifar10", root=tmp_path, verify=False, download=False)
    assert (d.n_train, d.n_test, d.input_shape, d.n_classes) == (20, 10, (3, 32, 32), 10)
    assert d.augment == "crop_flip"
    assert d.mean == (0.491, 0.482, 0.447) and d.std == (0.247, 0.243, 0.262)
    torch.testing.assert_close(d.x_train, _expected_cifar(x_tr, d.mean, d.std))
    torch.testing.assert_close(d.x_test, _expected_cifar(x_te, d.mean, d.std))
    assert d.y_train.tolist() == y_tr.tolist() and d.y_test.tolist() == y_te.tolist()
    sub = load_dataset("cifar10", root=tmp_path, verify=False, download=False, train_size=10, seed=1)
    assert torch.bincount(sub.y_train, minlength=10).tolist() == [1] * 10


def test_cifar10_tiny_verified_raises_integrity_error(tmp_path):
    _write_cifar10(tmp_path)
    with pytest.raises(RuntimeError, match=r"md5 integrity.*verify=False") as info:
        load_dataset("cifar10", root=tmp_path, download=False)  # verify=True by default
    assert str(tmp_path / "cifar-10-batches-py") in str(info.value)
    assert not isinstance(info.value, DatasetNotFoundError)


def test_cifar100_tiny_unverified_and_verified(tmp_path):
    x_tr, y_tr, x_te, y_te = _write_cifar100(tmp_path)
    d = load_dataset("cifar100", root=tmp_path, verify=False, download=False)
    assert (d.n_train, d.n_test, d.input_shape, d.n_classes) == (20, 10, (3, 32, 32), 100)
    assert d.augment == "crop_flip" and d.mean == (0.5071, 0.4867, 0.4408)
    torch.testing.assert_close(d.x_train, _expected_cifar(x_tr, d.mean, d.std))
    assert d.y_train.tolist() == y_tr.tolist() and d.y_test.tolist() == y_te.tolist()
    with pytest.raises(RuntimeError, match="md5"):
        load_dataset("cifar100", root=tmp_path, download=False, verify=True)


class _Payload:
    """Unpickling this runs ``os.system`` (the crafted file of the hardening probe); here it would write a file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_an_unverified_cifar_file_that_names_code_is_refused_never_run(tmp_path):
    _write_cifar10(tmp_path)
    marker = tmp_path / "ran"
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    with open(batch, "rb") as f:
        entry = pickle.load(f)
    _dump(batch, {**entry, "labels": _Payload(marker)})
    with pytest.raises(DatasetError, match=r"data_batch_3 names (posix|os|nt)\.system, which no CIFAR file holds"):
        load_dataset("cifar10", root=tmp_path, verify=False, download=False)
    assert not marker.exists()
    with pytest.raises(RuntimeError, match="md5"):  # verified, torchvision refuses it on its checksum first
        load_dataset("cifar10", root=tmp_path, verify=True, download=False)
    assert not marker.exists()


@pytest.mark.parametrize("name,folder", [("cifar10", "cifar-10-batches-py"), ("cifar100", "cifar-100-python")])
@pytest.mark.parametrize("verify", [True, False])
def test_cifar_missing_without_download_raises(tmp_path, name, folder, verify):
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset(name, root=tmp_path, download=False, verify=verify)
    msg = str(info.value)
    assert str(tmp_path / folder) in msg and "download=False" in msg and repr(name) in msg


# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------
def test_balanced_subset_counts_and_seeding():
    labels = np.repeat(np.arange(10), [50, 60, 70, 80, 90, 100, 110, 120, 130, 140])
    a = balanced_subset(labels, 200, seed=0)
    assert np.bincount(labels[a], minlength=10).tolist() == [20] * 10
    assert np.all(np.diff(a) > 0), "indices must be sorted and unique"
    assert np.array_equal(a, balanced_subset(torch.from_numpy(labels), 200, seed=0))
    assert not np.array_equal(a, balanced_subset(labels, 200, seed=1))
    assert not np.array_equal(a, balanced_subset(labels, 200, seed=0, purpose="other"))
    odd = np.bincount(labels[balanced_subset(labels, 205, seed=0)], minlength=10)
    assert odd.sum() == 205 and odd.max() - odd.min() == 1


def test_balanced_subset_small_class_is_exhausted_then_others_share():
    labels = np.array([0] * 3 + [1] * 100 + [2] * 100)
    counts = np.bincount(labels[balanced_subset(labels, 60, seed=0)])
    assert counts.tolist() == [3, 28, 29] or counts.tolist() == [3, 29, 28]


def test_balanced_subset_errors():
    labels = np.arange(30) % 10
    with pytest.raises(ValueError, match="size=31"):
        balanced_subset(labels, 31, seed=0)
    with pytest.raises(ValueError, match="number of classes"):
        balanced_subset(labels, 9, seed=0)


def test_pad_to_cifar_shape():
    x = torch.randn(4, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    y = pad_to_cifar_shape(x)
    assert y.shape == (4, 3, 32, 32)
    for c in range(3):
        assert torch.equal(y[:, c, 2:30, 2:30], x[:, 0])
    border = torch.ones(32, 32, dtype=torch.bool)
    border[2:30, 2:30] = False
    assert torch.all(y[:, :, border] == torch.tensor(FMNIST_BACKGROUND))
    assert torch.all(pad_to_cifar_shape(x, pad_value=0.0)[:, :, border] == 0)
    with pytest.raises(ValueError):
        pad_to_cifar_shape(torch.zeros(2, 2, 28, 28))


# ------------------------------------------------------------------------------------------------
# digits
# ------------------------------------------------------------------------------------------------
def test_digits_shapes_stratification_and_seed():
    from sklearn.datasets import load_digits

    d = load_dataset("digits", seed=0)
    assert (d.n_train + d.n_test, d.input_shape, d.n_classes) == (1797, (1, 8, 8), 10)
    full_counts = np.bincount(load_digits().target, minlength=10)
    test_counts = np.bincount(d.y_test.numpy(), minlength=10)
    assert test_counts.tolist() == [int(round(0.2 * c)) for c in full_counts]
    assert (np.bincount(d.y_train.numpy(), minlength=10) + test_counts).tolist() == full_counts.tolist()
    assert abs(float(d.x_train.mean())) < 1e-4 and abs(float(d.x_train.std()) - 1) < 1e-3
    assert torch.equal(d.x_test, load_dataset("digits", seed=0).x_test)
    assert not torch.equal(d.x_test, load_dataset("digits", seed=1).x_test)


# ------------------------------------------------------------------------------------------------
# Synthetic(α, β)
# ------------------------------------------------------------------------------------------------
def test_synthetic_structure_and_reproducibility():
    d = load_dataset("synthetic", seed=0, synthetic_clients=12)
    assert d.input_shape == (60,) and d.n_classes == 10 and d.augment is None
    assert d.x_train.dtype == torch.float32 and d.y_train.dtype == torch.int64
    clients = d.natural_clients
    assert len(clients) == 12
    allidx = np.concatenate(clients)
    assert len(allidx) == len(np.unique(allidx)) == d.n_train, "clients must be disjoint and cover train"
    assert np.array_equal(np.sort(allidx), np.arange(d.n_train))
    sizes = np.array([len(c) for c in clients])
    assert sizes.min() >= int(0.75 * 50) and sizes.max() <= int(0.75 * ds_mod.SYNTHETIC_MAX_SAMPLES)
    again = load_dataset("synthetic", seed=0, synthetic_clients=12)
    assert torch.equal(d.x_train, again.x_train) and torch.equal(d.y_test, again.y_test)
    assert all(np.array_equal(a, b) for a, b in zip(clients, again.natural_clients))
    other = load_dataset("synthetic", seed=1, synthetic_clients=12)
    assert d.n_train != other.n_train or not torch.equal(d.x_train, other.x_train)


def _client_mean_spread(d: Dataset) -> float:
    means = np.stack([d.x_train[torch.from_numpy(c)].mean(0).numpy() for c in d.natural_clients])
    return float(means.mean(1).std())  # spread across clients of each client's average feature


def test_synthetic_heterogeneity_responds_to_beta_not_alpha():
    iid_ish = load_dataset("synthetic", seed=0, synthetic_alpha=0.0, synthetic_beta=0.0)
    het = load_dataset("synthetic", seed=0, synthetic_alpha=1.0, synthetic_beta=1.0)
    # β shifts each device's feature mean v_k ~ N(B_k, 1), B_k ~ N(0, β): clients drift apart
    assert _client_mean_spread(het) > 3 * _client_mean_spread(iid_ish)
    # α shifts all logits of a device by the same u_k (1 + Σx): labels (argmax) cannot change
    a0 = load_dataset("synthetic", seed=0, synthetic_alpha=0.0, synthetic_beta=1.0)
    assert torch.equal(a0.x_train, het.x_train) and torch.equal(a0.y_train, het.y_train)
    # label skew per device is strong in both settings (a few classes dominate each device)
    for d in (iid_ish, het):
        y = d.y_train.numpy()
        top = [np.bincount(y[c], minlength=10).max() / len(c) for c in d.natural_clients]
        assert np.mean(top) > 0.5
        assert (np.bincount(y, minlength=10) > 0).sum() >= 5


def test_synthetic_subset_drops_natural_clients():
    d = load_dataset("synthetic", seed=0, train_size=100, test_size=50)
    assert (d.n_train, d.n_test) == (100, 50) and d.natural_clients is None


# ------------------------------------------------------------------------------------------------
# errors and Dataset methods
# ------------------------------------------------------------------------------------------------
def test_unknown_dataset_and_bad_sizes():
    with pytest.raises(ValueError, match=r"unknown dataset 'mnist'; allowed: fmnist, cifar10"):
        load_dataset("mnist")
    assert DATASETS == ("fmnist", "cifar10", "cifar100", "digits", "synthetic")
    for bad in (0, -5):
        with pytest.raises(ValueError, match="train_size"):
            load_dataset("digits", train_size=bad)
    with pytest.raises(ValueError, match="train_size=100000"):
        load_dataset("digits", train_size=100000)
    with pytest.raises(ValueError, match="test_size=1000"):
        load_dataset("digits", test_size=1000)
    with pytest.raises(ValueError, match="synthetic_clients"):
        load_dataset("synthetic", synthetic_clients=0)
    with pytest.raises(ValueError, match="as_cifar_shape"):
        load_dataset("synthetic", as_cifar_shape=True, synthetic_clients=2)


def test_dataset_to_and_describe():
    d = load_dataset("digits", train_size=50, test_size=20)
    assert torch.bincount(d.y_train, minlength=10).tolist() == [5] * 10
    m = d.to("meta")
    assert m.x_train.device.type == "meta" and m.y_test.device.type == "meta"
    assert d.x_train.device.type == "cpu", "to() must return a copy, not move in place"
    assert (m.n_train, m.n_test, m.input_shape) == (50, 20, (1, 8, 8))
    line = d.describe()
    assert "\n" not in line and "digits" in line and "50" in line and "20" in line and "10 classes" in line


def test_an_installed_fedlab_keeps_data_in_the_user_cache_never_in_site_packages(tmp_path, monkeypatch, capsys):
    """Issue 46: an installed fedlab wrote datasets into site-packages/data."""
    import fedlab._paths as paths

    site = tmp_path / "site-packages"
    (site / "fedlab").mkdir(parents=True)  # an installation: no pyproject.toml beside the package
    monkeypatch.setattr(paths, "_CHECKOUT", site)
    monkeypatch.delenv("FEDLAB_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = paths.data_root()
    assert root == tmp_path / "cache" / "fedlab-sam" / "data" and root.is_dir()
    assert str(root) in capsys.readouterr().err  # named the first time
    assert paths.data_root() == root and capsys.readouterr().err == ""  # and only then
    monkeypatch.setenv("FEDLAB_DATA", str(tmp_path / "mine"))
    assert paths.data_root() == (tmp_path / "mine").resolve()
