"""fedlab.tune: selection on a held-out validation set, never on the test set."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import fedlab
from fedlab.config import ConfigError
from fedlab.engine import build_dataset, hold_out_validation
from fedlab.algorithms import algorithm_class, algorithm_names
from fedlab.tuning import DEFAULT_GRIDS, TUNABLE_CONFIG_FIELDS, default_grid

GRID = {"rho": [0.01, 0.3, 1.0]}


def _tune(tiny, tmp_path, sub, dataset):
    base = tiny(algorithm="fedsam", runs_dir=str(tmp_path / sub), rounds=4)
    return fedlab.tune(base, GRID, validation_size=200, dataset=dataset, progress=False)


def test_validation_split_is_disjoint_balanced_and_replaces_the_test_set(tiny):
    cfg = tiny()
    full = build_dataset(cfg)
    split = hold_out_validation(full, 200)
    assert split.n_train + split.n_test == full.n_train
    assert split.n_test == 200
    assert np.bincount(split.y_test.numpy()).min() >= 200 // full.n_classes  # class-balanced
    # every held-out sample is a training sample, none is a test sample, none stays in training
    rows = {tuple(r) for r in full.x_train.flatten(1).numpy().round(5)}
    held = [tuple(r) for r in split.x_test.flatten(1).numpy().round(5)]
    assert all(r in rows for r in held)
    kept = {tuple(r) for r in split.x_train.flatten(1).numpy().round(5)}
    assert not kept & set(held) or len(rows) < full.n_train  # digits has no duplicate images here
    assert hold_out_validation(split, 200) is split  # idempotent: never split twice
    assert hold_out_validation(full, 200) is split  # built once per (dataset, size)


def test_poisoned_test_labels_leave_the_choice_unchanged_but_validation_data_matters(tiny, tmp_path):
    full = build_dataset(tiny())
    clean = _tune(tiny, tmp_path, "clean", full)
    gen = torch.Generator().manual_seed(1)
    poisoned_test = dataclasses.replace(full, y_test=torch.randint(0, full.n_classes, full.y_test.shape,
                                                                   generator=gen))
    poisoned = _tune(tiny, tmp_path, "poisoned_test", poisoned_test)
    assert poisoned.best == clean.best
    assert poisoned.table["score"].tolist() == clean.table["score"].tolist()  # the test set is never read

    # corrupting the held-out *training* samples' labels changes the scores: the tuner does read them
    val_ix = torch.as_tensor(np.flatnonzero(~_train_mask(full, 200)))
    y = full.y_train.clone()
    swap = {0: 1, 1: 0, 2: 3, 3: 2}  # relabel four classes of the held-out part (a fifth of it stays)
    for a, b in swap.items():
        y[val_ix[full.y_train[val_ix] == a]] = b
    shifted = _tune(tiny, tmp_path, "poisoned_val", dataclasses.replace(full, y_train=y))
    assert (shifted.table["score"] < clean.table["score"]).sum() >= 2


def _train_mask(full, size):
    from fedlab.data import balanced_subset

    mask = np.ones(full.n_train, dtype=bool)
    mask[balanced_subset(full.y_train, size, seed=0, purpose="validation")] = False
    return mask


def test_tune_records_grid_scores_and_choice(tiny, tmp_path):
    res = _tune(tiny, tmp_path, "rec", None)
    assert list(res.table["rho"]) == GRID["rho"]
    assert {"score", "final_val_acc", "status", "run"} <= set(res.table.columns)
    best_row = res.table.loc[res.table["score"].idxmax()]
    assert res.best == {"rho": best_row["rho"]}
    assert res.best_config.validation_size is None and res.best_config.algorithm_params["rho"] == best_row["rho"]
    paths = res.save(tmp_path / "out" / "fedsam_dir05")
    import json

    saved = json.loads(paths["json"].read_text())
    assert saved["best"] == res.best and len(saved["scores"]) == 3
    assert saved["protocol"] == {"validation_size": 200, "rounds": 4, "seed": 0}
    summary = json.loads((tmp_path / "rec" / res.table["run"][0] / "summary.json").read_text())
    assert summary["eval_set"] == "validation"


@pytest.mark.parametrize("name", algorithm_names())
def test_default_grid_names_real_hyperparameters(name):
    cls = algorithm_class(name)
    grid = default_grid(name)
    fields = {f.name for f in dataclasses.fields(cls.hparams_cls)} | set(["preset"] if cls.presets else [])
    assert set(grid) <= fields | set(TUNABLE_CONFIG_FIELDS), name
    for key, values in grid.items():
        assert isinstance(values, tuple) and values, (name, key)
        if key not in TUNABLE_CONFIG_FIELDS:
            for value in values:  # every candidate is a value the method accepts
                fedlab.get_algorithm(name, {key: value})
    # every SAM-family method (two gradients per step, or FedLESAM's estimated ascent) tunes its radius
    if cls.grad_evals_per_step == 2 or name == "fedlesam":
        assert any(k in grid for k in ("rho", "rho_max")), name


# The grids as the tuning table stated them before they moved onto the method classes (issue 44), written
# out once: committed tuning files and plans were made with them. Key order is the order of the points.
PREREGISTERED_GRIDS = {
    "fedavg": {},
    "fedprox": {"mu": (0.01, 0.1)},
    "scaffold": {},
    "feddyn": {"lam": (0.01, 0.1)},
    "fedacg": {},
    "fedsam": {"rho": (0.0, 0.01, 0.02, 0.05, 0.1)},
    "mofedsam": {"rho": (0.0, 0.01, 0.02, 0.05, 0.1)},
    "fedgamma": {"rho": (0.0, 0.01, 0.02, 0.05)},
    "fedspeed": {"rho": (0.0, 0.01, 0.02, 0.05, 0.1), "lam": (0.01, 0.1)},
    "fedsmoo": {"rho": (0.0, 0.01, 0.02, 0.05, 0.1), "lam": (0.01, 0.1)},
    "fedsmoo_adaptive": {"rho_max": (0.02, 0.05, 0.1)},
    "fedlesam": {"rho": (0.0, 0.01, 0.02, 0.05)},
    "fedswa": {"rho": (0.1, 0.5), "alpha": (1.0, 1.5)},
    "fedmoswa": {"rho": (0.1, 0.5), "gamma": (0.1, 0.2)},
    "fednsam": {"rho": (0.0, 0.01, 0.02, 0.05)},
    "fedvssam": {"rho": (0.0, 0.01, 0.02, 0.05), "preset": ("moderate", "high")},
    "fedwmsam": {"rho": (0.0, 0.01, 0.02, 0.05)},
    "fedgloss": {"rho": (0.0, 0.01, 0.02, 0.05, 0.15), "rho_server": (0.0, 0.01, 0.02, 0.05, 0.15)},
    "fedgf": {"rho": (0.0, 0.01, 0.02, 0.05), "divergence_threshold": (0.2, 0.3)},
    "fedgmt": {"gamma": (0.5, 1.0, 2.0)},
    "fedsol": {"rho": (0.0, 0.1, 0.5, 1.0)},
    "fedlesam_s": {"rho": (0.0, 0.01, 0.02, 0.05, 0.5)},
    "fedlesam_d": {"rho": (0.0, 0.01, 0.02, 0.05), "lam": (0.01, 0.1)},
    "dp_fedavg": {},
    "dp_fedsam": {"rho": (0.0, 0.01, 0.02, 0.05, 0.5)},
    "fedscar": {"rho": (0.0, 0.01, 0.02, 0.05, 0.1), "beta": (0.01, 0.06)},
    "fedfsa": {"rho": (0.0, 0.01, 0.02, 0.05, 0.1), "rho_larger": (0.1, 0.2, 0.5)},
}


def test_default_grids_are_the_preregistered_ones():
    for name, grid in PREREGISTERED_GRIDS.items():
        assert list(DEFAULT_GRIDS[name].items()) == list(grid.items()), name
        assert default_grid(name) == grid and default_grid(name) is not DEFAULT_GRIDS[name], name
    assert [name for name in DEFAULT_GRIDS if name in PREREGISTERED_GRIDS] == list(PREREGISTERED_GRIDS)  # tune order


def test_bad_grid_key_is_named(tiny):
    with pytest.raises(ConfigError, match="'alpha'.*neither a hyperparameter of fedsam"):
        fedlab.tune(tiny(algorithm="fedsam"), {"alpha": [0.1]}, progress=False)
    with pytest.raises(ConfigError, match="validation_size"):
        tiny(validation_size=0)
