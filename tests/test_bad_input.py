"""One table of bad inputs, each rejected over the API and the CLI (issue 12).

Every case must raise a fedlab error (``ConfigError``/``ValueError``) whose message names the field
or the file, before anything is written (the runs_dir stays absent); on the command line the same
input gives exit code 2 and one ``error:`` line naming it, no traceback.
``cli`` says how the case is spelled on the command line: ``True`` derives the options from the
overrides, a list gives them explicitly, ``None`` marks an input the CLI cannot express (a Python
type) — those are API-only.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import torch

import fedlab
from fedlab.cli import main

BASE: dict[str, Any] = dict(dataset="digits", model="cnn", n_clients=8, participation=0.5, rounds=3, local_steps=2,
                            batch_size=16, lr=0.05, alpha=0.5, eval_every=1, checkpoint_every=1)
NO_GPU = "cuda" if not torch.cuda.is_available() else f"cuda:{torch.cuda.device_count()}"


class Case(NamedTuple):
    id: str
    overrides: dict[str, Any]
    names: str  # what the message must contain (a field, a flag's field, or a file name)
    cli: bool | list[str] | None = True


S = "{tmp}"  # replaced by the test's folder of prepared files
CASES = [
    # --- names from a fixed set
    Case("dataset", {"dataset": "mnist"}, "dataset"),
    Case("model", {"model": "vgg"}, "model"),
    Case("partition", {"partition": "random"}, "partition"),
    Case("sampling", {"sampling": "all"}, "sampling"),
    Case("lr_schedule", {"lr_schedule": "step"}, "lr_schedule"),
    Case("algorithm", {"algorithm": "fedfoo"}, "algorithm"),
    Case("natural_needs_synthetic", {"partition": "natural"}, "partition"),
    # --- hyperparameters
    Case("rho_string", {"algorithm": "fedsam", "algorithm_params": {"rho": "abc"}}, "rho"),
    Case("rho_none", {"algorithm": "fedsam", "algorithm_params": {"rho": None}}, "rho"),
    Case("rho_bool", {"algorithm": "fedsam", "algorithm_params": {"rho": True}}, "rho"),
    Case("rho_negative", {"algorithm": "fedsam", "algorithm_params": {"rho": -1}}, "rho"),
    Case("mu_string", {"algorithm": "fedprox", "algorithm_params": {"mu": "x"}}, "mu"),
    Case("unknown_hparam", {"algorithm": "fedavg", "algorithm_params": {"rho": 0.1}}, "rho"),
    Case("unknown_preset", {"algorithm": "fedsam", "algorithm_params": {"preset": "nope"}}, "preset"),
    Case("params_as_string", {"algorithm_params": "rho=1"}, "algorithm_params", None),
    Case("param_without_value", {}, "--param", ["--param", "rho"]),
    # --- numbers (bools are not numbers)
    Case("participation_bool", {"participation": True}, "participation"),
    Case("participation_zero", {"participation": 0}, "participation"),
    Case("participation_above_one", {"participation": 1.5}, "participation"),
    Case("participation_string", {"participation": "0.1"}, "participation", ["--participation", "ten"]),
    Case("weight_decay_inf", {"weight_decay": math.inf}, "weight_decay"),
    Case("weight_decay_negative", {"weight_decay": -1.0}, "weight_decay"),
    Case("lr_zero", {"lr": 0.0}, "lr"),
    Case("lr_nan", {"lr": math.nan}, "lr"),
    Case("lr_bool", {"lr": True}, "lr"),
    Case("lr_decay_above_one", {"lr_decay": 1.5}, "lr_decay"),
    Case("clip_norm_bool", {"clip_norm": True}, "clip_norm", None),
    Case("alpha_zero", {"alpha": 0.0}, "alpha"),
    Case("alpha_bool", {"alpha": True}, "alpha"),
    Case("alpha_none", {"alpha": None}, "alpha", None),
    Case("n_clients_zero", {"n_clients": 0}, "n_clients"),
    Case("n_clients_bool", {"n_clients": True}, "n_clients"),
    Case("rounds_fraction", {"rounds": 2.5}, "rounds"),
    Case("local_steps_zero", {"local_steps": 0}, "local_steps"),
    Case("batch_size_negative", {"batch_size": -3}, "batch_size"),
    Case("eval_every_zero", {"eval_every": 0}, "eval_every"),
    Case("seed_negative", {"seed": -1}, "seed"),
    Case("seed_bool", {"seed": True}, "seed", None),
    Case("train_size_zero", {"train_size": 0}, "train_size"),
    Case("memory_budget_negative", {"memory_budget_mb": -5.0}, "memory_budget_mb"),
    Case("parallel_clients_zero", {"parallel_clients": 0}, "parallel_clients"),
    Case("parallel_clients_word", {"parallel_clients": "fast"}, "parallel_clients"),
    Case("client_threads_zero", {"client_threads": 0}, "client_threads"),
    Case("threads_and_vmap", {"client_threads": 2, "parallel_clients": 2}, "client_threads"),
    Case("epochs_and_steps", {"local_epochs": 1}, "local_epochs"),  # BASE sets local_steps=2
    Case("epochs_and_vmap", {"local_epochs": 1, "local_steps": None, "parallel_clients": 2}, "parallel_clients",
         None),
    Case("classes_per_client_missing", {"partition": "pathological"}, "classes_per_client"),
    Case("classes_per_client_bool", {"partition": "pathological", "classes_per_client": True},
         "classes_per_client", None),
    Case("amp_string", {"amp": "yes"}, "amp", None),
    Case("augment_string", {"augment": "yes"}, "augment", None),
    Case("abbreviated_option", {}, "--alp", ["--alp", "0.5"]),
    Case("rounds_word", {}, "--rounds", ["--rounds", "abc"]),
    # --- devices
    Case("device_cudafoo", {"device": "cudafoo"}, "device"),
    Case("device_cuda_abc", {"device": "cuda:abc"}, "device"),
    Case("device_unavailable", {"device": NO_GPU}, "device"),
    Case("device_tpu", {"device": "tpu"}, "device"),
    Case("device_int", {"device": 1}, "device", None),
    # --- partition files and parameters
    Case("partition_file_no_path", {"partition": "file"}, "partition_params"),
    Case("partition_file_missing", {"partition": "file", "partition_params": {"path": f"{S}/missing.json"}},
         "missing.json"),
    Case("partition_file_not_json", {"partition": "file", "partition_params": {"path": f"{S}/not_json.txt"}},
         "not_json.txt"),
    Case("partition_file_wrong_n", {"partition": "file", "partition_params": {"path": f"{S}/split3.json"}},
         "split3.json"),
    Case("partition_file_bool_index", {"partition": "file", "partition_params": {"path": f"{S}/split_bool.json"}},
         "split_bool.json"),
    Case("partition_unknown_param", {"partition_params": {"foo": 1}}, "foo"),
    Case("partition_min_size_string", {"partition_params": {"min_size": "x"}}, "min_size"),
    # --- client schedules and sampling
    Case("schedule_no_path", {"sampling": "schedule"}, "schedule_path"),
    Case("schedule_missing", {"sampling": "schedule", "schedule_path": f"{S}/missing.json"}, "missing.json"),
    Case("schedule_not_json", {"sampling": "schedule", "schedule_path": f"{S}/not_json.txt"}, "not_json.txt"),
    Case("schedule_not_a_list", {"sampling": "schedule", "schedule_path": f"{S}/sched_dict.json"}, "sched_dict.json"),
    Case("schedule_too_short", {"sampling": "schedule", "schedule_path": f"{S}/sched_short.json"}, "sched_short.json"),
    Case("schedule_true_id", {"sampling": "schedule", "schedule_path": f"{S}/sched_true.json"}, "sched_true.json"),
    Case("schedule_out_of_range", {"sampling": "schedule", "schedule_path": f"{S}/sched_range.json"},
         "sched_range.json"),
    Case("schedule_empty_round", {"sampling": "schedule", "schedule_path": f"{S}/sched_empty.json"},
         "sched_empty.json"),
    Case("bernoulli_infeasible", {"sampling": "bernoulli", "participation": 1e-9}, "participation"),
    # --- where results go
    Case("runs_dir_is_a_file", {"runs_dir": f"{S}/a_file"}, "runs_dir"),
    Case("runs_dir_under_a_file", {"runs_dir": f"{S}/a_file/runs"}, "runs_dir"),
]


def _prepare(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "not_json.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00garbage")
    (folder / "split3.json").write_text(json.dumps([[0, 1], [2, 3], [4, 5]]))  # 3 clients, config has 8
    (folder / "split_bool.json").write_text(json.dumps([[0, True]] + [[i] for i in range(2, 9)]))
    (folder / "sched_dict.json").write_text(json.dumps({"0": [1, 2]}))
    (folder / "sched_short.json").write_text(json.dumps([[0, 1], [2, 3]]))
    (folder / "sched_true.json").write_text("[[0, true], [1, 2], [3]]")
    (folder / "sched_range.json").write_text(json.dumps([[0, 8], [1], [2]]))
    (folder / "sched_empty.json").write_text(json.dumps([[0], [], [2]]))
    (folder / "a_file").write_text("not a folder")


def _fill(value: Any, folder: Path) -> Any:
    if isinstance(value, str):
        return value.replace(S, str(folder))
    if isinstance(value, dict):
        return {k: _fill(v, folder) for k, v in value.items()}
    return value


def _cli_args(overrides: dict[str, Any]) -> list[str]:
    args: list[str] = []
    for key, value in overrides.items():
        if key in ("algorithm_params", "partition_params"):
            flag = "--param" if key == "algorithm_params" else "--partition-param"
            for k, v in value.items():
                args += [flag, f"{k}={v if isinstance(v, str) else json.dumps(v)}"]
        else:
            args += ["--" + key.replace("_", "-"), str(value)]
    return args


@pytest.fixture
def prepared(tmp_path):
    folder = tmp_path / "files"
    _prepare(folder)
    return folder


def _expected(case: Case, folder: Path) -> tuple[dict[str, Any], str, Path, dict[str, bytes]]:
    overrides = _fill(case.overrides, folder)
    runs = Path(overrides.get("runs_dir", folder.parent / "runs"))
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    return overrides, _fill(case.names, folder), runs, before


def _nothing_written(folder: Path, runs: Path, before: dict[str, bytes]) -> None:
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    if not runs.is_relative_to(folder):
        assert not runs.exists(), f"{runs} was created"


API_CASES = [c for c in CASES if not (isinstance(c.cli, list) and not c.overrides)]
CLI_CASES = [c for c in CASES if c.cli is not None]


def test_the_table_is_large_enough():
    assert len(CASES) >= 40 and len({c.id for c in CASES}) == len(CASES)
    assert len(API_CASES) >= 40 and len(CLI_CASES) >= 40


@pytest.mark.parametrize("case", API_CASES, ids=[c.id for c in API_CASES])
def test_api_rejects(case, prepared):
    overrides, names, runs, before = _expected(case, prepared)
    values = {**BASE, "runs_dir": str(prepared.parent / "runs"), **overrides}
    with pytest.raises(ValueError) as err:  # ConfigError is a ValueError
        fedlab.run(fedlab.Config(**values), progress=False)
    assert names in str(err.value)
    _nothing_written(prepared, runs, before)


@pytest.mark.parametrize("case", CLI_CASES, ids=[c.id for c in CLI_CASES])
def test_cli_rejects_in_one_line(case, prepared, capsys):
    overrides, names, runs, before = _expected(case, prepared)
    base = {**BASE, **({"runs_dir": str(prepared.parent / "runs")} if "runs_dir" not in overrides else {})}
    extra = [_fill(a, prepared) for a in case.cli] if isinstance(case.cli, list) else _cli_args(overrides)
    argv = ["run", *_cli_args(base), "--no-progress", *extra]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors (a malformed option value)
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    name = names.lstrip("-")
    assert name in lines[0] or name.replace("_", "-") in lines[0], lines[0]
    _nothing_written(prepared, runs, before)
