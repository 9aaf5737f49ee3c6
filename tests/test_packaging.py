"""Packaging: our fedlab is the one imported, and conda and pip install the same pinned set."""
from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

import fedlab

REPO = Path(__file__).resolve().parent.parent


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_imported_fedlab_is_this_repository_not_the_pypi_namesake():
    assert Path(fedlab.__file__).resolve().parent == REPO / "fedlab"
    assert hasattr(fedlab, "FEDLAB_SAM_MARKER")
    meta = _pyproject()["project"]
    assert meta["name"] != "fedlab"  # the PyPI name belongs to an unrelated project
    assert meta["dynamic"] == ["version"]  # read from fedlab/_version.py (tests/test_citation.py)


def test_every_dependency_is_pinned():
    project = _pyproject()["project"]
    reqs = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    for req in reqs:
        assert re.fullmatch(r"[A-Za-z0-9_.\-]+(\[[A-Za-z0-9_,\-]+\])?==[0-9][0-9A-Za-z.]*", req), \
            f"unpinned requirement: {req}"
    names = {r.split("==")[0] for r in reqs}
    assert {"torch", "torchvision"} <= names
    pins = dict(r.split("==") for r in reqs)
    assert pins["torch"] == "2.14.1" and pins["torchvision"] == "0.29.1"


OPT_IN_EXTRAS = ("wandb", "mlflow")
"""Extras the environment leaves out: a tracker service's client, installed by the user of that service."""


def test_environment_yml_matches_pyproject():
    project = _pyproject()["project"]
    pip_pins = set(project["dependencies"])
    for name, extra in project["optional-dependencies"].items():
        pip_pins |= set(extra) if name not in OPT_IN_EXTRAS else set()
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    conda_pins = {p for p in pip_section if not p.startswith("-e")}
    assert conda_pins == pip_pins, (sorted(conda_pins ^ pip_pins))
    assert "-e ." in pip_section
    py = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python="))
    lo = project["requires-python"]
    assert py == "python=3.11" and ">=3.11" in lo


def test_cli_help_documents_every_config_field():
    import dataclasses

    out = subprocess.run([sys.executable, "-m", "fedlab", "run", "--help"], capture_output=True, text=True,
                         check=True).stdout
    for f in dataclasses.fields(fedlab.Config):
        if f.name in ("algorithm_params", "partition_params"):
            continue
        assert "--" + f.name.replace("_", "-") in out, f.name
    assert "--param" in out and "--partition-param" in out


def test_cli_rejects_bad_input_with_field_name(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "fedlab", "run", "--dataset", "digits", "--model", "cnn",
                           "--alpha", "-1", "--runs-dir", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "alpha" in proc.stderr


def test_cli_run_prints_summary(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "fedlab", "run", "--dataset", "digits", "--model", "mlp",
                           "--n-clients", "4", "--participation", "0.5", "--rounds", "2", "--local-steps", "2",
                           "--runs-dir", str(tmp_path), "--no-progress", "--algorithm", "fedsam",
                           "--param", "rho=0.05"], capture_output=True, text=True, check=True)
    assert "status    finished after 2/2 rounds" in proc.stdout
    assert re.search(r"accuracy  final 0\.\d{4}", proc.stdout)
