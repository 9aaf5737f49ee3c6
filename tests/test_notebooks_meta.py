"""Notebook hygiene: pairing, parameters, kernelspec, normalised outputs, params files."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest
import yaml

NB_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("[0-9][0-9]*_*.ipynb"))
IDS = [p.stem for p in NOTEBOOKS]


def _read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def _parameter_names(nb: nbformat.NotebookNode) -> set[str]:
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    tree = ast.parse(cell.source)
    return {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
            if isinstance(t, ast.Name)}


def test_there_are_notebooks_with_unique_ordered_prefixes():
    """NN_slug, numbered 00, 01, ... without gaps; a lesson inserted later takes its predecessor's number and
    a letter (01b_slug sorts between 01_ and 02_) so that the notebooks after it keep their names."""
    assert NOTEBOOKS, "no notebooks found"
    prefixes = [p.name.split("_")[0] for p in NOTEBOOKS]
    assert all(re.fullmatch(r"\d\d[a-z]?", p) for p in prefixes), prefixes
    assert len(set(prefixes)) == len(prefixes)
    numbered = [p for p in prefixes if len(p) == 2]
    assert [int(p) for p in numbered] == list(range(len(numbered))), prefixes
    assert all(p[:2] in numbered for p in prefixes), f"a lettered notebook needs its numbered one: {prefixes}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_kernelspec_and_parameters_cell(path):
    nb = _read(path)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters'"
    first_code = next(c for c in nb.cells if c.cell_type == "code")
    assert first_code is tagged[0], "the parameters cell must be the first code cell"
    assert not any("injected-parameters" in c.metadata.get("tags", []) for c in nb.cells)
    # every knob is documented with a comment, and 'profile' says where figures go
    for line in tagged[0].source.splitlines():
        if re.match(r"^\w+\s*=", line):
            assert "#" in line, f"parameter without a comment: {line}"
    assert "profile" in _parameter_names(nb)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_paired_script_in_sync(path):
    script = path.with_suffix(".py")
    assert script.exists(), f"{script.name} missing (jupytext pairing)"
    from_py = jupytext.read(script)
    nb = _read(path)
    py_cells = [(c.cell_type, c.source.strip()) for c in from_py.cells]
    nb_cells = [(c.cell_type, c.source.strip()) for c in nb.cells]
    assert py_cells == nb_cells, "notebook and .py differ: run `python -m lab.tools.nbtools build NN`"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_committed_with_clean_outputs(path):
    nb = _read(path)
    assert "papermill" not in nb.metadata
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), "notebook not executed (ci outputs missing)"
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), "run top to bottom once"
    checked = 0
    for c in code:
        assert "papermill" not in c.metadata and "execution" not in c.metadata
        for out in c.outputs:
            assert out.output_type != "error", f"error output in {path.name}"
            if out.output_type == "stream" and out.name == "stderr":
                assert "Warning" not in out.text, f"warning in outputs of {path.name}: {out.text[:200]}"
            if out.output_type in ("execute_result",):
                text = out.data.get("text/plain", "")
                assert not re.search(r"<[\w.]+ object at 0x", text), "object repr in outputs"
        if "NBVAL_CHECK_OUTPUT" in c.source:
            checked += 1
            assert any(o.output_type == "stream" and o.name == "stdout" for o in c.outputs)
    assert checked >= 1, "at least one # NBVAL_CHECK_OUTPUT cell"
    proc = subprocess.run([sys.executable, "-m", "nbstripout", "--verify", "--keep-output", "--keep-count",
                           "--extra-keys", "metadata.papermill cell.metadata.papermill", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"not normalised: {proc.stdout}{proc.stderr}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
@pytest.mark.parametrize("profile", ["cpu", "paper"])
def test_params_files(path, profile):
    params = NB_DIR / "params" / f"{path.stem}.{profile}.yaml"
    assert params.exists(), f"missing {params.relative_to(NB_DIR.parent)}"
    values = yaml.safe_load(params.read_text())
    assert isinstance(values, dict) and values.get("profile") == profile
    unknown = set(values) - _parameter_names(_read(path))
    assert not unknown, f"{params.name} sets names the notebook does not have: {sorted(unknown)}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_papermill_understands_every_parameter(path):
    """`papermill --help-notebook` documents each knob; a comment containing '=' breaks its parser."""
    from papermill.translators import PythonTranslator

    nb = _read(path)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    parsed = {p.name for p in PythonTranslator.inspect(cell)}
    assert parsed == _parameter_names(nb), sorted(_parameter_names(nb) - parsed)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_every_notebook_links_the_notation_and_the_evidence_page_once(path):
    """The course issue: the notation page is linked from every notebook, and the infrastructure vocabulary lives
    on one book page that every notebook names once (in its opening cell, as a path: the book links it)."""
    cells = [c for c in _read(path).cells if c.cell_type == "markdown"]
    text = "\n".join(c.source for c in cells)
    for page in ("book/notation.md", "book/guide/running.md"):  # named as paths: the book turns them into links
        named = f"`notebooks/{page}`"
        assert text.count(named) == 1, f"{path.name} names {page} {text.count(named)} times"
        assert named in cells[0].source, f"{path.name}: {page} belongs in the opening cell"
        assert (NB_DIR / page).is_file()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_no_control_characters_in_the_source(path):
    """A tab or carriage return in a notebook's source is an escape that a generator did not mean (``"\\text"``
    written without a raw string becomes a tab and "ext"): 02's map formula rendered as "ext{final}" that way."""
    text = path.with_suffix(".py").read_text(encoding="utf-8")
    bad = sorted({repr(ch) for ch in text if ord(ch) < 32 and ch != "\n"})
    assert not bad, f"{path.with_suffix('.py').name} holds control characters {bad}"


