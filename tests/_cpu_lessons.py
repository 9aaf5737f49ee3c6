"""Helpers of the cpu-lesson tests (``tests/test_cpu_lessons*.py``): each notebook with cpu paragraphs prints their
numbers as one ``cpu_lessons: {...}`` line in its committed outputs; a test reads that line (:func:`line`) and
recomputes every number another way from ``figures/<name>.csv`` (:func:`rows`), then compares (:func:`same`)."""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import nbformat

from lab.repro import FIGURES_DIR

NB_DIR = Path(__file__).resolve().parent.parent / "notebooks"


def line(stem: str) -> dict:
    nb = nbformat.read(NB_DIR / f"{stem}.ipynb", as_version=4)
    lines = [line for c in nb.cells if c.cell_type == "code" for o in c.outputs
             if o.output_type == "stream" and o.name == "stdout" for line in o.text.splitlines()
             if line.startswith("cpu_lessons: ")]
    assert len(lines) == 1, f"{stem}: expected one 'cpu_lessons: ' line in the committed outputs, found {len(lines)}"
    return json.loads(lines[0].removeprefix("cpu_lessons: "))


def rows(name: str, panel: str | None = None) -> list[dict]:
    with open(FIGURES_DIR / f"{name}.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    return [r for r in table if panel is None or r.get("panel") == panel]


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-5)


def same(committed: dict, recomputed: dict, where: str) -> None:
    for key, value in recomputed.items():
        assert key in committed, f"{where}: the notebook's line has no {key!r}"
        if isinstance(value, dict):
            same(committed[key], value, f"{where}.{key}")
        elif isinstance(value, float):
            assert close(committed[key], value), f"{where}.{key}: notebook {committed[key]}, data {value}"
        else:
            assert committed[key] == value, f"{where}.{key}: notebook {committed[key]}, data {value}"


def f(row: dict, key: str) -> float:
    return float(row[key])


PRE_ISSUE_41_LAST = 5
"""The final metric the notebooks' committed outputs were executed with before issue 41: the mean of the last 5
rounds. Issue 41 made it the last 20 % of the rounds (:func:`lab.evidence.protocol.final_rounds`); a notebook's
committed line keeps the old window until the notebook is executed again."""


def final_window(k: int, rounds: int, where: str) -> int:
    """``k``, the number of last rounds a notebook's committed final accuracies average, checked: the current final
    metric's window over ``rounds`` rounds, or :data:`PRE_ISSUE_41_LAST` for outputs executed before issue 41."""
    from lab.evidence.protocol import final_rounds

    allowed = (len(final_rounds(rounds)), PRE_ISSUE_41_LAST)
    assert k in allowed, f"{where}: the notebook averages the last {k} rounds; the final metric's are {allowed}"
    return k


def stated_window(stem: str, rounds: int) -> int:
    """How many last rounds a notebook's committed outputs say the claims' final metric averages, in the words of
    the claims evaluator ("mean of the last 5 full-test evaluations" before issue 41, "mean of the last 20 % of
    rounds (rounds 81–100 of 100)" after), checked by :func:`final_window`."""
    import re

    text = (NB_DIR / f"{stem}.ipynb").read_text(encoding="utf-8")
    old = {int(k) for k in re.findall(r"mean of the last (\d+) full-test evaluations", text)}
    new = {int(b) - int(a) + 1 for a, b in re.findall(r"mean of the last [\d.]+ % of rounds \(rounds (\d+)–(\d+) of", text)}
    stated = old | new
    assert len(stated) == 1, f"{stem}: the outputs state {sorted(stated) or 'no'} final window(s)"
    return final_window(stated.pop(), rounds, stem)
