"""Experiment tracking (fedlab.tracking): event files read back, a resumed run continues its log, loggers
change no number and no key, the sweep and the command line hand their runs to a logger, runs are named by
what they are (run_name), and the W&B and MLflow adapters call their libraries as documented (a stand-in
module records the calls: neither library is a dependency) or name their extra when it is missing."""
from __future__ import annotations

import json
import math
import re
import sys
import types
from pathlib import Path

import pandas as pd
import pytest
import torch

import fedlab
from fedlab import ConfigError
from fedlab.tracking import Logger, MLflowLogger, TensorBoardLogger, WandbLogger, run_name
import faults

pytest.importorskip("tensorboard", reason="the [track] extra (tensorboard) is not installed")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402


def _events(folder: Path) -> EventAccumulator:
    acc = EventAccumulator(str(folder))
    acc.Reload()
    return acc


def _scalars(acc: EventAccumulator, tag: str) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def _text(acc: EventAccumulator, tag: str) -> list[tuple[int, str]]:
    return [(e.step, e.tensor_proto.string_val[0].decode()) for e in acc.Tensors(f"{tag}/text_summary")]


def test_tensorboard_events_hold_every_round_the_config_and_the_summary(tiny):
    res = fedlab.run(tiny(algorithm="fedsam"), progress=False, logger="tensorboard")
    acc = _events(res.run_dir.parent / "tensorboard" / run_name(res.config))
    m = res.metrics
    steps = _scalars(acc, "train_loss")
    assert [s for s, _ in steps] == [1, 2, 3, 4]
    assert [v for _, v in steps] == pytest.approx(m["train_loss"].tolist(), rel=1e-6)
    evaluated = m.dropna(subset=["test_acc"])
    assert _scalars(acc, "test_acc_pct") == [(r, pytest.approx(100 * a, rel=1e-6))
                                             for r, a in zip(evaluated["round"], evaluated["test_acc"])]
    assert [v for _, v in _scalars(acc, "cum_grad_evals")] == m["cum_grad_evals"].tolist()
    (step, config), = _text(acc, "config")
    assert step == 0 and json.loads(config)["run_key"] == res.run_dir.name.split("-", 1)[1]
    (step, summary), = _text(acc, "summary")
    assert step == 4 and json.loads(summary)["status"] == "finished"


def test_a_resumed_run_continues_the_same_log_without_repeating_a_round(tiny, tmp_path):
    cfg = tiny(rounds=6, checkpoint_every=2, eval_every=1)

    def crash(point: str, rounds_done: int) -> None:  # dies after logging round 4, before checkpointing it
        if point == "before_checkpoint" and rounds_done == 4:
            raise RuntimeError("killed")

    with faults.injected(crash), pytest.raises(RuntimeError, match="killed"):
        fedlab.run(cfg, progress=False, logger="tensorboard")
    folder = Path(cfg.runs_dir) / "tensorboard" / run_name(cfg)
    assert [s for s, _ in _scalars(_events(folder), "train_loss")] == [1, 2, 3, 4]  # 3 and 4 not checkpointed
    res = fedlab.run(cfg, progress=False, logger="tensorboard")  # resumes from round 2
    assert len(list(folder.iterdir())) == 2  # the same folder, a second event file
    acc = _events(folder)
    for tag in ("train_loss", "test_acc_pct", "cum_uplink_floats"):
        assert [s for s, _ in _scalars(acc, tag)] == [1, 2, 3, 4, 5, 6], tag
    assert [v for _, v in _scalars(acc, "train_loss")] == pytest.approx(res.metrics["train_loss"].tolist(), rel=1e-6)
    assert [s for s, _ in _text(acc, "config")] == [0, 2]  # each session's start
    # TensorBoard purges scalars, not texts: the killed session's own summary stays, saying it did not finish
    assert [(s, json.loads(t)["status"]) for s, t in _text(acc, "summary")] == [(4, "running"), (6, "finished")]
    # and a finished run loaded from the store trains nothing, so it logs nothing more
    fedlab.run(cfg, progress=False, logger="tensorboard")
    assert len(list(folder.iterdir())) == 2


