"""Renumbered notebooks (``lab.repro.RENAMED_NOTEBOOKS``): the new files exist, the old names are left only
where history keeps them, and everything that reads a figure's sidecar finds today's notebook."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from lab.evidence.report import cpu_figures, cpu_report
from lab.repro import FIGURES_DIR, RENAMED_NOTEBOOKS, REPO_ROOT, notebook_now

HISTORY = ("CHANGELOG.md", "lab/repro.py", "figures/README.md", "tests/test_renamed_notebooks.py")
"""Files that name an old notebook on purpose: the release notes, the map itself, the figure index (which says
"made as <old>") and this test; the committed sidecars and records (provenance) are also left as made."""


def _sidecars() -> list[tuple[Path, dict]]:
    out = []
    for path in sorted(FIGURES_DIR.glob("*.json")):
        meta = json.loads(path.read_text())
        if "figure" in meta and str(meta.get("notebook", "")).startswith("notebooks/"):
            out.append((path, meta))
    return out


def test_the_map_names_files_that_moved():
    assert RENAMED_NOTEBOOKS, "nothing is renamed: this file would test nothing"
    for old, new in RENAMED_NOTEBOOKS.items():
        for suffix in (".py", ".ipynb"):
            assert (REPO_ROOT / "notebooks" / f"{new}{suffix}").is_file(), f"{new}{suffix} is missing"
            assert not (REPO_ROOT / "notebooks" / f"{old}{suffix}").exists(), f"{old}{suffix} is still there"
        assert not list((REPO_ROOT / "notebooks" / "params").glob(f"{old}.*")), f"params of {old} not renamed"
        assert new not in RENAMED_NOTEBOOKS, f"{new} is renamed again: map {old} straight to the last name"


def test_changelog_lists_every_rename():
    text = (REPO_ROOT / "CHANGELOG.md").read_text()
    for old, new in RENAMED_NOTEBOOKS.items():
        assert f"`{old}` → `{new}`" in text, f"CHANGELOG.md does not list {old} → {new}"


def test_notebook_now_reads_paths_and_stems():
    old, new = next(iter(RENAMED_NOTEBOOKS.items()))
    assert notebook_now(f"notebooks/{old}.ipynb") == new
    assert notebook_now(old) == new
    assert notebook_now("notebooks/04_sam_baselines.ipynb") == "04_sam_baselines"


def test_every_sidecar_names_a_notebook_that_exists_today():
    sidecars = _sidecars()
    assert sidecars
    for path, meta in sidecars:
        stem = notebook_now(meta["notebook"])
        assert (REPO_ROOT / "notebooks" / f"{stem}.ipynb").is_file(), f"{path.name}: no notebook {stem}"


def test_a_renamed_notebooks_figures_are_its_own():
    """cpu_report of today's name finds exactly the cpu figures its sidecars say the old name made."""
    for old, new in RENAMED_NOTEBOOKS.items():
        made = {meta["figure"] for _, meta in _sidecars()
                if Path(meta["notebook"]).stem == old and meta.get("profile") == "cpu"}
        assert made, f"no committed cpu figure of {old}: the resolution is not exercised"
        assert {f.name for f in cpu_report(new).figures} == made
        assert {f.name for f in cpu_figures(new)} == made  # the same list, without reading the claims


def test_the_figure_index_names_todays_notebook():
    index = (FIGURES_DIR / "README.md").read_text()
    for old, new in RENAMED_NOTEBOOKS.items():
        rows = [line for line in index.splitlines() if f"notebooks/{old}.ipynb" in line]
        assert not rows, f"figures/README.md still points at {old}: remake it with lab.tools.figures.write_figure_index()"
        assert f"(made as `{old}`)" in index


@pytest.mark.skipif(subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse"], capture_output=True).returncode,
                    reason="not a git checkout")
def test_no_file_points_at_an_old_name():
    tracked = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files"], capture_output=True, text=True,
                             check=True).stdout.split()
    pattern = re.compile("|".join(re.escape(old) for old in RENAMED_NOTEBOOKS))
    stale = []
    for name in tracked:
        if name in HISTORY or name.startswith("figures/records/") or (
                name.startswith("figures/") and name.count("/") == 1 and name.endswith((".json", ".pdf", ".png"))):
            continue
        path = REPO_ROOT / name
        if not path.is_file() or path.suffix in (".png", ".pdf", ".gz", ".pt"):
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        if pattern.search(text):
            stale.append(name)
    assert not stale, f"these files still name a renamed notebook by its old name: {stale}"
