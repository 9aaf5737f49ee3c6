"""Provenance helpers: the git stamp of a figure (tools/repro) and the sidecar/index that save_figure
(tools/figures) writes."""
from __future__ import annotations

import json
import re
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


# --- the stamp a figure carries: sidecar, PNG and PDF metadata, and the refusal of a dirty tree ----
def _pdf_string(token: bytes) -> str:
    """A PDF string object: ``(literal)`` with backslash escapes, or ``<hex>`` (UTF-16BE with a BOM for
    text that is not ASCII, as matplotlib writes it)."""
    if token.startswith(b"<"):
        raw = bytes.fromhex(token[1:-1].decode())
        return raw[2:].decode("utf-16-be") if raw[:2] == b"\xfe\xff" else raw.decode("latin-1")
    body, out, i = token[1:-1], bytearray(), 0
    simple = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"b": b"\b", b"f": b"\f"}
    while i < len(body):
        c = body[i:i + 1]
        if c != b"\\":
            out += c
            i += 1
            continue
        nxt = body[i + 1:i + 2]
        octal = re.match(rb"[0-7]{1,3}", body[i + 1:i + 4])
        if octal:
            out.append(int(octal.group(), 8))
            i += 1 + len(octal.group())
        else:
            out += simple.get(nxt, nxt)
            i += 2
    raw = bytes(out)
    return raw[2:].decode("utf-16-be") if raw[:2] == b"\xfe\xff" else raw.decode("latin-1")


def pdf_info(path) -> dict[str, str]:
    """The string entries of a PDF's Info dictionary, read from the bytes (no PDF library needed):
    the trailer's ``/Info n 0 R`` names the object, whose ``/Key (value)`` pairs are parsed."""
    data = path.read_bytes()
    ref = re.findall(rb"/Info\s+(\d+)\s+0\s+R", data)
    assert ref, f"{path}: no /Info in the trailer"
    obj = re.search(rb"(?<!\d)" + ref[-1] + rb"\s+0\s+obj(.*?)endobj", data, flags=re.S).group(1)
    pairs = re.findall(rb"/(\w+)\s*(\((?:\\.|[^\\)])*\)|<[0-9A-Fa-f\s]*>)", obj, flags=re.S)
    return {k.decode(): _pdf_string(v) for k, v in pairs}


def _figure():
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    return fig


CAPTION = "FedSAM vs FedAvg (ρ = 0.05): accuracy in % (test set)"


def test_sidecar_png_and_pdf_carry_version_caption_and_commit(tmp_path):
    from PIL import Image

    from fedlab._version import __version__

    fig = _figure()
    paths = figures.save_figure(fig, "t_stamp", notebook="00_quickstart", profile="cpu", caption=CAPTION,
                                out_dir=tmp_path)
    plt.close(fig)
    commit = repro.git_commit()
    meta = json.loads(paths["json"].read_text())
    assert meta["version"] == __version__ and meta["git_commit"] == commit
    entry = figures.changelog_entry()
    assert meta["changelog"] == entry
    if figures.CHANGELOG.exists():  # the repository has one: the sidecar must point into it
        heading = entry.split("#", 1)[1]
        assert entry.startswith("CHANGELOG.md#") and heading.startswith(__version__.replace(".", ""))
    png = Image.open(paths["png"]).text
    assert png["Title"] == "t_stamp" and png["Description"] == CAPTION
    assert png["Software"] == f"fedlab {__version__}" and png["Source"] == f"git commit {commit}"
    info = pdf_info(paths["pdf"])
    assert info["Title"] == "t_stamp" and info["Subject"] == CAPTION
    assert info["Creator"] == f"fedlab {__version__}" and info["Keywords"] == f"git commit {commit}"
    assert "CreationDate" not in info and "Producer" not in info  # bytes depend on the figure, not the day


def test_changelog_entry_finds_the_version_heading(tmp_path):
    log = tmp_path / "CHANGELOG.md"
    log.write_text("# Changelog\n\n## 1.2.0 (2027-01-02)\n\n- x\n\n## [1.1.0] - 2026-05-01\n")
    assert figures.changelog_entry("1.2.0", log) == "CHANGELOG.md#120-2027-01-02"
    assert figures.changelog_entry("1.1.0", log) == "CHANGELOG.md#110---2026-05-01"
    assert figures.changelog_entry("1.0.0", log) is None
    assert figures.changelog_entry("1.2.0", tmp_path / "absent.md") is None


@pytest.mark.parametrize("stamp", ["0123abc+dirty", "unknown"])
def test_a_citable_figure_from_uncommitted_code_is_refused(tmp_path, monkeypatch, stamp):
    committed = tmp_path / "figures"
    monkeypatch.setattr(figures, "FIGURES_DIR", committed)
    monkeypatch.setattr(figures, "SCRATCH_DIR", committed / "_scratch")
    monkeypatch.setattr(repro, "SCRATCH_DIR", committed / "_scratch")
    monkeypatch.setattr(figures, "git_commit", lambda: stamp)
    monkeypatch.delenv(figures.ALLOW_DIRTY_ENV, raising=False)
    fig = _figure()
    with pytest.raises(figures.DirtyTreeError, match=figures.ALLOW_DIRTY_ENV):
        figures.save_figure(fig, "t_dirty", notebook="00_quickstart", profile="cpu", caption="c")
    assert not committed.exists()  # refused before anything was written
    # a sub-folder of the committed figures (the regime pilot's figures/regime/) is committed too
    with pytest.raises(figures.DirtyTreeError, match=figures.ALLOW_DIRTY_ENV):
        figures.save_figure(fig, "t_dirty", notebook="00_quickstart", profile="cpu", caption="c",
                            out_dir=committed / "regime")
    assert not committed.exists()
    # the ci profile writes to figures/_scratch/ (not committed): never refused
    ci = figures.save_figure(fig, "t_dirty", notebook="00_quickstart", profile="ci", caption="c")
    assert ci["png"].parent == committed / "_scratch"
    monkeypatch.setenv(figures.ALLOW_DIRTY_ENV, "1")  # development: allowed, and the stamp says so
    paths = figures.save_figure(fig, "t_dirty", notebook="00_quickstart", profile="cpu", caption="c")
    plt.close(fig)
    assert paths["png"].parent == committed
    assert json.loads(paths["json"].read_text())["git_commit"] == stamp
    assert pdf_info(paths["pdf"])["Keywords"] == f"git commit {stamp}"
