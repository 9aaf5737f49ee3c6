"""Provenance helpers: the git stamp of a figure (tools/repro) and the sidecar/index that save_figure
(tools/figures) writes."""
from __future__ import annotations

import json
import shutil
import subprocess

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from lab import repro
from lab.tools import figures  # noqa: E402

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


def _git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"})


@needs_git
def test_git_commit_ignores_figure_outputs_but_not_code(tmp_path):
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "README.md").write_text("index\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "init")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    assert repro.git_commit(tmp_path) == head
    (tmp_path / "figures" / "README.md").write_text("index, rewritten by a figure run\n")
    assert repro.git_commit(tmp_path) == head
    (tmp_path / "code.py").write_text("x = 2\n")
    assert repro.git_commit(tmp_path) == head + "+dirty"


def test_git_commit_outside_a_checkout(tmp_path):
    assert repro.git_commit(tmp_path) == "unknown" or shutil.which("git") is None


def test_save_figure_writes_png_pdf_and_provenance(tmp_path):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    paths = figures.save_figure(fig, "t_fig", notebook="notebooks/99_test.ipynb", profile="cpu",
                                caption="a test", parameters={"seed": 3, "alpha": 0.1},
                                config_hashes=["abc"], out_dir=tmp_path)
    plt.close(fig)
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert paths["pdf"].read_bytes()[:5] == b"%PDF-"
    meta = json.loads(paths["json"].read_text())
    assert meta["figure"] == "t_fig" and meta["seed"] == 3 and meta["config_hashes"] == ["abc"]
    assert meta["profile"] == "cpu" and "-f notebooks/params/99_test.cpu.yaml" in meta["command"]
    assert set(meta["packages"]) >= {"fedlab", "torch", "numpy"}
    index = figures.write_figure_index(tmp_path).read_text()
    assert "[t_fig](t_fig.png)" in index and "a test" in index
    with pytest.raises(ValueError, match="figure name"):
        figures.save_figure(fig, "Bad Name", notebook="x", profile="cpu", caption="", out_dir=tmp_path)


def _fedlab_imports(module) -> set[str]:
    """The fedlab and lab modules a module's source imports (anywhere in it, lazily or not)."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(("fedlab", "lab")):
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names if a.name.startswith(("fedlab", "lab"))}
    return names


def test_records_repro_and_figures_import_in_one_direction():
    from lab.evidence import records

    assert "lab.repro" in _fedlab_imports(records)
    assert not {"lab.evidence.records", "lab.tools.figures"} & _fedlab_imports(repro)
    assert "lab.tools.figures" not in _fedlab_imports(records)
    assert {"lab.repro", "lab.evidence.records"} <= _fedlab_imports(figures)


def test_every_method_has_its_own_colour_and_style():
    from fedlab.algorithms import algorithm_names
    from lab.tools.plots import method_style

    styles = [method_style(m) for m in algorithm_names()]
    colours = [s["color"] for s in styles]
    assert len(set(colours)) == len(colours)
    assert all(s["linestyle"] != ":" for s in styles)  # dotted means collapsed
