"""The lab builds as a wheel holding every one of its subpackages and their pre-registered designs
(issue 44: the wheel had no lab.regime, yet ten notebooks import it)."""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAB = REPO / "lab"


def test_the_lab_wheel_holds_every_subpackage_and_design(tmp_path: Path) -> None:
    import shutil

    # built from a copy: setuptools writes build/ and *.egg-info beside the sources
    source = tmp_path / "lab"
    shutil.copytree(LAB, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path / "dist"), str(source)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    wheel = next((tmp_path / "dist").glob("fedlab_lab-*.whl"))
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
