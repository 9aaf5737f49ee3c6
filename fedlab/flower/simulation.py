"""Run fedlab's ServerApp and ClientApp with Flower's simulation engine (Ray backend).

:func:`run_flower_simulation` starts ``n_clients`` virtual SuperNodes, runs the ServerApp here and the
ClientApps in Ray actors, and returns the final model with the traffic measured per round, through
``flwr.simulation.run_simulation`` (deprecated in Flower 1.42 for ``flwr run``, still the in-process
entry point; the apps are those ``flwr run`` deploys). Ray starts once per process and is reused. Each
run is stored and tracked as ``fedlab.run`` does (:mod:`fedlab.flower.server`)."""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from flwr.simulation import run_simulation

from fedlab.config import Config, ConfigError
from fedlab.engine.loop import Simulation
from fedlab.flower.client import make_client_app
from fedlab.flower.protocol import Traffic, named_configs
from fedlab.flower.server import FedlabStrategy, RoundRecord, make_server_app
from fedlab.results import RunResult
from fedlab.tracking import Logger, get_logger

NOT_SIMULATED = ("device", "parallel_clients", "client_threads", "memory_budget_mb", "checkpoint_every",
                 "client_store", "client_state_budget_mb")
"""Config fields a Flower simulation does not honour (``flower-sim`` offers no flag for them): its ClientApps
train one client at a time in Ray actors without a GPU, and its run is checkpointed once, at the end."""


@dataclass
class FlowerRun:
    """The outcome of a Flower simulation: the final global model, the server's round records (none for a
    run loaded from the store) and the stored run (``result.run_dir``, ``result.metrics``)."""

    config: Config
    theta: torch.Tensor
    rounds: list[RoundRecord] = field(default_factory=list)
    result: RunResult | None = None

    @property
    def uplink(self) -> Traffic:
        return sum((r.uplink for r in self.rounds), Traffic())

    @property
    def downlink(self) -> Traffic:
        return sum((r.downlink for r in self.rounds), Traffic())


def run_flower_simulation(config: Config, **options: Any) -> FlowerRun:
    """Train ``config`` as a Flower app; ``options`` as for :func:`run_flower_experiments`."""
    return run_flower_experiments(config, **options)[None]  # type: ignore[index]


NODES_PER_CPU = 1_000
"""Virtual SuperNodes a simulation may start per CPU given to Ray: the server asks every node which
client it is before round 1 (one Ray message each) and Flower keeps a state per node, so the start-up
grows with n_clients whatever the participation."""
MAX_NODES = 100_000
"""Virtual SuperNodes a simulation may start on any number of CPUs (fedlab's engine, ``fedlab.run``,
trains larger federations without one node per client)."""


def machine_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else max(1, os.cpu_count() or 1)


def check_federation_size(n_clients: int, num_cpus: int) -> None:
    """ConfigError, before Ray starts, for ``num_cpus`` < 1 or more SuperNodes than the CPUs serve: ``num_cpus``,
    but never more than this machine has (Ray would start that many workers on its few real cores)."""
    if isinstance(num_cpus, bool) or not isinstance(num_cpus, int) or num_cpus < 1:
        raise ConfigError(f"num_cpus={num_cpus!r} is invalid; allowed: an integer from 1 (--num-cpus)")
    real = min(num_cpus, machine_cpus())
    top = min(MAX_NODES, NODES_PER_CPU * real)
    if n_clients > top:
        raise ConfigError(f"n_clients={n_clients} is above the limit of a Flower simulation on num_cpus={num_cpus} "
                          f"(this machine has {machine_cpus()}): at most {top:,} SuperNodes ({NODES_PER_CPU:,} per "
                          f"CPU, {MAX_NODES:,} in all); give more CPUs (--num-cpus), or use `python -m fedlab run`")


def run_flower_experiments(configs: Config | Mapping[str, Config], *, num_cpus: int = 1, cpus_per_client: float = 1.0,
                           on_round: Callable[[RoundRecord], None] | None = None, verbose: bool = False,
                           logger: Logger | str | None = None) -> dict[str | None, FlowerRun]:
    """Several named Configs (one ``n_clients``) in ONE simulation, sharing SuperNodes and Ray actors (each with
    its own client state), which saves seconds of start-up per experiment; one Config is ``{None: run}``.
    ``num_cpus`` for Ray, ``cpus_per_client`` per ClientApp actor, ``logger`` a tracker (as for ``fedlab.run``)."""
    named = named_configs(configs)
    assert named is not None
    if cpus_per_client <= 0 or num_cpus < cpus_per_client:
        raise ValueError(f"cpus_per_client must be in (0, num_cpus={num_cpus}] (got {cpus_per_client})")
    for cfg in named.values():  # everything that can be refused is refused before Ray and Flower start
        check_federation_size(cfg.n_clients, num_cpus)
        for name in NOT_SIMULATED:
            if getattr(cfg, name) != getattr(Config(), name):
                raise ConfigError(f"{name}={getattr(cfg, name)!r}: a Flower simulation does not honour it; allowed: "
                                  f"{getattr(Config(), name)!r}, the default (fedlab.flower.simulation.NOT_SIMULATED)")
        if cfg.client_eval and cfg.built_algorithm.personal_models:
            raise ConfigError(f"client_eval=True with algorithm={cfg.algorithm!r}: its clients' own models stay on the "
                              "SuperNodes, so a Flower simulation cannot measure them; run it with fedlab.run")
        Simulation.build(cfg)  # dataset, partition, schedule, sampling (the dataset stays cached in-process)
    logger = get_logger(logger)  # a bad name or a missing extra, before Ray starts
    import ray

    if not ray.is_initialized():
        _start_ray(num_cpus, verbose)
    runs: dict[str | None, FlowerRun] = {}

    def finish(name: str | None, strategy: FedlabStrategy, result: RunResult) -> None:
        runs[name] = FlowerRun(named[name], result.theta, strategy.rounds, result)

    n_clients = next(iter(named.values())).n_clients
    backend = {"client_resources": {"num_cpus": cpus_per_client, "num_gpus": 0.0}}
    run_simulation(make_server_app(configs, on_round=on_round, on_finish=finish, logger=logger),
                   make_client_app(configs), num_supernodes=n_clients, backend_config=backend,
                   verbose_logging=verbose)
    unfinished = [str(name) for name in named if name not in runs]
    if unfinished:
        raise RuntimeError(f"the Flower simulation ended before finishing {', '.join(unfinished)} (see the log)")
    return runs


def _start_ray(num_cpus: int, verbose: bool) -> None:
    """``ray.init`` for this process, with the sweep's retries of a start-up that timed out."""
    import logging

    import ray

    from fedlab.sweep.backends import ray_init

    ray_init(ray, num_cpus=num_cpus, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=verbose)
