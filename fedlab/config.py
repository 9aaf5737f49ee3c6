"""Experiment configuration: one frozen dataclass, validated with errors that name the field.

``Config.hash()`` is the run key: a digest of the hashed fields, the partition fingerprint, the
client schedule's contents, the numeric-path code (:mod:`fedlab.store.code_digest`) and the version;
it names the run directory (:mod:`fedlab.results`)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fedlab._version import __version__

if TYPE_CHECKING:
    from fedlab.algorithms import Algorithm

CUSTOM_DATASET = "custom"
"""The dataset name of tensors the user hands to ``fedlab.run(cfg, dataset=fedlab.data.from_tensors(...))``."""
SAMPLINGS = ("uniform", "bernoulli", "schedule")
LR_SCHEDULES = ("exponential", "cosine", "constant")

# Fields that do not change any number a run produces.
# memory_budget_mb only bounds the chunk parallel_clients="auto" may pick (itself hashed);
# client_threads gives the sequential path's numbers bit for bit (at one intra-op thread, and the
# intra-op thread count is not hashed either).
# client_store and its budget choose where client states live, not what they are (a test checks
# the disk store bit for bit against the in-memory one).
_NOT_HASHED = frozenset({"runs_dir", "checkpoint_every", "name", "memory_budget_mb", "client_threads",
                         "client_store", "client_state_budget_mb"})

# --- limits before work -------------------------------------------------------------------------------
# Declared upper bounds, checked when a Config is built (before any file is written or any tensor
# allocated). Each is far above any experiment of the papers this lab reproduces (their largest: a
# few thousand rounds, K of a few hundred, B ≤ 128, at most 100 clients per round), and low enough
# that what the engine holds for it stays small: the batch indices of one round are
# clients × K × B int64 numbers, built before the round starts.
MAX_ROUNDS = 100_000
"""rounds T: tens of times the longest schedule of the papers reproduced here (a few thousand rounds);
10⁵ rounds take hours even on the smallest federation."""
MAX_LOCAL_STEPS = 100_000
"""local steps K per round."""
MAX_LOCAL_EPOCHS = 10_000
"""local epochs E per round (epoch mode)."""
MAX_BATCH_SIZE = 65_536
"""local minibatch size B (2¹⁶: above every training set this lab loads, Fashion-MNIST's 60 000 the largest)."""
MAX_CLIENT_THREADS = 256
"""client threads (each holds a replica of the model): far above any CPU's cores."""
MAX_CROP_PADDING = 64
"""pixels of crop padding per side: twice the largest image side this lab loads (32)."""
MAX_CLIENT_EVAL_SIZE = 10_000
"""test samples per client with client_eval: the size of the largest test set this lab loads."""
MAX_SAMPLES_PER_ROUND = 100_000_000
"""clients per round × K × B: 10⁸ sample-gradients (about a day of CPU time for one round, and 0.8 GB
of batch indices held at once)."""


def dataset_names() -> tuple[str, ...]:
    """The allowed ``Config.dataset`` values: :data:`fedlab.data.datasets.DATASETS` plus ``"custom"``."""
    from fedlab.data.datasets import DATASETS as registered  # lazy: keeps ``import fedlab.config`` light

    return (*registered, CUSTOM_DATASET)


def partition_names() -> tuple[str, ...]:
    """The allowed ``Config.partition`` values: the partitioner registry :data:`fedlab.data.partition.PARTITIONERS`."""
    from fedlab.data.partition import PARTITIONERS

    return PARTITIONERS


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field and what is allowed."""


_DEVICE = re.compile(r"cpu|mps|cuda(:[0-9]+)?")


def _is_number(value: Any) -> bool:
    """A real number that is not a bool (``True`` is an int in Python, never a learning rate)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_finite(value: Any) -> bool:
    return _is_number(value) and math.isfinite(value)


def _is_int(value: Any, low: int) -> bool:
    """An integer ≥ ``low`` that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def check_device_available(device: str) -> None:
    """ConfigError unless ``device`` exists here, checked when a run starts (``Config`` checks only the
    spelling, so a GPU config can be read back on a machine without one)."""
    import torch

    if device.startswith("cuda"):
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= n:
            raise ConfigError(f"device={device!r} is not available: this machine has "
                              f"{n} CUDA device(s); use device='cpu'" + (f" or cuda:0..cuda:{n - 1}" if n else ""))
    elif device == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("device='mps' is not available on this machine; use device='cpu'")


def check_round_work(clients: int, local_steps: int, batch_size: int) -> None:
    """ConfigError when ``clients × local_steps × batch_size`` (the batch indices drawn for one round)
    exceeds :data:`MAX_SAMPLES_PER_ROUND`, bounding a round's memory and time before any is spent."""
    work = clients * local_steps * batch_size
    if work > MAX_SAMPLES_PER_ROUND:
        raise ConfigError(f"local_steps={local_steps} × batch_size={batch_size} × {clients} clients per round = "
                          f"{work:,} samples per round is above the limit of {MAX_SAMPLES_PER_ROUND:,} "
                          "(fedlab.config.MAX_SAMPLES_PER_ROUND); lower local_steps, batch_size or participation")


def _opt(default: Any, help: str) -> Any:
    """A :class:`Config` field with its description in ``metadata["help"]`` (a callable default is a factory)."""
    if callable(default):
        return field(default_factory=default, metadata={"help": help})
    return field(default=default, metadata={"help": help})


def help_text(name: str) -> str:
    """The one-line description of :class:`Config` field ``name`` (declared with the field)."""
    return _FIELDS[name].metadata["help"]


@dataclass(frozen=True)
class Config:
    """One federated experiment. Defaults: a laptop-sized Fashion-MNIST run (FL-Simulator's rules)."""

    # Every field: a default and its one-line description, the single source of ``help_text`` (the CLI's
    # ``--help``, the docs). ``_opt`` keeps each declaration on one line.
    # what is trained
    algorithm: str = _opt("fedavg", "federated method (see `python -m fedlab algorithms`)")
    algorithm_params: dict[str, Any] = _opt(dict, "hyperparameters of the method, name → value, plus an optional "
                                            "\"preset\" (on the command line: --param rho=0.05)")
    dataset: str = _opt("fmnist", "dataset name; \"custom\": your own tensors, "
                        "fedlab.run(cfg, dataset=fedlab.data.from_tensors(...))")
    model: str = _opt("cnn", "model name (GroupNorm CNNs/ResNets)")
    train_size: int | None = _opt(None, "class-balanced subset of the training set (None = all)")
    test_size: int | None = _opt(None, "class-balanced subset of the test set (None = all)")
    validation_size: int | None = _opt(None, "hold out this many training samples and evaluate on them "
                                       "(tuning; None = evaluate on the test set)")
    as_cifar_shape: bool = _opt(False, "pad 28×28 images to 32×32 and repeat channels (lenet5/ResNets on "
                                "Fashion-MNIST)")
    augment: bool | None = _opt(None, "on-device augmentation on/off (None = the dataset's default: crop+flip "
                                "for CIFAR)")
    crop_prob: float = _opt(1.0, "probability that a training sample is randomly cropped (FL-Simulator: 0.5)")
    crop_padding: int = _opt(4, "zero padding in pixels per side before the random crop")
    flip_prob: float = _opt(0.5, "probability of a horizontal flip of a training sample")
    # how data is split
    partition: str = _opt("dirichlet", "how the training set is split among clients (fedlab.data.partition)")
    alpha: float | None = _opt(0.1, "Dirichlet concentration (dirichlet: per class over clients; "
                               "dirichlet_client: per-client class prior; see fedlab.data.partition)")
    classes_per_client: int | None = _opt(None, "c for the pathological partition")
    shards_per_client: int = _opt(2, "shards per client for the shards partition")
    partition_params: dict[str, Any] = _opt(dict, "partitioner options, name → value: min_size, balance_cap, "
                                            "concentration, reuse_on_exhaustion, path, allow_empty, "
                                            "allow_duplicates")
    n_clients: int = _opt(100, "number of clients N")
    # who takes part
    participation: float = _opt(0.1, "fraction of clients per round, in (0, 1] (m = round(p·N) for uniform)")
    sampling: str = _opt("uniform", "uniform = exactly m without replacement; bernoulli = FL-Simulator's; "
                         "schedule = replay a file")
    schedule_path: str | None = _opt(None, "JSON list of per-round client-id lists (sampling schedule)")
    # local work
    rounds: int = _opt(50, "communication rounds T")
    local_steps: int | None = _opt(10, "local steps K per round; None with local_epochs set (epoch mode)")
    local_epochs: int | None = _opt(None, "E: K_i = E·⌈n_i/B⌉ local steps (the reference codes' epoch mode); "
                                    "needs local_steps unset")
    batch_size: int = _opt(32, "local minibatch size B")
    lr: float = _opt(0.1, "initial local learning rate")
    lr_schedule: str = _opt("exponential", "per-round learning-rate schedule")
    lr_decay: float = _opt(0.998, "per-round decay factor of the exponential schedule (FL-Simulator)")
    weight_decay: float = _opt(1e-3, "L2 weight decay of the local SGD")
    clip_norm: float | None = _opt(10.0, "global-norm gradient clipping (None = off)")
    # measurement and execution
    eval_every: int = _opt(1, "evaluate the global model every this many rounds (and at the end)")
    eval_subsample: int | None = _opt(None, "evaluate on a fixed class-balanced subset of this many test "
                                      "samples (None = all)")
    client_eval: bool = _opt(False, "also evaluate the global model on each client's own test split (its "
                             "training label proportions) at evaluation rounds: mean, std, mean of the worst tenth")
    client_eval_size: int = _opt(100, "test samples per client with client_eval (drawn from the test set)")
    seed: int = _opt(0, "the one seed every generator is derived from")
    partition_seed: int | None = _opt(None, "seed of the partition alone (None = seed); fix it to compare "
                                      "seeds on one split")
    device: str = _opt("cpu", "cpu, cuda, cuda:N or mps")
    parallel_clients: int | str = _opt(1, "clients trained together with torch.func.vmap (1 = sequential "
                                       "reference path, 'auto' = chosen by a short measurement)")
    memory_budget_mb: float | None = _opt(None, "MiB a vmapped chunk may use with parallel_clients 'auto' "
                                          "(None = device-dependent)")
    client_threads: int = _opt(1, "CPU: train this many clients at once, one per thread with one intra-op "
                               "thread each (bit-identical to the sequential path at one thread)")
    amp: bool = _opt(False, "bf16 autocast of the local gradients (CUDA, or a CPU with native bf16, e.g. "
                     "AVX512-BF16/AMX); evaluation stays float32")
    channels_last: bool = _opt(False, "run convolutions in NHWC memory layout (faster kernels; same function, "
                               "last-bit differences)")
    checkpoint_every: int = _opt(10, "write a checkpoint every this many rounds")
    client_store: str = _opt("auto", "where stateful methods keep per-client state: memory, disk (a file in "
                             "the run folder; RAM holds one round's clients) or auto (disk above "
                             "client_state_budget_mb)")
    client_state_budget_mb: float = _opt(4096.0, "MiB of client state (N × one client's) above which "
                                         "client_store 'auto' keeps it on disk")
    runs_dir: str | None = _opt(None, "where run directories live (None = $FEDLAB_RUNS, else ./runs)")
    name: str | None = _opt(None, "label for plots and summaries (not hashed)")

    def __post_init__(self) -> None:
        if isinstance(self.runs_dir, str) and self.runs_dir.startswith("~"):
            # "~/runs" means the home folder, as in a shell (runs_dir is not hashed: the key is unchanged)
            object.__setattr__(self, "runs_dir", os.path.expanduser(self.runs_dir))
        self.validate()

    def validate(self) -> None:
        from fedlab.models import MODELS

        def bad(name: str, allowed: str) -> ConfigError:
            return ConfigError(f"{name}={getattr(self, name)!r} is invalid; allowed: {allowed}")

        for name in ("algorithm", "dataset", "model", "partition", "sampling", "lr_schedule", "device"):
            if not isinstance(getattr(self, name), str):
                raise bad(name, "a string")
        for name in ("algorithm_params", "partition_params"):
            value = getattr(self, name)
            if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
                raise ConfigError(f"{name}={value!r} is invalid; allowed: a dict of name → value "
                                  f"(e.g. {{'rho': 0.05}}; on the command line --param rho=0.05)")
        for name in ("schedule_path", "runs_dir", "name"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise bad(name, "None or a string")
        if self.runs_dir is not None and not self.runs_dir.strip():
            # "" would otherwise mean "the default folder" without saying so
            raise bad("runs_dir", "None (the default <repo>/runs) or a non-empty folder path")
        self._check_partition_params()
        for name in ("as_cifar_shape", "amp", "channels_last", "client_eval"):
            if not isinstance(getattr(self, name), bool):
                raise bad(name, "True or False")
        if self.augment is not None and not isinstance(self.augment, bool):
            raise bad("augment", "None (the dataset's default), True or False")
        if self.dataset not in dataset_names():
            raise bad("dataset", ", ".join(dataset_names()))
        if self.model not in MODELS:
            raise bad("model", ", ".join(MODELS))
        if self.partition not in partition_names():
            raise bad("partition", ", ".join(partition_names()))
        if self.sampling not in SAMPLINGS:
            raise bad("sampling", ", ".join(SAMPLINGS))
        if self.lr_schedule not in LR_SCHEDULES:
            raise bad("lr_schedule", ", ".join(LR_SCHEDULES))
        try:
            _ = self.built_algorithm  # built once, here: the run trains with it and its key reads it
        except ValueError as err:
            raise ConfigError(f"algorithm: {err}") from None
        if self.partition in ("dirichlet", "dirichlet_client"):
            if not _is_finite(self.alpha) or self.alpha <= 0:
                raise bad("alpha", "a finite number > 0 for Dirichlet partitions")
        if self.partition == "pathological" and not _is_int(self.classes_per_client, 1):
            raise bad("classes_per_client", "an integer ≥ 1 for the pathological partition")
        if self.partition == "file" and not self.partition_params.get("path"):
            raise ConfigError("partition_params['path'] is required for partition='file'")
        if self.partition == "natural" and self.dataset != "synthetic":
            raise bad("partition", "'natural' only for dataset='synthetic'")
        if self.validation_size is not None and self.partition == "natural":
            raise ConfigError("validation_size needs a partition of the pooled training set; the 'natural' "
                              "partition's clients index the whole training set (use validation_size=None)")
        if self.sampling == "schedule" and not self.schedule_path:
            raise ConfigError("schedule_path is required for sampling='schedule'")
        if self.local_steps is not None and self.local_epochs is not None:
            raise ConfigError(f"local_steps={self.local_steps!r} and local_epochs={self.local_epochs!r} are both "
                              "set; choose one: local_steps=K (fixed K) or local_steps=None with "
                              "local_epochs=E (epoch mode)")
        if self.local_steps is None and self.local_epochs is None:
            raise ConfigError("local_steps=None and local_epochs=None: set local_steps=K (fixed K) or "
                              "local_epochs=E (epoch mode)")
        for name in ("n_clients", "rounds", "batch_size", "eval_every", "client_eval_size",
                     "checkpoint_every", "shards_per_client"):
            if not _is_int(getattr(self, name), 1):
                raise bad(name, "an integer ≥ 1")
        if not _is_int(self.crop_padding, 0):
            raise bad("crop_padding", "an integer ≥ 0 (pixels of zero padding per side)")
        for name in ("train_size", "test_size", "validation_size", "eval_subsample", "local_steps", "local_epochs"):
            if getattr(self, name) is not None and not _is_int(getattr(self, name), 1):
                raise bad(name, "None or an integer ≥ 1")
        if not (_is_number(self.participation) and 0 < self.participation <= 1):
            raise bad("participation", "a number in (0, 1] (not a bool)")
        self._check_limits()
        for name in ("crop_prob", "flip_prob"):
            value = getattr(self, name)
            if not (_is_number(value) and 0 <= value <= 1):
                raise bad(name, "a probability in [0, 1] (not a bool)")
        if not (_is_finite(self.lr) and self.lr > 0):
            raise bad("lr", "a finite number > 0")
        if not (_is_number(self.lr_decay) and 0 < self.lr_decay <= 1):
            raise bad("lr_decay", "a number in (0, 1]")
        if not (_is_finite(self.weight_decay) and self.weight_decay >= 0):
            raise bad("weight_decay", "a finite number ≥ 0")
        if self.clip_norm is not None and not (_is_number(self.clip_norm) and self.clip_norm > 0):
            raise bad("clip_norm", "None (no clipping) or a number > 0")
        if not _is_int(self.seed, 0):
            raise bad("seed", "an integer ≥ 0")
        if self.partition_seed is not None and not _is_int(self.partition_seed, 0):
            raise bad("partition_seed", "None (use seed) or an integer ≥ 0")
        if not _DEVICE.fullmatch(self.device):
            raise bad("device", "cpu, cuda, cuda:N (N an integer ≥ 0) or mps")
        if self.parallel_clients != "auto" and not _is_int(self.parallel_clients, 1):
            raise bad("parallel_clients", "an integer ≥ 1 or 'auto'")
        if self.memory_budget_mb is not None and not (_is_finite(self.memory_budget_mb) and self.memory_budget_mb > 0):
            raise bad("memory_budget_mb", "None (device default) or a number of MiB > 0")
        from fedlab.store.client_states import CLIENT_STORES

        if self.client_store not in CLIENT_STORES:
            raise bad("client_store", " or ".join(map(repr, CLIENT_STORES)))
        if not (_is_finite(self.client_state_budget_mb) and self.client_state_budget_mb > 0):
            raise bad("client_state_budget_mb", "a number of MiB > 0")
        if not _is_int(self.client_threads, 1):
            raise bad("client_threads", "an integer ≥ 1 (1 = one client at a time)")
        if self.client_threads > 1 and self.device != "cpu":
            raise ConfigError(f"client_threads={self.client_threads} is a CPU execution mode, got "
                              f"device={self.device!r}; use parallel_clients (vmap) on accelerators")
        if self.client_threads > 1 and self.parallel_clients != 1:
            raise ConfigError(f"client_threads={self.client_threads} and parallel_clients="
                              f"{self.parallel_clients!r} are two execution modes; choose one "
                              "(client_threads > 1 with parallel_clients=1, or client_threads=1)")
        if self.local_epochs is not None and self.parallel_clients != 1:
            raise ConfigError("parallel_clients > 1 or 'auto' needs a fixed number of local steps; "
                              "set local_steps=K (local_epochs=None) or parallel_clients=1")

    def _check_partition_params(self) -> None:
        """ConfigError naming an unknown ``partition_params`` key and the allowed ones."""
        from fedlab.data.partition import PARTITION_OPTIONS

        unknown = sorted(set(self.partition_params) - set(PARTITION_OPTIONS))
        if unknown:
            raise ConfigError(f"partition_params: unknown option(s) {', '.join(map(repr, unknown))}; allowed: "
                              f"{', '.join(PARTITION_OPTIONS)} (on the command line --partition-param name=value)")

    def _check_limits(self) -> None:
        """ConfigError when rounds, K, E, B, client threads, crop padding, client-eval samples or the work of one
        round exceed the declared limits.

        Runs after the type checks, so every value here is an integer ≥ 1 (or None in epoch mode).
        """
        for name, top in (("rounds", MAX_ROUNDS), ("local_steps", MAX_LOCAL_STEPS), ("local_epochs", MAX_LOCAL_EPOCHS),
                          ("batch_size", MAX_BATCH_SIZE), ("client_threads", MAX_CLIENT_THREADS),
                          ("crop_padding", MAX_CROP_PADDING), ("client_eval_size", MAX_CLIENT_EVAL_SIZE)):
            value = getattr(self, name)
            if _is_number(value) and value > top:  # client_threads' type is checked after this
                raise ConfigError(f"{name}={value} is above the limit; allowed: an integer from 1 to {top:,} "
                                  f"(fedlab.config.MAX_{name.upper()})")
        if self.local_steps is not None and self.sampling != "schedule":
            # a schedule's rounds are checked when it is read (Simulation.build), they may be any size
            check_round_work(self.clients_per_round, self.local_steps, self.batch_size)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "Config":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ConfigError(f"unknown config field(s) {unknown}; allowed: {', '.join(sorted(names))}")
        return cls(**values)

    def replace(self, **changes: Any) -> "Config":
        return dataclasses.replace(self, **changes)

    @property
    def built_algorithm(self) -> Algorithm:
        """The algorithm of this config, built once by :meth:`validate` (``fedlab.run`` trains with this
        instance, :meth:`hash` reads its resolved hyperparameters); again only if ``algorithm_params`` was
        changed in place since."""
        params, algorithm = self.__dict__.get("_built", (None, None))
        if algorithm is None or params != self.algorithm_params:
            from fedlab.algorithms import algorithm_class

            algorithm = algorithm_class(self.algorithm)(self.algorithm_params)
            object.__setattr__(self, "_built", (dict(self.algorithm_params), algorithm))
        return algorithm

    def hashed_fields(self) -> dict[str, Any]:
        """The fields that determine the numbers, with algorithm hyperparameters fully resolved."""
        values = {k: v for k, v in self.to_dict().items() if k not in _NOT_HASHED}
        if not self.client_eval:  # off, its fields change no number: the keys of earlier configs stay
            del values["client_eval"], values["client_eval_size"]
        values["algorithm_params"] = self.built_algorithm.hp.to_dict()
        return values

    def hash(self, extra: str = "", schedule: str = "") -> str:
        """The run key: 12 hex digits of SHA-256 over the hashed fields, ``extra`` (the partition
        fingerprint), ``schedule`` (a digest of the client schedule's contents, for
        ``sampling="schedule"``), the numeric-path code digest and the version."""
        from fedlab.store.code_digest import code_digest

        payload = json.dumps({"config": self.hashed_fields(), "extra": extra, "version": __version__,
                              "schedule": schedule, "code": code_digest()},
                             sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()[:12]

    @property
    def clients_per_round(self) -> int:
        """m for uniform sampling: round(p·N), at least 1."""
        return max(1, round(self.participation * self.n_clients))


_FIELDS = {f.name: f for f in dataclasses.fields(Config)}
