"""The ``paper`` profile (``notebooks/params/*.paper.yaml``) end to end on CPU, at a tiny size.

The paper profile is what a researcher runs on a GPU with the real CIFAR-10/100: ResNet-18 and
WRN-28-4 with GroupNorm, the papers' federations and hyperparameters. Nothing else in the suite
touches it, so a typo in a parameter file, a model that cannot take CIFAR-100's 100 classes, or a
loader that cannot read torchvision's pickles would surface only after hours on a rented GPU.

Here small files in torchvision's on-disk CIFAR format (``cifar-10-batches-py`` / ``cifar-100-python``
pickles: ``data`` uint8 N×3072 channel-major rows, ``labels`` / ``fine_labels``, ``batches.meta`` /
``meta``) are written into a temporary folder, ``$FEDLAB_DATA`` points fedlab at it and
``$FEDLAB_DATA_VERIFY=0`` skips only torchvision's md5 comparison with the official release. Every
notebook's paper file then drives the notebook's training configurations through the real loader
(:func:`fedlab.engine.build_dataset`), the real partitioner and the real models, with only the *size*
shrunk (4 clients, one a round, 2 rounds of one local step on 2 images, CPU).

Why not papermill: a paper-profile notebook writes its figures and run records into the committed
``figures/`` (citable profiles, :data:`lab.repro.CITABLE_PROFILES`), and its analyses (Hessian power
iterations, landscape grids, 16-method sweeps) on ResNet-18 take many minutes on the two shared cores
the suite runs on. The training configurations are built here exactly as the notebooks build them
(federation fields from the file, method hyperparameters = defaults + the file's values, filtered by
what each method declares); :func:`test_every_paper_key_is_a_notebook_parameter` checks that each key
of a paper file is a parameter of its notebook and that each key is either used below or named as an
analysis size, so a new key fails here until it is exercised or consciously left out.
"""
from __future__ import annotations

import pickle
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

import fedlab
from fedlab import Config, numpy_generator
from lab.tools.how_made import parameter_defaults

REPO = Path(__file__).resolve().parent.parent
PARAMS = REPO / "notebooks" / "params"
PAPER_FILES = sorted(PARAMS.glob("*.paper.yaml"))
NOTEBOOKS = [p.name.removesuffix(".paper.yaml") for p in PAPER_FILES]

TRAIN_PER_CLASS = {"cifar10": 16, "cifar100": 4}
TEST_PER_CLASS = {"cifar10": 2, "cifar100": 1}
TINY: dict[str, Any] = dict(train_size=None, test_size=None, n_clients=4, participation=0.25, rounds=2,
                            local_steps=1, batch_size=2, eval_every=2, eval_subsample=None, device="cpu",
                            parallel_clients=1, client_threads=1, checkpoint_every=10)
"""The only values replaced in a paper file: the size of the run and the device."""

FEDERATION = ("dataset", "model", "alpha", "partition", "lr", "lr_schedule")
"""Paper-file keys that go into every training Config of a notebook as they are."""
SIZES = {"profile", "train_size", "test_size", "n_clients", "participation", "rounds", "local_steps",
         "batch_size", "eval_every", "eval_subsample", "device", "parallel_clients", "n_seeds"}
"""Paper-file keys replaced by :data:`TINY` (or, ``profile``/``n_seeds``, meaningless for one run here)."""
ANALYSIS = {
    "01_heterogeneity": set(),
    "02_flatness_incompatibility": {"rho", "analysis_clients", "max_per_client", "analysis_batches",
                                    "eval_batches", "curvature_size", "eig_tol", "eig_max_iter"},
    "03_friendly_adversary": {"rho", "max_per_client", "decomposition_batches", "friendly_clients",
                              "friendly_batches", "cross_targets", "alphas", "batch_sizes", "trajectory_rounds"},
    "06_fedswa_fedmoswa": {"grid_swa_rho", "grid_swa_alpha"},
    "07_fednsam": {"check_rounds"},
    "08_fedvssam": {"gammas_l", "variance_batches", "check_rounds", "h_track_every", "h_grad_per_client"},
    "09_sharpness_and_landscapes": {"measure_clients", "measure_batches", "measure_batch_size", "curvature_size",
                                    "eig_tol", "eig_max_iter", "track_iters", "trace_samples", "slice_points", "grid_points", "track_methods",
                                    "track_every"},
    "10_benchmarks": {"targets"},
    "09b_global_perturbation": set(),
}
"""Paper-file keys that size a notebook's measurements, not its training (not exercised here)."""


