"""The round loop: sample → broadcast → local work → upload → aggregate → evaluate → checkpoint.

``run(config)`` is the entry point. It returns a finished run from disk without recomputing,
resumes an unfinished one from its checkpoint, and otherwise starts from round 0. Every random
choice draws from a generator derived from (seed, purpose, round, client), and every piece of state
(server, clients) lives in the checkpoint, so a resumed run is bit-identical to an uninterrupted one.
"""
from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor
from tqdm import tqdm

from fedlab import __version__
from fedlab.algorithms import Algorithm, RoundInfo, State, get_algorithm
from fedlab.config import Config, ConfigError
from fedlab.data import Dataset, balanced_subset, load_dataset
from fedlab.data.partition import Partition, make_partition
from fedlab.engine.batches import epoch_batches, fixed_step_batches
from fedlab.engine.clients import ClientJob, ClientResult, LocalData, run_clients_sequential
from fedlab.engine.evaluate import evaluate
from fedlab.engine.malloc import stable_malloc
from fedlab.engine.sampling import load_schedule, sample_clients
from fedlab.engine.schedule import learning_rate
from fedlab.models import FlatModel, build_model
from fedlab.repro import REPO_ROOT, torch_generator
from fedlab.results import RunResult, RunStore


def _numel(state: State) -> int:
    return sum(int(v.numel()) for v in state.values())


@lru_cache(maxsize=8)
def _cached_dataset(name: str, device: str, train_size: int | None, test_size: int | None, seed: int,
                    as_cifar_shape: bool) -> Dataset:
    return load_dataset(name, device=device, train_size=train_size, test_size=test_size, seed=seed,
                        as_cifar_shape=as_cifar_shape)


def build_dataset(config: Config) -> Dataset:
    """The config's dataset on its device (cached in-process: notebooks run many configs on one)."""
    # Subsets are drawn with seed 0 unless the config asks for per-seed data: the data a method
    # trains on should not change with the training seed.
    return _cached_dataset(config.dataset, config.device, config.train_size, config.test_size, 0,
                           config.as_cifar_shape)


def build_partition(config: Config, dataset: Dataset) -> Partition:
    labels = dataset.y_train.cpu().numpy()
    try:
        if config.partition == "natural":
            if dataset.natural_clients is None:
                raise ValueError("this dataset has no natural clients")
            if len(dataset.natural_clients) != config.n_clients:
                raise ValueError(f"n_clients={config.n_clients} must equal the dataset's "
                                 f"{len(dataset.natural_clients)} natural clients")
            return Partition(client_indices=tuple(np.asarray(c, dtype=np.int64) for c in dataset.natural_clients),
                             scheme="natural", params={}, n_classes=dataset.n_classes, labels=labels)
        params: dict[str, Any] = dict(config.partition_params)
        return make_partition(config.partition, labels, config.n_clients, seed=config.seed,
                              alpha=config.alpha, classes_per_client=config.classes_per_client,
                              shards_per_client=config.shards_per_client, **params)
    except (ValueError, TypeError) as err:
        raise ConfigError(f"partition: {err}") from None


@dataclass
class TrainingState:
    """Everything that evolves during a run (and is checkpointed): server and client states."""

    server: State
    client_states: dict[int, State]
    theta0: Tensor  # the initial global model (stateful methods initialise client state from it)
    next_round: int = 0


