"""Messages that once misled (issue 46, item 4): each names the field, what it holds and what is allowed.

Before: ``seeds=[True, 1]`` was "seed 1 listed twice" (``True == 1``); ``--parallel-clients abc`` was
"invalid _int_or_auto value"; a sweep's log named ``Config.hash()`` of the fields alone while its run
folder is named by the run key (which also covers the data and the split); a record whose summary names
another hash read "holds run K, not K". And the README's cluster example must call what exists.
"""
from __future__ import annotations

import gzip
import inspect
import json
import re
from pathlib import Path

import pytest

import fedlab
from fedlab.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.parametrize("seeds, bad", [([True, 1], "True"), ([0, False], "False"), ([1.5], "1.5"), ([-1], "-1")])
def test_a_seed_that_is_not_an_integer_is_named_as_such(tiny, seeds, bad):
    with pytest.raises(fedlab.ConfigError) as err:
        fedlab.sweep.expand_grid(tiny(), {}, seeds)
    text = str(err.value)
    assert f"{bad} is not a seed" in text and "allowed: a non-empty list of integers ≥ 0" in text
    assert "twice" not in text


def test_parallel_clients_on_the_command_line_names_what_is_allowed(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["run", "--parallel-clients", "abc"])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2
    assert "--parallel-clients: 'abc' is invalid; allowed: an integer ≥ 1 or 'auto'" in line, line
    assert "_int_or_auto" not in line


def test_num_cpus_zero_names_the_flag_and_the_range(capsys):
    pytest.importorskip("flwr")
    assert main(["flower-sim", "--num-cpus", "0"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "num_cpus=0 is invalid; allowed: an integer from 1 (--num-cpus)" in line, line


def test_a_sweeps_log_names_the_key_of_its_run_folder(tiny):
    (res,) = fedlab.sweep.sweep(tiny(rounds=1), {"lr": [0.05]}, [0], backend="sequential", progress=False)
    from fedlab.sweep.runs import log_path

    text = log_path(res.config).read_text(encoding="utf-8")
    key = res.run_dir.name.split("-", 1)[1]
    assert f"== run key {key}: {res.run_dir}" in text
    named = set(re.findall(r"\b[0-9a-f]{12}\b", text))  # every 12-hex hash the log prints is the folder's
    assert named == {key}, named


def test_a_record_naming_another_hash_says_which_field_does(tiny, tmp_path):
    from lab.evidence.records import RecordError, load_record, record_path, write_record

    res = fedlab.run(tiny(rounds=1), progress=False)
    path = write_record(res, tmp_path)
    payload = json.loads(gzip.decompress(path.read_bytes()))
    payload["summary"]["config_hash"] = "0" * 12
    path.write_bytes(gzip.compress(json.dumps(payload).encode()))
    with pytest.raises(RecordError) as err:
        load_record(res.run_dir.name, tmp_path, config=res.config)
    text = str(err.value)
    assert f"summary.config_hash names 'fedavg-{'0' * 12}'" in text and "config.hash" not in text.split("but")[1]
    assert f"filed as {res.run_dir.name!r}" in text and "refusing to mix runs" in text
    assert record_path(res.run_dir.name, tmp_path) == path


def test_the_readmes_calls_exist_with_the_keywords_they_pass():
    """Every ``fedlab.a.b(...)`` the README shows resolves to a callable that takes its keywords."""
    calls = re.findall(r"`(fedlab(?:\.\w+)+)\(([^`]*)\)`", README.read_text(encoding="utf-8"))
    assert any(name == "fedlab.sweep.sweep" for name, _ in calls)  # the cluster example is among them
    for name, args in calls:
        target = fedlab
        for part in name.split(".")[1:]:
            target = getattr(target, part)
        assert callable(target), f"README calls {name}(...), which is a {type(target).__name__}"
        params = inspect.signature(target).parameters
        for keyword in re.findall(r"(\w+)=", args):
            assert keyword in params, f"README passes {keyword}= to {name}, which has no such parameter"