# ------------------------------------------------------------------------------------------------
# tiny CIFAR in torchvision's format
# ------------------------------------------------------------------------------------------------
def _pickle(path: Path, obj: dict) -> None:
    with open(path, "wb") as fh:
        pickle.dump(obj, fh, protocol=2)  # the official files are protocol-2 pickles (python 2)


def _images(name: str, per_class: int, n_classes: int, purpose: str) -> tuple[np.ndarray, list[int]]:
    """``per_class`` random images of every class, classes interleaved (as in the official batches)."""
    rng = numpy_generator(0, f"paper-profile/{name}/{purpose}")
    labels = [c for _ in range(per_class) for c in range(n_classes)]
    return rng.integers(0, 256, (len(labels), 3 * 32 * 32), dtype=np.uint8), labels


def write_tiny_cifar(root: Path) -> None:
    """CIFAR-10 (5 training batches, a test batch, ``batches.meta``) and CIFAR-100 (``train``, ``test``,
    ``meta``) in torchvision's layout under ``root``, with the per-class counts above."""
    c10 = root / "cifar-10-batches-py"
    c10.mkdir(parents=True)
    x, y = _images("cifar10", TRAIN_PER_CLASS["cifar10"], 10, "train")
    for b, rows in enumerate(np.array_split(np.arange(len(y)), 5)):
        _pickle(c10 / f"data_batch_{b + 1}", {"batch_label": f"training batch {b + 1} of 5", "data": x[rows],
                                              "labels": [y[i] for i in rows],
                                              "filenames": [f"train_{i}.png" for i in rows]})
    x, y = _images("cifar10", TEST_PER_CLASS["cifar10"], 10, "test")
    _pickle(c10 / "test_batch", {"batch_label": "testing batch 1 of 1", "data": x, "labels": y,
                                 "filenames": [f"test_{i}.png" for i in range(len(y))]})
    _pickle(c10 / "batches.meta", {"label_names": [f"class{i}" for i in range(10)], "num_vis": 3072})
    c100 = root / "cifar-100-python"
    c100.mkdir(parents=True)
    for split in ("train", "test"):
        per_class = (TRAIN_PER_CLASS if split == "train" else TEST_PER_CLASS)["cifar100"]
        x, y = _images("cifar100", per_class, 100, split)
        _pickle(c100 / split, {"batch_label": split, "data": x, "fine_labels": y,
                               "coarse_labels": [c // 5 for c in y], "filenames": [f"{split}_{i}.png" for i in
                                                                                   range(len(y))]})
    _pickle(c100 / "meta", {"fine_label_names": [f"fine{i}" for i in range(100)],
                            "coarse_label_names": [f"coarse{i}" for i in range(20)]})


@pytest.fixture(scope="module")
def tiny_cifar(tmp_path_factory):
    """``$FEDLAB_DATA`` → a folder of tiny CIFAR files, md5 check off; the in-process dataset cache is
    emptied before and after so no other test sees these files as CIFAR."""
    from fedlab.engine.setup import _cached_dataset

    root = tmp_path_factory.mktemp("cifar")
    write_tiny_cifar(root)
    mp = pytest.MonkeyPatch()
    mp.setenv("FEDLAB_DATA", str(root))
    mp.setenv("FEDLAB_DATA_VERIFY", "0")
    mp.setenv("FEDLAB_RUNS", str(tmp_path_factory.mktemp("runs")))
    _cached_dataset.cache_clear()
    yield root
    _cached_dataset.cache_clear()
    mp.undo()


# ------------------------------------------------------------------------------------------------
# the notebooks' training configurations, built from a paper file
# ------------------------------------------------------------------------------------------------
def paper_params(notebook: str) -> dict[str, Any]:
    return yaml.safe_load((PARAMS / f"{notebook}.paper.yaml").read_text())


def notebook_parameters(notebook: str) -> dict[str, Any]:
    """The names and default values of the notebook's ``parameters`` cell (what papermill overrides)."""
    return parameter_defaults(notebook)


def _with(defaults: dict[str, Any], forced: dict[str, Any], method: str) -> dict[str, Any]:
    """The notebooks' rule: a paper-file value replaces a method's hyperparameter only where the
    method declares it and the value is not None."""
    declared = fedlab.get_algorithm(method).hp.to_dict()
    return {k: v for k, v in forced.items() if v is not None and k in declared} | defaults