@dataclass
class RoundOutcome:
    clients: np.ndarray
    info: RoundInfo
    msg: State
    results: list[ClientResult]


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
    # parallel_clients="auto": the chunk measured in the first round, reused for the whole run
    chunk_choice: Any = field(default=None, init=False, repr=False)

    @classmethod
    def build(cls, config: Config, dataset: Dataset | None = None) -> "Simulation":
        if config.device == "cpu":
            stable_malloc()  # evaluation time must not depend on the allocator's history (engine/malloc.py)
        dataset = dataset if dataset is not None else build_dataset(config)
        partition = build_partition(config, dataset)
        module = build_model(config.model, dataset.input_shape, dataset.n_classes, seed=config.seed)
        model = FlatModel(module.to(config.device), channels_last=config.channels_last, amp=config.amp)
        algorithm = get_algorithm(config.algorithm, config.algorithm_params)
        root = Path(config.runs_dir) if config.runs_dir else REPO_ROOT / "runs"
        store = RunStore.for_config(config, partition.fingerprint, root)
        return cls(config, dataset, partition, model, algorithm, store,
                   config.hash(partition.fingerprint))

    # -----------------------------------------------------------------------------------------
    def initial_state(self) -> TrainingState:
        theta0 = self.model.theta0()
        return TrainingState(self.algorithm.server_init(theta0), {}, theta0, 0)

    def state_from_checkpoint(self, ckpt: dict[str, Any]) -> TrainingState:
        dev = torch.device(self.config.device)
        return TrainingState(
            server={k: v.to(dev) for k, v in ckpt["server"].items()},
            client_states={int(i): {k: v.to(dev) for k, v in s.items()} for i, s in ckpt["clients"].items()},
            theta0=ckpt["theta0"].to(dev),
            next_round=int(ckpt["next_round"]),
        )

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
        return LocalData(self.dataset.x_train, self.dataset.y_train, self.augment_kind,
                         dict(padding=c.crop_padding, flip_p=c.flip_prob, crop_p=c.crop_prob))

    @cached_property
    def schedule(self) -> list[list[int]] | None:
        c = self.config
        return load_schedule(c.schedule_path, c.n_clients, c.rounds) if c.sampling == "schedule" else None

    def sample(self, t: int) -> np.ndarray:
        """The ids of the clients taking part in round t."""
        c = self.config
        return sample_clients(t, c.n_clients, c.participation, seed=c.seed, mode=c.sampling,
                              schedule=self.schedule)

    def train_round(self, state: TrainingState, t: int, clients: np.ndarray | None = None) -> RoundOutcome:
        """Round t: broadcast, local work of the sampled (or given) clients, upload, aggregate.

        Updates ``state`` in place (server, client states, next round) and returns what happened.
        """
        alg = self.algorithm
        clients = self.sample(t) if clients is None else clients
        info = self.round_info(t, len(clients))
        msg = alg.broadcast(state.server, info)
        states = [state.client_states.get(i) or alg.client_init(state.theta0) for i in clients.tolist()]
        jobs = self.client_jobs(t, clients, self.client_indices)
        results = self.run_clients(msg, jobs, states, self.local_data, info)
        uploads = {k: torch.stack([r.upload[k] for r in results]) for k in results[0].upload}
        state.server = alg.aggregate(state.server, uploads, info)
        for r in results:
            if r.state:
                state.client_states[r.client] = r.state
        state.next_round = t + 1
        return RoundOutcome(clients, info, msg, results)

    def round_info(self, t: int, m: int) -> RoundInfo:
        c = self.config
        lr = learning_rate(t, c.lr, c.lr_schedule, c.rounds, c.lr_decay)
        prev = learning_rate(t - 1, c.lr, c.lr_schedule, c.rounds, c.lr_decay) if t > 0 else lr
        # epoch mode without a nominal K: E·⌈n̄/B⌉ for the mean client size n̄ (the K of a balanced split)
        k = c.local_steps if c.local_steps is not None else \
            c.local_epochs * math.ceil(self.dataset.x_train.shape[0] / c.n_clients / c.batch_size)
        return RoundInfo(round=t, lr=lr, prev_lr=prev, local_steps=k, n_clients=c.n_clients,
                         n_sampled=m, weight_decay=c.weight_decay, clip_norm=c.clip_norm)

    def client_jobs(self, t: int, clients: np.ndarray, client_idx: list[Tensor]) -> list[ClientJob]:
        c = self.config
        dev = self.dataset.x_train.device
        jobs = []
        for i in clients.tolist():
            gen = torch_generator(c.seed, "batches", t, i, device="cpu")
            if c.local_epochs is None:
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
        if self.config.client_threads > 1:
            from fedlab.engine.threads import run_clients_threaded

            return run_clients_threaded(self.algorithm, msg, jobs, states, data,
                                        [m.autograd_grad_fn for m in self.thread_models], info)
        chunk = self.config.parallel_clients
        if chunk == "auto":
            from fedlab.engine.vectorised import choose_chunk

            if self.chunk_choice is None:
                self.chunk_choice = choose_chunk(self.algorithm, msg, jobs, states, data, model.grad_fn,
                                                 info, budget_mb=self.config.memory_budget_mb,
                                                 sequential_grad_fn=model.autograd_grad_fn)
            chunk = self.chunk_choice.chunk
        if chunk > 1:
            from fedlab.engine.vectorised import run_clients_vectorised

            return run_clients_vectorised(self.algorithm, msg, jobs, states, data, model.grad_fn,
                                          info, chunk=chunk)
        return run_clients_sequential(self.algorithm, msg, jobs, states, data, model.autograd_grad_fn, info)

    # -----------------------------------------------------------------------------------------
    def run(self, *, progress: bool = True, stop_after_rounds: int | None = None) -> RunResult:
        """Train (or resume, or load) this run; ``stop_after_rounds`` simulates an interruption."""
        c, alg, store = self.config, self.algorithm, self.store
        summary = store.read_summary()
        if summary and summary.get("status") in ("finished", "diverged"):
            ckpt = store.load_checkpoint(self.config_hash)
            if ckpt is not None:
                theta = alg.global_model(ckpt["server"])
                return RunResult(c, store.read_metrics(), theta, summary["status"], store.dir, summary,
                                 self.partition)

        ckpt = store.load_checkpoint(self.config_hash)
        if ckpt is None:
            state = self.initial_state()
            rows: list[dict[str, Any]] = []
            store.write_config(c, {"hash": self.config_hash, "partition_fingerprint": self.partition.fingerprint,
                                   "fedlab_version": __version__,
                                   "partition_summary": self.partition.stats.summary()})
        else:
            state = self.state_from_checkpoint(ckpt)
            rows = list(ckpt["rows"])
        start = state.next_round

        x_test, y_test = self.dataset.x_test, self.dataset.y_test
        if c.eval_subsample is not None and c.eval_subsample < x_test.shape[0]:
            keep = torch.as_tensor(balanced_subset(y_test.cpu().numpy(), c.eval_subsample, seed=c.seed,
                                                   purpose="eval"), device=x_test.device)
            x_test, y_test = x_test[keep], y_test[keep]

        status = "running"
        end = c.rounds if stop_after_rounds is None else min(c.rounds, start + stop_after_rounds)
        bar = tqdm(total=c.rounds, initial=start, desc=f"{c.algorithm} {c.dataset}", disable=not progress,
                   file=sys.stderr, dynamic_ncols=True, leave=False)
        last_acc = next((r["test_acc"] for r in reversed(rows) if not math.isnan(r["test_acc"])), float("nan"))
        for t in range(start, end):
            t0 = time.perf_counter()
            outcome = self.train_round(state, t)
            clients, info, msg, results = outcome.clients, outcome.info, outcome.msg, outcome.results
            server = state.server
            theta = alg.global_model(server)
            thetas_k = torch.stack([r.theta_final for r in results])
            train_loss = float(torch.stack([r.mean_loss for r in results]).mean())
            row: dict[str, Any] = {
                "round": t + 1,
                "lr": info.lr,
                "train_loss": train_loss,
                "test_acc": float("nan"),
                "test_loss": float("nan"),
                "flatness_distance": float(((thetas_k - theta) ** 2).sum(dim=1).mean()),
                "uplink_floats": sum(_numel(r.upload) for r in results),
                "downlink_floats": _numel(msg) * len(clients),
                "n_sampled": len(clients),
            }
            diverged = not (math.isfinite(train_loss) and bool(torch.isfinite(theta).all()))
            if not diverged and ((t + 1) % c.eval_every == 0 or t + 1 == c.rounds):
                acc, loss = evaluate(self.model, theta, x_test, y_test)
                row["test_acc"], row["test_loss"] = acc, loss
                last_acc = acc
                diverged = not math.isfinite(loss)
            row.update(alg.round_metrics(server))
            row["wall_seconds"] = time.perf_counter() - t0
            rows.append(row)
            bar.set_postfix(acc=f"{last_acc:.4f}", loss=f"{train_loss:.3f}", refresh=False)
            bar.update(1)
            if diverged:
                status = "diverged"
            elif t + 1 == c.rounds:
                status = "finished"
            boundary = status != "running" or (t + 1) % c.checkpoint_every == 0 or t + 1 == end
            if boundary:
                ckpt_obj = {"next_round": t + 1, "server": {k: v.detach().cpu() for k, v in server.items()},
                            "clients": {str(i): {k: v.detach().cpu() for k, v in s.items()}
                                        for i, s in sorted(state.client_states.items())},
                            "rows": rows, "config_hash": self.config_hash, "theta0": state.theta0.cpu(),
                            "version": __version__}
                store.write_checkpoint(ckpt_obj)
                store.write_progress(rows, self._summary(rows, status))
            if status != "running":
                break
        bar.close()
        if not rows:
            raise RuntimeError("no round was run")
        return RunResult(c, pd.DataFrame(rows), alg.global_model(state.server).detach(), status, store.dir,
                         self._summary(rows, status), self.partition)

    def _summary(self, rows: list[dict[str, Any]], status: str) -> dict[str, Any]:
        accs = [r["test_acc"] for r in rows if not math.isnan(r["test_acc"])]
        return {
            "status": status,
            "algorithm": self.config.algorithm,
            "dataset": self.config.dataset,
            "rounds_done": len(rows),
            "rounds": self.config.rounds,
            "final_test_acc": accs[-1] if accs else None,
            "best_test_acc": max(accs) if accs else None,
            "final_train_loss": rows[-1]["train_loss"] if math.isfinite(rows[-1]["train_loss"]) else None,
            "mean_round_seconds": float(np.mean([r["wall_seconds"] for r in rows])),
            "uplink_floats_total": int(sum(r["uplink_floats"] for r in rows)),
            "config_hash": self.config_hash,
            "partition_fingerprint": self.partition.fingerprint,
            "fedlab_version": __version__,
        }


def run(config: Config | None = None, *, progress: bool = True, stop_after_rounds: int | None = None,
        dataset: Dataset | None = None, **overrides: Any) -> RunResult:
    """Run one experiment (or load it from disk if finished, or resume it).

    ``fedlab.run(Config(...))`` or ``fedlab.run(algorithm="fedsam", rounds=20)``.
    """
    config = (config or Config()).replace(**overrides) if overrides else (config or Config())
    return Simulation.build(config, dataset).run(progress=progress, stop_after_rounds=stop_after_rounds)