def _lab_and_fedlab_imports(source: str) -> list[tuple[str, str]]:
    """(module, name) of every import of the lab or of fedlab in ``source`` (name '' for ``import module``)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("lab", "fedlab"):
            out += [(node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name, "") for a in node.names if a.name.split(".")[0] in ("lab", "fedlab")]
    return out


def _outside_the_course_api(source: str) -> list[str]:
    """Imports a notebook may not make: from the lab anything but :mod:`lab.course` (and a name it does not
    export), from fedlab a private module or name."""
    import lab.course

    bad = []
    for module, name in _lab_and_fedlab_imports(source):
        if module.split(".")[0] == "lab":
            if module != "lab.course" or (name and name not in lab.course.__all__):
                bad.append(f"{module}.{name}" if name else module)
        elif any(part.startswith("_") for part in [*module.split("."), name] if part):
            bad.append(f"{module}.{name}" if name else module)
    return bad


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebooks_import_only_fedlabs_public_api_and_the_course_module(path):
    """The course issue: a notebook imports the public API of fedlab and one evidence module, ``lab.course``."""
    source = "\n".join(c.source for c in _read(path).cells if c.cell_type == "code")
    source = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    assert not _outside_the_course_api(source), f"{path.name} imports {_outside_the_course_api(source)}"


def test_the_import_check_sees_what_it_forbids():
    assert _outside_the_course_api("from lab.tools.plots import draw_band") == ["lab.tools.plots.draw_band"]
    assert _outside_the_course_api("import lab.evidence") == ["lab.evidence"]
    assert _outside_the_course_api("from lab.course import no_such_helper") == ["lab.course.no_such_helper"]
    assert _outside_the_course_api("from fedlab._rng import torch_generator") == ["fedlab._rng.torch_generator"]
    assert _outside_the_course_api("from fedlab.engine import _private") == ["fedlab.engine._private"]
    assert not _outside_the_course_api("import fedlab\nfrom fedlab.toy import x\nfrom lab.course import draw_band\n"
                                       "import numpy as np")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_the_source_compiles_without_warnings(path):
    """An invalid escape (``"θ\\*"`` for a Markdown star) is a SyntaxWarning today and an error in a later Python."""
    import warnings

    text = path.with_suffix(".py").read_text(encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compile(text, str(path.with_suffix(".py")), "exec")