def training_configs(notebook: str, runs_dir: Path) -> dict[str, Config]:
    """label → Config: the runs the notebook trains with its paper file, at the :data:`TINY` size."""
    p = paper_params(notebook)
    nb = notebook_parameters(notebook)
    fed = {k: p.get(k, nb.get(k)) for k in FEDERATION if k in p or k in nb}
    base = Config(**fed, **TINY, runs_dir=str(runs_dir), seed=0, partition_seed=0)
    out: dict[str, Config] = {}

    def add(label: str, method: str, params: dict[str, Any] | None = None, cfg: Config = base) -> None:
        out[label] = cfg.replace(algorithm=method, algorithm_params=params or {})

    if notebook == "02_flatness_incompatibility":
        for a in p["alphas"]:  # the FedAvg vs FedSAM heterogeneity sweep (its first alpha is the main split)
            for m in ("fedavg", "fedsam"):
                add(f"{m} alpha={a}", m, cfg=base.replace(alpha=a))
    elif notebook == "03_friendly_adversary":
        add("fedavg", "fedavg")
    elif notebook == "04_sam_baselines":
        forced = {"rho": p.get("rho"), "lam": p.get("lam")}
        for m in ("fedavg", "scaffold", "feddyn", "fedsam", "mofedsam", "fedgamma", "fedspeed", "fedlesam"):
            add(m, m, _with({"alpha": p["mofedsam_alpha"]} if m == "mofedsam" else {}, forced, m))
    elif notebook == "05_fedsmoo":
        forced = {"rho": p.get("rho"), "lam": p.get("lam"), "rho_max": p.get("adaptive_rho_max")}
        for m in ("fedavg", "fedsam", "feddyn", "fedspeed", "fedsmoo", "fedsmoo_adaptive"):
            structural = {"warmup_rounds": p["adaptive_warmup"]} if m == "fedsmoo_adaptive" else {}
            add(m, m, _with(structural, forced, m))
    elif notebook == "06_fedswa_fedmoswa":
        swa = {"rho": p["swa_rho"], "alpha": p["swa_alpha"]}
        for m, params in (("fedavg", {}), ("fedsam", {"rho": p["sam_rho"]}), ("fedswa", swa), ("scaffold", {}),
                          ("fedmoswa", {**swa, "gamma": p["moswa_gamma"]})):
            add(m, m, params)
    elif notebook == "07_fednsam":
        nsam = {"rho": p["rho"], "gamma": p["gamma"]}
        add("fedavg", "fedavg")
        add("fedsam", "fedsam", {"rho": p["rho"]})
        add("fednsam code", "fednsam", nsam)
        add("fednsam paper", "fednsam", {**nsam, "variant": "paper"})
        add("fednsam official bug", "fednsam", {**nsam, "momentum_overwrite_bug": True})
    elif notebook == "08_fedvssam":
        assert p["ablation"] == "paper"
        full = dict(p["fedvssam_params"])
        add("fedavg", "fedavg")
        add("base (= FedSAM)", "fedvssam", {"rho": full["rho"], "preset": "base"})
        add("GU only", "fedvssam", {**full, "lf": False, "lu": False})
        add("LU + GU", "fedvssam", {**full, "lf": False})
        add("LF + LU", "fedvssam", {**full, "gu": False})
        add("full", "fedvssam", full)
    elif notebook == "09_sharpness_and_landscapes":
        for m in p["methods"]:  # the 16 methods of the paper file, each with its method_params
            add(m, m, p.get("method_params", {}).get(m, {}))
    elif notebook == "09b_global_perturbation":  # a toy, but §8–9 train on the fed_* federation of its file
        fed11 = Config(**{k: p[f"fed_{k}"] for k in ("dataset", "model", "alpha", "lr", "lr_schedule")}, **TINY,
                       runs_dir=str(runs_dir), seed=0, partition_seed=0)
        for m in ("mofedsam", "fedfsa"):  # TINY's test set has 2 images per class: 2 per client, not the file's
            add(m, m, cfg=fed11.replace(client_eval=True, client_eval_size=min(2, p["client_eval_size"])))
        for sigma in p["dp_noise_multipliers"]:
            for m in ("dp_fedavg", "dp_fedsam"):
                add(f"{m} sigma={sigma}", m, {"noise_multiplier": float(sigma)}, cfg=fed11)
    elif notebook == "10_benchmarks":
        for ds, model, c in zip(p["datasets"], p["models"], p["pathological_classes"]):
            pair = base.replace(dataset=ds, model=model)
            for a in p["dirichlet_alphas"]:
                add(f"{ds} Dir {a}", "fedavg", cfg=pair.replace(partition=p["partition"], alpha=a))
            add(f"{ds} Path c={c}", "fedvssam", cfg=pair.replace(partition="pathological", classes_per_client=c,
                                                                   alpha=None))
    else:
        raise AssertionError(f"no training configurations for {notebook}: add them here")
    return out


