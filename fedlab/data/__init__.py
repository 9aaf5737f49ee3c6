"""Data: whole-tensor datasets (``datasets``) and on-device augmentation (``augment``)."""
from .augment import apply_augment, random_crop_flip
from .datasets import (
    DATASETS,
    Dataset,
    DatasetNotFoundError,
    balanced_subset,
    load_dataset,
    pad_to_cifar_shape,
)

# Slot for the lead: partitioner re-exports (e.g. `from .partition import *`) go here.

__all__ = [
    "DATASETS",
    "Dataset",
    "DatasetNotFoundError",
    "apply_augment",
    "balanced_subset",
    "load_dataset",
    "pad_to_cifar_shape",
    "random_crop_flip",
]
