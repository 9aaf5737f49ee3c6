"""The validation hold-out used for hyperparameter selection (``Config.validation_size``,
:func:`fedlab.tune`): a class-balanced part of the *training* set, built once per (dataset, size)."""
from __future__ import annotations

import dataclasses
import weakref

import numpy as np
import torch

from fedlab.data.datasets import Dataset, balanced_subset

__all__ = ["hold_out_validation"]

# datasets made by hold_out_validation → their size; and (source, size) → the split, to build it once
_HELD_OUT: "weakref.WeakKeyDictionary[Dataset, int]" = weakref.WeakKeyDictionary()
_SPLITS: "weakref.WeakKeyDictionary[Dataset, dict[int, Dataset]]" = weakref.WeakKeyDictionary()


def hold_out_validation(dataset: Dataset, size: int | None) -> Dataset:
    """``size`` class-balanced training samples (seed 0, purpose ``"validation"``: the split does not move
    with the training seed) become the evaluation set; the rest stays the training set; the test set is
    dropped so nothing downstream can read it. ``size=None`` or an already split dataset: returned as
    is. ValueError for a size the dataset cannot give."""
    if size is None or dataset in _HELD_OUT:
        return dataset
    cached = _SPLITS.setdefault(dataset, {})
    if size not in cached:
        if dataset.natural_clients is not None:
            raise ValueError("validation_size: this dataset's natural clients index the whole training "
                              "set; hold-out validation is not defined for it")
        try:
            keep_val = balanced_subset(dataset.y_train, size, seed=0, purpose="validation")
        except ValueError as err:
            raise ValueError(f"validation_size={size}: {err}") from None
        mask = np.ones(dataset.n_train, dtype=bool)
        mask[keep_val] = False
        dev = dataset.x_train.device
        val = torch.as_tensor(keep_val, device=dev)
        train = torch.as_tensor(np.flatnonzero(mask), device=dev)
        split = dataclasses.replace(dataset, x_train=dataset.x_train[train], y_train=dataset.y_train[train],
                                    x_test=dataset.x_train[val], y_test=dataset.y_train[val])
        _HELD_OUT[split] = size
        cached[size] = split
    return cached[size]
