"""The round loop: sample → broadcast → local work → upload → aggregate → evaluate → checkpoint.

``run(config)`` is the entry point. ``Simulation.build`` validates everything a run needs (device,
runs_dir, dataset, partition file, client schedule, sampling feasibility) before anything is
created on disk; ``Simulation.run`` then holds the run's lock (:meth:`fedlab.results.RunStore.lock`)
while it returns a finished run from disk without recomputing (repairing its derived files from the
checkpoint), resumes an unfinished one from its checkpoint, or starts from round 0. Every random
choice draws from a generator derived from (seed, purpose, round, client), and every piece of state
(server, clients) lives in the checkpoint, so a resumed run is bit-identical to an uninterrupted one.

What a run is built from is :mod:`fedlab.engine.setup`; the state it carries from round to round,
:mod:`fedlab.engine.state`.
"""
from __future__ import annotations

import math
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor
from tqdm import tqdm

from fedlab._version import __version__
from fedlab.algorithms import Algorithm, RoundInfo, State
from fedlab.config import Config, ConfigError, check_device_available, check_round_work
from fedlab.data import Dataset, balanced_subset
from fedlab.data.partition import Partition
from fedlab.engine.batches import epoch_batches, fixed_step_batches
from fedlab.engine.client_eval import ClientEval
from fedlab.engine.costs import cost_columns
from fedlab.engine.collapse import is_collapsed
from fedlab.engine.clients import ClientJob, ClientResult, LocalData, RoundWork, run_clients_sequential
from fedlab.engine.evaluate import evaluate
from fedlab.engine.sampling import check_sampling, eligible_clients, load_schedule, sample_clients, schedule_digest
from fedlab.engine.round import round_info, run_round
from fedlab.models import FlatModel, build_model
from fedlab.store.code_digest import code_changed, code_digest
from fedlab._rng import torch_generator
from fedlab._paths import default_runs_dir
from fedlab.results import TERMINAL_STATUSES, Checkpoint, CheckpointError, RunResult, RunStore, config_record
from fedlab.engine.setup import (_held_out, _load_theta0, build_dataset, build_partition, check_rounds_drawable,
                                 load_run_schedule, runs_dir_problem)
from fedlab.engine.state import (RoundOutcome, RunInterrupted, TrainingState, checkpointed_client_states,
                                 client_states, personal_models, saved_client_states)
from fedlab.store.client_states import DiskClientStates
from fedlab.engine.summary import run_summary
from fedlab.tracking import Logger, get_logger, tracked


def _numel(state: State) -> int:
    return sum(int(v.numel()) for v in state.values())


