"""The lab builds as a wheel holding every one of its subpackages and their pre-registered designs
(issue 44: the wheel had no lab.regime, yet ten notebooks import it), and, unpacked ahead of the checkout in a fresh
interpreter, every module of it imports from the wheel and every file a module names inside its package is there."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAB = REPO / "lab"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The lab's wheel, built offline from a copy: setuptools writes build/ and *.egg-info beside the sources."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "lab"
    shutil.copytree(LAB, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp / "dist"), str(source)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return next((tmp / "dist").glob("fedlab_lab-*.whl"))


def test_the_lab_wheel_holds_every_subpackage_and_design(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    ours = [p for p in LAB.rglob("*") if not {"build", "__pycache__"} & set(p.relative_to(LAB).parts)
            and ".egg-info" not in p.as_posix()]
    packages = sorted(p.parent.relative_to(REPO).as_posix() for p in ours if p.name == "__init__.py")
    assert packages and all(f"{p}/__init__.py" in names for p in packages), \
        sorted(set(f"{p}/__init__.py" for p in packages) - names)
    designs = sorted(p.relative_to(REPO).as_posix() for p in ours if p.suffix == ".yaml")
    assert designs and all(d in names for d in designs), sorted(set(designs) - names)
    modules = sorted(p.relative_to(REPO).as_posix() for p in ours if p.suffix == ".py")
    assert set(modules) <= names, sorted(set(modules) - names)


# Run in a fresh interpreter with the unpacked wheel first on the path: a module that did not come from the wheel,
# and a file a module names inside its own package that the wheel lacks (the designs the pilot, the rerun and the
# protocol read by their paths), are reported; the checkout's figures/ and runs/ are outside the package.
CHECK = """
import importlib, pathlib, pkgutil, sys
site = pathlib.Path(sys.argv[1]).resolve()
import lab
modules = [lab] + [importlib.import_module(m.name) for m in pkgutil.walk_packages(lab.__path__, "lab.")]
bad = [f"{m.__name__} imported from {m.__file__}, not from the wheel" for m in modules
       if not pathlib.Path(m.__file__).resolve().is_relative_to(site)]
bad += [f"{m.__name__}.{name} names {value}, which the wheel lacks" for m in modules for name, value in vars(m).items()
        if isinstance(value, pathlib.Path) and value.suffix and value.resolve().is_relative_to(site / "lab")
        and not value.resolve().is_file()]
print("\\n".join(bad) or f"ok: {len(modules)} modules")
"""


def test_every_module_imports_from_the_unpacked_wheel(wheel: Path, tmp_path: Path) -> None:
    """A pure-Python wheel is a zip: unpacked, it is installed. The checkout comes second on the path, for the
    fedlab the lab imports (its own lab/ is shadowed by the wheel's)."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-c", CHECK, str(site)], cwd=tmp_path, env=env, capture_output=True,
                         text=True)
    assert run.returncode == 0 and run.stdout.startswith("ok: "), \
        f"the unpacked lab wheel:\n{run.stdout}\n{run.stderr[-3000:]}"
