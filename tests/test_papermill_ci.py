"""The checks of CI's papermill step (notebooks/book/execute.py) on small constructed notebooks."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("fedlab_book_execute", REPO / "notebooks" / "book" / "execute.py")
execute = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(execute)

CHECK = "# NBVAL_CHECK_OUTPUT\nprint(acc, acc > base)"


def _notebook(printed: str, seed: int | None = None, error: bool = False) -> nbformat.NotebookNode:
    params = new_code_cell("seed = 0  # seed", execution_count=1)
    params.metadata["tags"] = ["parameters"]
    check = new_code_cell(CHECK, execution_count=2, outputs=[new_output("stream", name="stdout", text=printed)])
    if error:
        check.outputs.append(new_output("error", ename="ValueError", evalue="bad", traceback=[]))
    cells = [new_markdown_cell("# title"), params, check]
    if seed is not None:
        injected = new_code_cell(f"# Parameters\nseed = {seed}\n", execution_count=2)
        injected.metadata["tags"] = ["injected-parameters"]
        cells.insert(2, injected)
        for i, c in enumerate(c for c in cells if c.cell_type == "code"):
            c.execution_count = i + 1
    return new_notebook(cells=cells)


COMMITTED = _notebook("accuracy 0.8123 (FedAvg 0.7012) True\n")


def test_other_numbers_same_statements_pass():
    assert execute.check_outputs(COMMITTED, _notebook("accuracy 0.7901 (FedAvg 0.69)  True\n", seed=1),
                                 {"seed": 1}) == []


def test_a_flipped_boolean_fails():
    problems = execute.check_outputs(COMMITTED, _notebook("accuracy 0.79 (FedAvg 0.80) False\n", seed=1), {"seed": 1})
    assert len(problems) == 1 and "other statements" in problems[0]


def test_missing_output_error_output_and_missing_override_fail():
    assert any("printed nothing" in p for p in
               execute.check_outputs(COMMITTED, _notebook("", seed=1), {"seed": 1}))
    assert any("raised ValueError" in p for p in
               execute.check_outputs(COMMITTED, _notebook("accuracy 0.8 (FedAvg 0.7) True\n", seed=1, error=True),
                                     {"seed": 1}))
    assert any("does not set seed = 1" in p for p in
               execute.check_outputs(COMMITTED, _notebook("accuracy 0.8 (FedAvg 0.7) True\n", seed=2), {"seed": 1}))
    assert any("did not inject" in p for p in
               execute.check_outputs(COMMITTED, _notebook("accuracy 0.8 (FedAvg 0.7) True\n"), {"seed": 1}))


def test_edited_cells_are_reported():
    edited = _notebook("accuracy 0.8 (FedAvg 0.7) True\n", seed=1)
    edited.cells[-1].source += "\nprint('more')"
    assert execute.check_outputs(COMMITTED, edited, {"seed": 1}) == [
        "executed cells differ from the committed notebook's cells"]


def test_mask_numbers_keeps_words_and_booleans():
    assert execute.mask_numbers("rate 12.5% of 1,000 at 1e-3:  True") == "rate # of # at #: True"