class Recorder:
    """A logger that keeps every call (the protocol a W&B or MLflow adapter implements)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def start(self, config, run_key, run_dir, rounds_done):
        self.calls.append(("start", config.algorithm, run_key, Path(run_dir), rounds_done))

    def log(self, round, metrics):
        self.calls.append(("log", round, dict(metrics)))

    def finish(self, summary):
        self.calls.append(("finish", summary["status"]))


def test_a_logger_sees_each_trained_round_once_and_changes_no_number_or_key(tiny, tmp_path):
    plain = fedlab.run(tiny(runs_dir=str(tmp_path / "plain")), progress=False)
    rec = Recorder()
    assert isinstance(rec, Logger)
    cfg = tiny(runs_dir=str(tmp_path / "logged"))
    part = fedlab.run(cfg, progress=False, stop_after_rounds=2, logger=rec)
    logged = fedlab.run(cfg, progress=False, logger=rec)
    assert logged.run_dir.name == plain.run_dir.name  # not in the key
    assert torch.equal(logged.theta, plain.theta)
    numbers = [c for c in plain.metrics.columns if c != "wall_seconds"]
    pd.testing.assert_frame_equal(logged.metrics[numbers], plain.metrics[numbers])
    key = part.run_dir.name.split("-", 1)[1]
    assert [c[0] for c in rec.calls] == ["start", "log", "log", "finish", "start", "log", "log", "finish"]
    assert rec.calls[0] == ("start", "fedavg", key, part.run_dir, 0)
    assert rec.calls[4] == ("start", "fedavg", key, part.run_dir, 2)
    assert [c[1] for c in rec.calls if c[0] == "log"] == [1, 2, 3, 4]
    assert [c for c in rec.calls if c[0] == "finish"] == [("finish", "running"), ("finish", "finished")]
    rows = [c[2] for c in rec.calls if c[0] == "log"]
    pd.testing.assert_frame_equal(pd.DataFrame(rows)[numbers], plain.metrics[numbers])


def test_bad_logger_or_missing_extra_is_refused_before_anything_is_written(tiny, monkeypatch):
    cfg = tiny()
    with pytest.raises(ConfigError, match="logger"):
        fedlab.run(cfg, progress=False, logger="visdom")
    with pytest.raises(ConfigError, match="logger"):
        fedlab.sweep.sweep(cfg, {"lr": [0.05]}, [0], backend="sequential", progress=False, logger=3)
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as without the [track] extra
    with pytest.raises(ImportError, match=r"fedlab-sam\[track\]"):
        fedlab.run(cfg, progress=False, logger="tensorboard")
    assert not Path(cfg.runs_dir).exists()


def test_sweep_and_command_line_log_their_runs(tiny, tmp_path):
    base = tiny(rounds=2)
    res = fedlab.sweep.sweep(base, {"algorithm": ["fedavg", "scaffold"]}, [0], backend="sequential",
                             progress=False, logger=TensorBoardLogger(tmp_path / "tb"))
    for r in res:
        acc = _events(tmp_path / "tb" / run_name(r.config))
        assert [s for s, _ in _scalars(acc, "train_loss")] == [1, 2]
    from fedlab.cli import main

    runs = tmp_path / "cli"
    assert main(["run", "--dataset", "digits", "--model", "mlp", "--n-clients", "4", "--rounds", "2",
                 "--local-steps", "2", "--runs-dir", str(runs), "--no-progress", "--log", "tensorboard"]) == 0
    (folder,) = (runs / "tensorboard").iterdir()  # named by what the run is, not by its key
    assert folder.name == "fedavg-dir0.1-digits-mlp-n_clients4-rounds2-local_steps2-s0"
    assert [s for s, _ in _scalars(_events(folder), "train_loss")] == [1, 2]


@pytest.mark.parametrize("overrides, name", [
    ({"algorithm": "fedsam", "algorithm_params": {"rho": 0.05}}, "fedsam-rho0.05-dir0.1-s0"),
    ({}, "fedavg-dir0.1-s0"),  # every default: the method, its split and its seed
    ({"partition": "iid", "rounds": 20, "seed": 3, "clip_norm": None, "client_eval": True},
     "fedavg-iid-rounds20-no_clip_norm-client_eval-s3"),
    ({"partition": "pathological", "classes_per_client": 2, "name": "mine"}, "mine-path2-s0"),
    # fields that change no number (runs_dir, checkpoint_every, client_threads) are not part of the name
    ({"runs_dir": "/tmp/elsewhere", "checkpoint_every": 3, "client_threads": 2, "seed": 1}, "fedavg-dir0.1-s1"),
])
def test_run_name_is_the_method_the_settings_away_from_the_defaults_and_the_seed(overrides, name):
    assert run_name(fedlab.Config(**overrides)) == name


def test_runs_of_a_grid_get_distinct_names(tiny):
    configs = fedlab.sweep.expand_grid(tiny(), {"algorithm": ["fedavg", "fedsam"], "lr": [0.05, 0.1]}, [0, 1])
    names = [run_name(c) for c in configs]
    assert len(set(names)) == len(configs) == 8
    assert all(re.fullmatch(r"[\w.+=-]+", n) and not re.search(r"[0-9a-f]{12}", n) for n in names)


class _Stub(types.ModuleType):
    """A stand-in for a tracker's module: every call is kept in ``calls`` as (name, args, kwargs)."""

    def __init__(self, name: str, returns: dict | None = None) -> None:
        super().__init__(name)
        self.calls: list[tuple[str, tuple, dict]] = []
        self.returns = returns or {}

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)

        def call(*args, **kwargs):
            self.calls.append((attr, args, kwargs))
            return self.returns.get(attr)
        return call