USED = {
    "00_quickstart": set(),
    "02_flatness_incompatibility": {"alphas"},
    "04_sam_baselines": {"rho", "lam", "mofedsam_alpha"},
    "05_fedsmoo": {"rho", "lam", "adaptive_rho_max", "adaptive_warmup"},
    "06_fedswa_fedmoswa": {"swa_rho", "swa_alpha", "moswa_gamma", "sam_rho"},
    "07_fednsam": {"rho", "gamma"},
    "08_fedvssam": {"fedvssam_params", "ablation"},
    "09_sharpness_and_landscapes": {"methods", "method_params"},
    "10_benchmarks": {"datasets", "models", "pathological_classes", "dirichlet_alphas"},
    "01_heterogeneity": {"alphas", "classes_per_client"},
    "01b_foundations": set(),
    "09b_global_perturbation": {"seed", "dim", "n_clients", "participation", "rounds", "local_steps", "lr",
                               "fed_dataset", "fed_model", "fed_alpha", "fed_lr", "fed_lr_schedule",
                               "client_eval_size", "dp_noise_multipliers",
                               # §8–9's sizes, replaced by TINY as the other notebooks' are
                               "fed_train_size", "fed_test_size", "fed_n_clients", "fed_participation", "fed_rounds",
                               "fed_local_steps", "fed_batch_size", "fed_eval_every", "dp_n_seeds", "dp_delta"},
}
"""Paper-file keys beyond :data:`FEDERATION` that :func:`training_configs` (or the partition test) reads."""


# ------------------------------------------------------------------------------------------------
# tests
# ------------------------------------------------------------------------------------------------
def test_every_notebook_with_parameters_has_a_paper_file():
    cpu = sorted(p.name.removesuffix(".cpu.yaml") for p in PARAMS.glob("*.cpu.yaml"))
    assert NOTEBOOKS == cpu and len(NOTEBOOKS) == 13


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_paper_key_is_a_notebook_parameter(notebook):
    """papermill injects an unknown key silently; here it fails, as does a key this test ignores."""
    p = paper_params(notebook)
    nb = notebook_parameters(notebook)
    assert p["profile"] == "paper"
    unknown = sorted(set(p) - set(nb))
    assert not unknown, f"{notebook}.paper.yaml sets {unknown}, which are not parameters of the notebook"
    ignored = sorted(set(p) - SIZES - set(FEDERATION) - ANALYSIS.get(notebook, set()) - USED.get(notebook, set()))
    assert not ignored, f"{notebook}.paper.yaml: {ignored} are neither exercised here nor listed as analysis sizes"


def test_tiny_files_are_read_by_the_real_loader(tiny_cifar, monkeypatch):
    from fedlab.data import DatasetError, load_dataset

    for name, n_classes in (("cifar10", 10), ("cifar100", 100)):
        d = load_dataset(name, download=False)  # $FEDLAB_DATA, $FEDLAB_DATA_VERIFY=0
        assert tuple(d.x_train.shape) == (TRAIN_PER_CLASS[name] * n_classes, 3, 32, 32)
        assert tuple(d.x_test.shape) == (TEST_PER_CLASS[name] * n_classes, 3, 32, 32)
        assert sorted(set(d.y_train.tolist())) == list(range(n_classes))
        rows, _ = _images(name, TEST_PER_CLASS[name], n_classes, "test")
        first = rows[0].reshape(3, 32, 32) / 255.0  # channel-major rows, then the dataset's normalisation
        expect = (first - np.array(d.mean)[:, None, None]) / np.array(d.std)[:, None, None]
        np.testing.assert_allclose(d.x_test[0].numpy(), expect, rtol=1e-5, atol=1e-5)
    monkeypatch.setenv("FEDLAB_DATA_VERIFY", "1")  # the default: these are not the official files
    with pytest.raises(DatasetError, match="md5"):
        load_dataset("cifar10", download=False)
    monkeypatch.setenv("FEDLAB_DATA_VERIFY", "no")
    with pytest.raises(ValueError, match="FEDLAB_DATA_VERIFY"):
        load_dataset("cifar10", download=False)


