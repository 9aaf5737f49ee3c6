"""fedlab — sharpness-aware federated learning, faithful and fast.

The public API is re-exported here from small modules::

    import fedlab
    result = fedlab.run(fedlab.Config(algorithm="fedsam", rounds=20))
    result.metrics            # one row per round
    fedlab.ALGORITHMS         # registered method names

This is *not* the unrelated PyPI package of the same import name (SMILELab FedLab);
``FEDLAB_SAM_MARKER`` identifies this project, and the distribution is called ``fedlab-sam``.
"""
from __future__ import annotations

from fedlab._version import __version__  # noqa: E402
from fedlab._rng import derive_seed, numpy_generator, torch_generator  # noqa: E402
FEDLAB_SAM_MARKER = "fedlab-sam: sharpness-aware federated learning notebooks"

from fedlab.algorithms import ALGORITHMS, Algorithm, get_algorithm  # noqa: E402
from fedlab.config import Config, ConfigError  # noqa: E402
from fedlab.data import DATASETS, Dataset, load_dataset  # noqa: E402
from fedlab.data.partition import PARTITIONERS, Partition, make_partition  # noqa: E402
from fedlab.engine import Simulation, run  # noqa: E402
from fedlab.models import MODELS, FlatModel, build_model  # noqa: E402
from fedlab.results import CheckpointError, RunResult  # noqa: E402
from fedlab.evidence.tuning import TuneResult, tune  # noqa: E402
from fedlab import sweep  # noqa: E402  (the module: fedlab.sweep.sweep(...), fedlab.sweep.summary_table(...))

__all__ = [
    "ALGORITHMS", "Algorithm", "CheckpointError", "Config", "ConfigError", "DATASETS", "Dataset",
    "FEDLAB_SAM_MARKER", "FlatModel", "MODELS", "PARTITIONERS", "Partition", "RunResult", "Simulation",
    "TuneResult", "__version__", "build_model", "derive_seed", "get_algorithm", "load_dataset", "make_partition",
    "numpy_generator", "run", "sweep", "torch_generator", "tune",
]