def test_wandb_names_the_run_keys_its_id_and_logs_each_round_offline(tiny, monkeypatch):
    run = _Stub("wandb.run")
    run.summary = {}
    wandb = _Stub("wandb", {"init": run})
    monkeypatch.setitem(sys.modules, "wandb", wandb)
    res = fedlab.run(tiny(algorithm="fedsam"), progress=False, logger="wandb")
    ((_, _, init),) = [c for c in wandb.calls if c[0] == "init"]
    key = res.run_dir.name.split("-", 1)[1]
    assert init["name"] == run_name(res.config) and init["group"] == run_name(res.config).rsplit("-s0", 1)[0]
    assert (init["id"], init["mode"], init["resume"], init["dir"]) == (key, "offline", "allow", str(res.run_dir))
    logs = [c for c in run.calls if c[0] == "log"]
    assert [c[2]["step"] for c in logs] == [1, 2, 3, 4]
    assert all(math.isfinite(v) for c in logs for v in c[1][0].values()) and "round" not in logs[0][1][0]
    assert logs[1][1][0]["test_acc"] == res.metrics["test_acc"].iloc[1] and "test_acc" not in logs[0][1][0]
    assert run.summary["status"] == "finished" and [c[0] for c in run.calls][-1] == "finish"


def test_mlflow_names_the_run_tags_its_key_and_stores_it_beside_the_runs(tiny, monkeypatch):
    mlflow = _Stub("mlflow", {"search_runs": []})
    monkeypatch.setitem(sys.modules, "mlflow", mlflow)
    res = fedlab.run(tiny(), progress=False, logger="mlflow")
    calls = {name: (args, kwargs) for name, args, kwargs in mlflow.calls}
    key = res.run_dir.name.split("-", 1)[1]
    assert calls["set_tracking_uri"][0] == ((res.run_dir.parent / "mlruns").resolve().as_uri(),)
    assert calls["start_run"][1] == {"run_id": None, "run_name": run_name(res.config), "tags": {"fedlab.run_key": key}}
    assert [kw["step"] for name, _, kw in mlflow.calls if name == "log_metrics"] == [1, 2, 3, 4]
    assert calls["log_params"][0] == (res.config.to_dict(),) and calls["end_run"][0] == ("FINISHED",)


@pytest.mark.parametrize("logger, extra", [(WandbLogger, "wandb"), (MLflowLogger, "mlflow")])
def test_a_missing_tracker_names_its_extra_before_anything_is_written(tiny, monkeypatch, logger, extra):
    monkeypatch.setitem(sys.modules, extra, None)  # as without the extra
    with pytest.raises(ImportError, match=rf'pip install "fedlab-sam\[{extra}\]"'):
        logger()
    cfg = tiny()
    with pytest.raises(ImportError, match=rf"fedlab-sam\[{extra}\]"):
        fedlab.run(cfg, progress=False, logger=extra)
    assert not Path(cfg.runs_dir).exists()