def test_heterogeneity_paper_partitions(tiny_cifar):
    """Notebook 01 trains nothing: its paper file's Dirichlet and pathological splits of CIFAR-10's labels."""
    from fedlab.engine import build_dataset, build_partition

    p = paper_params("01_heterogeneity")
    base = Config(dataset=p["dataset"], model="resnet18_gn", n_clients=8, device="cpu", partition_seed=0)
    data = build_dataset(base)
    for cfg in ([base.replace(partition="dirichlet", alpha=a) for a in p["alphas"]]
                + [base.replace(partition="pathological", classes_per_client=c, alpha=None)
                   for c in p["classes_per_client"]]):
        split = build_partition(cfg, data)
        sizes = [len(ix) for ix in split.client_indices]
        assert sum(sizes) == len(data.y_train), cfg.partition
        if cfg.partition == "pathological":
            assert max(len(set(split.labels[ix].tolist())) for ix in split.client_indices) <= cfg.classes_per_client


TOYS = ("00_quickstart", "01_heterogeneity", "01b_foundations")  # 00: one small run, no paper-size training
"""Notebooks whose paper file trains no CIFAR model: partitions only (01), the foundations' MLP on
Fashion-MNIST (01b, below). Notebook 09b is a quadratic toy (below) whose §8–9 train on CIFAR."""


def test_foundations_paper_file_runs(tmp_path):
    """Notebook 01b's paper file (all of Fashion-MNIST, 100 clients, 10 % per round) trains its MLP for
    two rounds with FedAvg and FedSAM, the two methods it writes from scratch."""
    from fedlab.data import DatasetError

    p = paper_params("01b_foundations")
    base = Config(dataset=p["dataset"], model="mlp", n_clients=p["n_clients"], participation=p["participation"],
                  rounds=2, local_steps=1, batch_size=8, eval_every=2, eval_subsample=500, device="cpu")
    for method in ("fedavg", "fedsam"):
        try:
            result = fedlab.run(base.replace(algorithm=method, runs_dir=str(tmp_path)), progress=False)
        except DatasetError as err:
            pytest.skip(f"Fashion-MNIST is not on disk ({err}); make data")
        assert result.status == "finished" and result.theta.isfinite().all(), method
        assert 0.0 <= result.metrics["test_acc"].dropna().iloc[-1] <= 1.0


def test_global_perturbation_paper_toy_runs():
    """Notebook 09b stays a toy in its paper profile (it needs ∇F exactly): its paper file's federation
    (clients, dimension, participation, K, η) runs two rounds of FedSAM and FedLESAM to finite models."""
    from fedlab.toy import quadratic_federation, run_functional

    p = paper_params("09b_global_perturbation")
    grad_fn, batch_fn, theta_star, problems = quadratic_federation(p["n_clients"], p["dim"], seed=p["seed"])
    assert len(problems) == p["n_clients"] and theta_star.shape == (p["dim"],)
    for method in ("fedsam", "fedlesam"):
        run = run_functional(fedlab.get_algorithm(method), torch.zeros(p["dim"], dtype=torch.float64), grad_fn,
                             batch_fn, n_clients=p["n_clients"], rounds=2, local_steps=p["local_steps"],
                             lr=p["lr"], participation=p["participation"], seed=p["seed"])
        final = run.trajectory[-1]
        assert torch.isfinite(final).all() and not torch.equal(final, torch.zeros_like(final)), method


@pytest.mark.slow
@pytest.mark.parametrize("notebook", [n for n in NOTEBOOKS if n not in TOYS])
def test_paper_profile_trains(tiny_cifar, tmp_path, notebook):
    """Every training configuration of the notebook's paper file runs two rounds on the tiny files with
    the paper's model and reaches a finished (or divergence-stopped) state with finite metrics."""
    configs = training_configs(notebook, tmp_path / "runs")
    assert configs
    started = time.perf_counter()
    for label, cfg in configs.items():
        n_classes = 10 if cfg.dataset == "cifar10" else 100
        assert cfg.model in ("resnet18_gn", "wrn28_4_gn"), label
        result = fedlab.run(cfg, progress=False)
        assert result.status in ("finished", "collapsed"), f"{notebook} {label}: {result.status}"
        assert result.theta.isfinite().all() or result.status == "collapsed", label
        acc = result.metrics["test_acc"].dropna()
        assert len(acc) >= 1 and ((acc >= 0) & (acc <= 1)).all(), label
        head = fedlab.build_model(cfg.model, (3, 32, 32), n_classes)
        assert result.theta.numel() == sum(t.numel() for t in head.parameters()), label
    print(f"{notebook}: {len(configs)} runs in {time.perf_counter() - started:.1f} s")
