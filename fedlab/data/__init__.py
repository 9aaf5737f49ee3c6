"""Data: whole-tensor datasets (``datasets``), your own tensors (``tensors.from_tensors``) and on-device
augmentation (``augment``)."""
from .augment import apply_augment, random_crop_flip
from .datasets import (DATASETS, Dataset, DatasetError, DatasetNotFoundError, balanced_subset, load_dataset,
                       pad_to_cifar_shape)
from .tensors import from_tensors

from .partition import (PARTITIONERS, Partition, PartitionStats, dirichlet, dirichlet_client, from_file, iid,
                        make_partition, natural, pathological, shards)

__all__ = [
    "PARTITIONERS", "Partition", "PartitionStats", "dirichlet", "dirichlet_client", "from_file", "iid",
    "make_partition", "natural", "pathological", "shards", "DATASETS", "Dataset", "DatasetError",
    "DatasetNotFoundError", "apply_augment", "balanced_subset", "from_tensors", "load_dataset", "pad_to_cifar_shape",
    "random_crop_flip",
]