@dataclass
class Simulation:
    """Everything a run needs, built once from a Config."""

    config: Config
    dataset: Dataset
    partition: Partition
    model: FlatModel
    algorithm: Algorithm
    store: RunStore
    config_hash: str
    theta0_digest: str | None = None  # SHA-256 of a user-supplied θ₀ (None: θ₀ from the config's seed)
    schedule: list[list[int]] | None = None  # the validated client schedule (sampling="schedule")
    client_eval: ClientEval | None = None  # the clients' own test splits (config.client_eval)
    # parallel_clients="auto": the chunk measured in the first round, reused for the whole run
    chunk_choice: Any = field(default=None, init=False, repr=False)
    # False when runs_dir cannot be written: only a finished run can then be loaded (read-only)
    writable: bool = field(default=True, init=False, repr=False)
    # set by run(stop=...): checked at every round boundary
    _stop: threading.Event | None = field(default=None, init=False, repr=False)
    _logger: Logger | None = field(default=None, init=False, repr=False)  # set by run(logger=...)

    @classmethod
    def build(cls, config: Config, dataset: Dataset | None = None, theta0: Tensor | None = None) -> "Simulation":
        """Validate and assemble a run; nothing is created on disk here (``run`` does that).

        ``dataset``: tensors to train on instead of the config's dataset (required for
        ``dataset="custom"``, see :func:`fedlab.data.from_tensors`); ``theta0``: the initial global
        model as a flat vector of the model's d parameters (default: the model's seeded
        initialisation). The run key is ``Config.hash`` over the partition fingerprint, the
        dataset's :attr:`~fedlab.data.Dataset.digest`, a digest of θ₀ if given, and the client
        schedule's contents, so a stored run is only returned for the same data, start and clients.
        """
        if dataset is None and config.dataset == "custom":
            raise ConfigError("dataset='custom' trains on tensors you supply: "
                              "fedlab.run(cfg, dataset=fedlab.data.from_tensors(x_train, y_train, x_test, y_test))")
        check_device_available(config.device)
        root = Path(config.runs_dir) if config.runs_dir else default_runs_dir()
        unwritable = runs_dir_problem(root)
        if unwritable is not None and not root.is_dir():  # no stored run can be there to load: fail now
            raise unwritable
        schedule = load_run_schedule(config)
        if schedule is not None and config.local_steps is not None:  # the largest round bounds the work
            check_round_work(max(len(ids) for ids in schedule), config.local_steps, config.batch_size)
        dataset = build_dataset(config) if dataset is None else _held_out(dataset, config.validation_size)
        partition = build_partition(config, dataset)
        module = build_model(config.model, dataset.input_shape, dataset.n_classes, seed=config.seed)
        module = module.to(config.device)
        theta0_digest = None
        if theta0 is not None:
            theta0_digest = _load_theta0(module, theta0, config.model, dataset)
        model = FlatModel(module, channels_last=config.channels_last, amp=config.amp)
        key = partition.fingerprint + f"|data:{dataset.digest}" + (f"|theta0:{theta0_digest}" if theta0_digest else "")
        config_hash = config.hash(key, schedule_digest(schedule))
        sim = cls(config, dataset, partition, model, config.built_algorithm,
                  RunStore.for_run(root, config.algorithm, config_hash),
                  config_hash, theta0_digest, schedule,
                  ClientEval.build(config, dataset.x_test, dataset.y_test, partition.stats.counts.to_numpy()))
        if unwritable is not None:
            if not sim.store.checkpoint_path.is_file():  # nothing to load: the folder must be writable
                raise unwritable
            sim.writable = False  # a stored run can still be loaded (Simulation._load_read_only)
        sim.check_sampling()
        return sim

    def initial_state(self) -> TrainingState:
        theta0 = self.model.theta0()
        return TrainingState(self.algorithm.server_init(theta0),
                             client_states(self.config, self.algorithm, theta0, self.store.dir), theta0, 0)

    def state_from_checkpoint(self, ckpt: Checkpoint) -> TrainingState:
        """The training state a checkpoint records, on the run's device (client states in the store the
        config asks for, whichever kind the checkpoint kept them in)."""
        dev = torch.device(self.config.device)
        theta0 = ckpt.theta0.to(dev)
        return TrainingState(
            server={k: v.to(dev) for k, v in ckpt.server.items()},
            client_states=client_states(self.config, self.algorithm, theta0, self.store.dir,
                                        saved_client_states(ckpt, self.store.dir, dev)),
            theta0=theta0,
            next_round=ckpt.next_round,
        )

    def saved_state(self) -> TrainingState | None:
        """The training state of this run's last checkpoint (``next_round`` = rounds done), on the
        run's device; ``None`` when nothing has been checkpointed yet. ``CheckpointError`` if the
        checkpoint is unusable (see :meth:`fedlab.results.RunStore.load_checkpoint`)."""
        ckpt = self.store.load_checkpoint(self.config_hash)
        return None if ckpt is None else self.state_from_checkpoint(ckpt)

    @cached_property
    def client_indices(self) -> list[Tensor]:
        """Each client's training-sample indices, as tensors on the run's device."""
        dev = torch.device(self.config.device)
        return [torch.tensor(ix, dtype=torch.long, device=dev) for ix in self.partition.client_indices]

    @cached_property
    def thread_models(self) -> list[FlatModel]:
        """One model per client thread (``client_threads``): the run's own, then replicas."""
        return [self.model] + [self.model.replica() for _ in range(self.config.client_threads - 1)]

    @cached_property
    def local_data(self) -> LocalData:
        c = self.config
        return LocalData(self.dataset.x_train, self.dataset.y_train, self.augment_kind, crop_prob=c.crop_prob,
                         crop_padding=c.crop_padding, flip_prob=c.flip_prob)

    @cached_property
    def eligible(self) -> np.ndarray:
        """Ids of the clients holding data: the only ones ever sampled (empty clients never are)."""
        return eligible_clients(self.partition.sizes)

    def check_sampling(self) -> None:
        """ConfigError, before anything is written, when some round cannot be drawn: too few clients
        hold data, a schedule names an empty client, or Bernoulli draws come up empty."""
        c = self.config
        try:
            check_sampling(c.n_clients, c.participation, c.sampling, self.eligible)
            if self.schedule is not None:
                load_schedule(c.schedule_path, c.n_clients, c.rounds, eligible=self.eligible)
        except ValueError as err:
            raise ConfigError(f"sampling: {err}") from None
        check_rounds_drawable(c, self.schedule, self.eligible)

    def sample(self, t: int) -> np.ndarray:
        """The ids of the clients taking part in round t, drawn now (rounds are drawn lazily)."""
        c = self.config
        try:
            return sample_clients(t, c.n_clients, c.participation, seed=c.seed, mode=c.sampling,
                                  schedule=self.schedule, eligible=self.eligible)
        except RuntimeError as err:  # a Bernoulli round that came up empty every time (undrawable_risk)
            raise ConfigError(f"participation={c.participation!r} with sampling={c.sampling!r} and "
                              f"n_clients={c.n_clients}: {err} (round {t}); raise participation") from None

    def train_round(self, state: TrainingState, t: int, clients: np.ndarray | None = None) -> RoundOutcome:
        """Round t: broadcast, local work of the sampled (or given) clients, upload, aggregate.

        Updates ``state`` in place (server, client states, next round) and returns what happened.
        """
        alg = self.algorithm
        clients = self.sample(t) if clients is None else clients
        # The jobs fix every client's K_i (E·⌈n_i/B⌉ in epoch mode) before anything is sent, so the
        # round's info carries the steps the clients really run.
        jobs = self.client_jobs(t, clients, self.client_indices)
        info = self.round_info(t, tuple(len(job.batches) for job in jobs))
        done = run_round(alg, state.server, state.client_states, clients.tolist(), state.theta0, info,
                         lambda msg, states: self.run_clients(msg, jobs, states, self.local_data, info))
        state.server = done.server
        state.next_round = t + 1
        return RoundOutcome(clients, info, done.msg, done.results)

    def round_info(self, t: int, client_steps: tuple[int, ...]) -> RoundInfo:
        """Round t's info; ``client_steps`` are the K_i of the sampled clients, in job order."""
        c = self.config
        return round_info(t, lr0=c.lr, schedule=c.lr_schedule, rounds=c.rounds, decay=c.lr_decay,
                          client_steps=client_steps, n_clients=c.n_clients, weight_decay=c.weight_decay,
                          clip_norm=c.clip_norm, seed=c.seed, layout=self.model.spec.layout)

    def client_jobs(self, t: int, clients: np.ndarray, client_idx: list[Tensor]) -> list[ClientJob]:
        c = self.config
        dev = self.dataset.x_train.device
        jobs = []
        for i in clients.tolist():
            gen = torch_generator(c.seed, "batches", t, i, device="cpu")
            if c.local_steps is not None:
                batches: Any = fixed_step_batches(client_idx[i], c.local_steps, c.batch_size, gen)
            else:
                batches = epoch_batches(client_idx[i], c.local_epochs, c.batch_size, gen)
            aug = torch_generator(c.seed, "augment", t, i, device=dev) if self.augment_kind else None
            jobs.append(ClientJob(i, batches, aug))
        return jobs

    @property
    def augment_kind(self) -> str | None:
        if self.config.augment is False:
            return None
        if self.config.augment is True:
            return self.dataset.augment or "crop_flip"
        return self.dataset.augment

    def run_clients(self, msg: State, jobs: list[ClientJob], states: list[State], data: LocalData,
                    info: RoundInfo) -> list[ClientResult]:
        """Local training of the round's jobs: threaded, vectorised (chunk > 1 or "auto") or sequential.

        The sequential and threaded paths take the cheaper plain-autograd gradient oracle; vmap needs
        the functorch one (``FlatModel.autograd_grad_fn`` vs ``grad_fn``).
        """
        model = self.model
        work = RoundWork(self.algorithm, msg, jobs, states, data, model.autograd_grad_fn, info)
        if self.config.client_threads > 1:
            from fedlab.engine.threads import run_clients_threaded

            return run_clients_threaded(work, [m.autograd_grad_fn for m in self.thread_models])
        vmap_work = replace(work, grad_fn=model.grad_fn)
        chunk = self.config.parallel_clients
        if chunk == "auto":
            from fedlab.engine.chunking import choose_chunk

            if self.chunk_choice is None:
                self.chunk_choice = choose_chunk(vmap_work, budget_mb=self.config.memory_budget_mb,
                                                 sequential_grad_fn=model.autograd_grad_fn)
            chunk = self.chunk_choice.chunk
        if chunk > 1:
            from fedlab.engine.vectorised import run_clients_vectorised

            return run_clients_vectorised(vmap_work, chunk=chunk)
        return run_clients_sequential(work)

    def run(self, *, progress: bool = True, stop_after_rounds: int | None = None,
            stop: threading.Event | None = None, logger: Logger | str | None = None) -> RunResult:
        """Train (or resume, or load) this run; ``stop_after_rounds`` simulates an interruption.

        ``stop``: once set (the command line sets it on Ctrl-C), the run checkpoints at the next round
        boundary and raises :class:`RunInterrupted`. ``logger``: see :mod:`fedlab.tracking`.
        """
        if not self.writable:
            return self._load_read_only()
        self._stop, self._logger = stop, get_logger(logger)
        with self.store.lock(quiet=not progress):
            return self._run_locked(progress, stop_after_rounds)

    def _load_read_only(self) -> RunResult:
        """A finished run in a folder this process cannot write (a read-only mount, another user's runs):
        returned from its verified checkpoint without the lock and without repairing any view."""
        ckpt = self.store.load_checkpoint(self.config_hash)  # CheckpointError, touching nothing, if unusable
        if ckpt is None or ckpt.status not in TERMINAL_STATUSES:
            done = "has no checkpoint" if ckpt is None else f"stopped after round {ckpt.next_round}"
            raise ConfigError(f"runs_dir={str(self.store.dir.parent)!r} is not writable and this run {done}, so "
                              "it cannot be trained there; give runs_dir a folder you can write to")
        return self._result(ckpt.rows, ckpt.status, ckpt.server)

    def _run_locked(self, progress: bool, stop_after_rounds: int | None) -> RunResult:
        """Load a finished run, or resume an unfinished one, or start at round 0; under the lock."""
        store = self.store
        ckpt = store.load_checkpoint(self.config_hash)  # raises, touching nothing, if it is unusable
        store.remove_orphans()  # no one else writes here while we hold the lock
        if ckpt is None:
            store.write_config(self._config_info())
            return self._train(self.initial_state(), [], progress, stop_after_rounds)
        # The checkpoint is the record; the CSV and the summary are views that must agree with it.
        store.repair_views(ckpt.rows, self._summary(ckpt.rows, ckpt.status), self._config_info())
        if ckpt.status in TERMINAL_STATUSES:
            return self._result(ckpt.rows, ckpt.status, ckpt.server)
        return self._train(self.state_from_checkpoint(ckpt), ckpt.rows, progress, stop_after_rounds)

    def _train(self, state: TrainingState, rows: list[dict[str, Any]], progress: bool,
               stop_after_rounds: int | None) -> RunResult:
        """Train from ``state`` (``rows``: the rows of the rounds already done) until the run ends, it
        diverges, or ``stop_after_rounds`` rounds are done; checkpoint at every boundary."""
        c = self.config
        start = state.next_round
        end = c.rounds if stop_after_rounds is None else min(c.rounds, start + stop_after_rounds)
        eval_set = self.eval_set()
        status = "running"
        last_acc = next((r["test_acc"] for r in reversed(rows) if not math.isnan(r["test_acc"])), float("nan"))
        saved = start  # rounds done at the last checkpoint
        with tqdm(total=c.rounds, initial=start, desc=f"{c.algorithm} {c.dataset}", disable=not progress,
                  file=sys.stderr, dynamic_ncols=True, leave=False) as bar, \
                tracked(self._logger, c, self.config_hash, self.store.dir, start,
                        lambda: self._summary(rows, status) if rows else {"status": status}) as log:
            for t in range(start, end):
                if self._stop is not None and self._stop.is_set():  # asked to stop: at this round boundary
                    if saved != t:
                        self._save(state, rows, "running")
                    raise RunInterrupted(self.store.dir, t, c.rounds)
                t0 = time.perf_counter()
                outcome = self.train_round(state, t)
                row, diverged = self._round_row(t, outcome, state, eval_set)
                row.update(cost_columns(row, rows[-1] if rows else None, outcome, self.algorithm.grad_evals_per_step))
                row["wall_seconds"] = time.perf_counter() - t0
                rows.append(row)
                log(t + 1, row)
                if not math.isnan(row["test_acc"]):
                    last_acc = row["test_acc"]
                bar.set_postfix(acc=f"{last_acc:.4f}", loss=f"{row['train_loss']:.3f}", refresh=False)
                bar.update(1)
                status = self._status(t, diverged, rows)
                if status != "running" or (t + 1) % c.checkpoint_every == 0 or t + 1 == end:
                    self._save(state, rows, status)
                    saved = t + 1
                if status != "running":
                    break
        if not rows:
            raise RuntimeError("no round was run")
        return self._result(rows, status, state.server)

    def eval_set(self) -> tuple[Tensor, Tensor]:
        """What a run is evaluated on: the test (or validation) set, or its class-balanced subsample
        of ``eval_subsample`` examples drawn with the run's seed."""
        c = self.config
        x_test, y_test = self.dataset.x_test, self.dataset.y_test
        if c.eval_subsample is not None and c.eval_subsample < x_test.shape[0]:
            keep = torch.as_tensor(balanced_subset(y_test.cpu().numpy(), c.eval_subsample, seed=c.seed,
                                                   purpose="eval"), device=x_test.device)
            x_test, y_test = x_test[keep], y_test[keep]
        return x_test, y_test

    def _round_row(self, t: int, outcome: RoundOutcome, state: TrainingState,
                   eval_set: tuple[Tensor, Tensor]) -> tuple[dict[str, Any], bool]:
        """Round t's metrics row (without ``wall_seconds``) and whether the run diverged in it.

        The global model is evaluated every ``eval_every`` rounds and after the last one, unless the
        round already diverged (a non-finite mean local loss or θ); a non-finite test loss diverges too.
        """
        c, alg, results, server = self.config, self.algorithm, outcome.results, state.server
        theta = alg.global_model(server)
        thetas_k = torch.stack([r.theta_final for r in results])
        train_loss = float(torch.stack([r.mean_loss for r in results]).mean())
        row: dict[str, Any] = {
            "round": t + 1,
            "lr": outcome.info.lr,
            "train_loss": train_loss,
            "test_acc": float("nan"),
            "test_loss": float("nan"),
            "flatness_distance": float(((thetas_k - theta) ** 2).sum(dim=1).mean()),
            "uplink_floats": sum(_numel(r.upload) for r in results),
            "downlink_floats": _numel(outcome.msg) * len(outcome.clients),
            "n_sampled": len(outcome.clients),
        }
        diverged = not (math.isfinite(train_loss) and bool(torch.isfinite(theta).all()))
        if not diverged and ((t + 1) % c.eval_every == 0 or t + 1 == c.rounds):
            row["test_acc"], row["test_loss"] = evaluate(self.model, theta, *eval_set)
            diverged = not math.isfinite(row["test_loss"])
        if self.client_eval is not None:  # every client's own split, at the rounds evaluated (its own model too)
            own = None if math.isnan(row["test_acc"]) else personal_models(alg, state)  # None: the global model
            row.update(self.client_eval.row(self.model, None if math.isnan(row["test_acc"]) else theta, own))
        row.update(alg.round_metrics(server))
        return row, diverged

    def _status(self, t: int, diverged: bool, rows: list[dict[str, Any]]) -> str:
        """The run's status after round t: diverged, collapsed or finished after the last round, else running."""
        if diverged:
            return "diverged"
        if t + 1 == self.config.rounds:
            return "collapsed" if self._collapsed(rows) else "finished"
        return "running"

    def _save(self, state: TrainingState, rows: list[dict[str, Any]], status: str) -> None:
        """Checkpoint (the record first), then the views derived from it; refused (CheckpointError) if
        the numeric code on disk changed since this process keyed the run: rounds trained since then
        may have run new code under the old key, so they are not saved and the run is not resumed."""
        now = code_changed()
        if now is not None:
            raise CheckpointError(
                f"the numeric-path code changed on disk while run {self.store.dir} was training (it was keyed "
                f"with code {code_digest()[:12]}, the files now give {now[:12]}); rounds since the last "
                "checkpoint are not saved. Run it again: with the new code it is a new run under a new key")
        states, record = checkpointed_client_states(state.client_states)  # on disk: made durable first
        self.store.write_checkpoint(Checkpoint(
            next_round=state.next_round, server=state.server, client_states=states, client_store=record, rows=rows,
            status=status, config_hash=self.config_hash, theta0=state.theta0, version=__version__))
        if isinstance(state.client_states, DiskClientStates) and record is not None:
            state.client_states.committed(record)
        self.store.write_views(rows, self._summary(rows, status))

    def _result(self, rows: list[dict[str, Any]], status: str, server: State) -> RunResult:
        return RunResult(self.config, pd.DataFrame(rows), self.algorithm.global_model(server).detach(), status,
                         self.store.dir, self._summary(rows, status), self.partition,
                         server={k: v.detach().cpu() for k, v in server.items()})

    def _config_info(self) -> dict[str, Any]:
        return config_record(self.config, {"hash": self.config_hash, "partition_fingerprint": self.partition.fingerprint,
                                           "dataset_digest": self.dataset.digest,
                                           "theta0_digest": self.theta0_digest,
                                           "fedlab_version": __version__,
                                           "partition_summary": self.partition.stats.summary()})

    def _collapsed(self, rows: list[dict[str, Any]]) -> bool:
        return is_collapsed([r["round"] for r in rows], [r["test_acc"] for r in rows], self.config.rounds,
                            self.dataset.n_classes)

    def _summary(self, rows: list[dict[str, Any]], status: str) -> dict[str, Any]:
        return run_summary(self, rows, status)


def run(config: Config | None = None, *, progress: bool = True, stop_after_rounds: int | None = None,
        dataset: Dataset | None = None, theta0: Tensor | None = None,
        stop: threading.Event | None = None, logger: Logger | str | None = None, **overrides: Any) -> RunResult:
    """Run one experiment (or load it from disk if finished, or resume it).

    ``fedlab.run(Config(...))`` or ``fedlab.run(algorithm="fedsam", rounds=20)``; ``dataset`` and
    ``theta0`` (your own data and start) as in :meth:`Simulation.build`. The result always carries the
    final model θ, trained, resumed, or loaded from its run directory under ``runs_dir`` (default:
    ``$FEDLAB_RUNS``, else ``./runs`` of the current working directory). ``stop``: see
    :meth:`Simulation.run`. ``logger``: ``"tensorboard"`` or a :class:`fedlab.tracking.Logger`.
    """
    config = Config(**overrides) if config is None else config.replace(**overrides) if overrides else config
    return Simulation.build(config, dataset, theta0).run(progress=progress, stop_after_rounds=stop_after_rounds,
                                                         stop=stop, logger=logger)
