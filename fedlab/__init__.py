"""fedlab — sharpness-aware federated learning, faithful and fast.

The public API is re-exported here from small modules::

    import fedlab
    result = fedlab.run(fedlab.Config(algorithm="fedsam", rounds=20))
    result.metrics            # one row per round
    result.theta              # the final global model (always: fedlab.run trains, resumes or loads from runs/)
    fedlab.ALGORITHMS         # registered method names

What a user imports: :func:`run` / :class:`Simulation` and :class:`Config`; :func:`tune` (selection on a
held-out split) and :mod:`fedlab.sweep` (grids × seeds on every core or on Ray) with
:func:`summary_table`; the registries of algorithms, models, datasets and partitions with their
getters; :func:`mean_interval` (a mean and its interval over seeds); the seeded generators every
random draw goes through; :func:`data_root` (where datasets are read). The subpackages :mod:`fedlab.analysis`
(curvature, landscapes, flatness incompatibility, friendly adversary), :mod:`fedlab.data` and
:mod:`fedlab.algorithms` hold the rest, :mod:`fedlab.toy` runs any method on closed-form losses; the Flower adapter is the optional extra ``fedlab.flower``
(``pip install "fedlab-sam[flower]"``). Everything else — this repository's evidence, figures and
benchmarks — is the lab beside the library (``lab/``), which the library never imports.

This is *not* the unrelated PyPI package of the same import name (SMILELab FedLab);
``FEDLAB_SAM_MARKER`` identifies this project, and the distribution is called ``fedlab-sam``.
"""
from __future__ import annotations

from fedlab._version import __version__  # noqa: E402
from fedlab._rng import derive_seed, numpy_generator, torch_generator  # noqa: E402
from fedlab._paths import data_root  # noqa: E402
FEDLAB_SAM_MARKER = "fedlab-sam: sharpness-aware federated learning notebooks"

from fedlab.algorithms import ALGORITHMS, Algorithm, algorithm_class, algorithm_names, get_algorithm  # noqa: E402
from fedlab.config import Config, ConfigError  # noqa: E402
from fedlab.data import DATASETS, Dataset, from_tensors, load_dataset  # noqa: E402
from fedlab.data.partition import PARTITIONERS, Partition, make_partition  # noqa: E402
from fedlab.engine import Simulation, run  # noqa: E402
from fedlab.models import MODELS, FlatModel, build_model  # noqa: E402
from fedlab.results import CheckpointError, RunResult  # noqa: E402
from fedlab.tuning import TuneResult, tune  # noqa: E402
from fedlab.uncertainty import Estimate, mean_interval  # noqa: E402
from fedlab import sweep  # noqa: E402  (the module: fedlab.sweep.sweep(...), fedlab.sweep.summary_table(...))
from fedlab.sweep import summary_table  # noqa: E402

__all__ = [
    "ALGORITHMS", "Algorithm", "CheckpointError", "Config", "ConfigError", "DATASETS", "Dataset", "Estimate",
    "FEDLAB_SAM_MARKER", "FlatModel", "MODELS", "PARTITIONERS", "Partition", "RunResult", "Simulation",
    "TuneResult", "__version__", "algorithm_class", "algorithm_names", "build_model", "data_root", "derive_seed",
    "from_tensors", "get_algorithm", "load_dataset", "make_partition", "mean_interval", "numpy_generator", "run",
    "summary_table", "sweep", "torch_generator", "tune",
]
