"""Notebooks 06, 08 and 10 state how their runs were made, and the claims' verdicts, from computed values (issue 41).

The contradictions of issue 41 item 6 were typed phrases that outlived the protocol they described: "partition fixed
per split" and "tuned per split" in notebook 10's caption (the rerun draws a partition per seed and tunes once), and
"unpaired intervals … inconclusive" in notebook 06 (the claims table is paired and classes FedSWA's claim as not
tested). These tests catch the class: a rule phrase or a verdict typed into a string literal of these notebooks, a
final accuracy read past :func:`lab.evidence.protocol.final_metric`, and a committed verdict line that disagrees with
the claims table.
"""
from __future__ import annotations

import ast
import csv
import json
from pathlib import Path

import pytest

from lab.evidence.facts import DRAWN_PER_SEED, FIXED_PER_SPLIT, TUNED_PER_SPLIT
from lab.repro import FIGURES_DIR, REPO_ROOT

NOTEBOOKS = ("06_fedswa_fedmoswa", "08_fedvssam", "10_benchmarks")  # the ones issue 41 item 6 names for this check
# phrases that state a rule or a reading; they may appear in prose only as computed values (lab.evidence.facts, the
# claims machinery), never typed into a string the notebook prints or saves
RULE_PHRASES = (FIXED_PER_SPLIT, DRAWN_PER_SEED, TUNED_PER_SPLIT, "partition fixed", "unpaired interval")


def _strings(source: str) -> list[tuple[int, str]]:
    """Every string constant of the notebook's code (f-string parts included), with its line."""
    return [(n.lineno, n.value) for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)]


@pytest.mark.parametrize("stem", NOTEBOOKS)
def test_no_rule_or_reading_is_typed_into_a_string(stem):
    source = (REPO_ROOT / "notebooks" / f"{stem}.py").read_text()
    typed = [(line, p) for line, text in _strings(source) for p in RULE_PHRASES if p in text.lower()]
    assert not typed, f"{stem}: typed rule phrase(s) {typed}; compute them (lab.evidence.facts, lab.evidence.claims)"


def test_the_check_finds_a_typed_phrase():
    """The check above can fail: the caption issue 41 found is caught."""
    caption = 'caption = f"tuned per split (mean ± 95 % interval, {n} seed(s), partition fixed per split)"'
    assert {p for _, text in _strings(caption) for p in RULE_PHRASES if p in text.lower()} == {
        TUNED_PER_SPLIT, FIXED_PER_SPLIT, "partition fixed"}


@pytest.mark.parametrize("stem", NOTEBOOKS)
def test_no_final_accuracy_is_read_past_final_metric(stem):
    tree = ast.parse((REPO_ROOT / "notebooks" / f"{stem}.py").read_text())
    reads = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "final_accuracy"]
    assert not reads, f"{stem}: .final_accuracy at line(s) {reads}; read lab.evidence.protocol.final_metric(run)"


def _cpu_lessons(stem: str) -> dict:
    """The ``cpu_lessons: {...}`` line of the committed notebook's outputs."""
    nb = json.loads((REPO_ROOT / "notebooks" / f"{stem}.ipynb").read_text())
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            for line in "".join(out.get("text", [])).splitlines():
                if line.startswith("cpu_lessons: "):
                    return json.loads(line.removeprefix("cpu_lessons: "))
    raise AssertionError(f"{stem}: no cpu_lessons line in the committed outputs")


def _table_verdict(claim_id: str) -> str:
    with (FIGURES_DIR / "claims_cpu.csv").open() as fh:
        verdicts = {r["paired_verdict"] for r in csv.DictReader(fh) if r["id"] == claim_id}
    assert len(verdicts) == 1, (claim_id, verdicts)
    return verdicts.pop()


@pytest.mark.parametrize(("section", "claim_id"), [("fedswa_vs_fedsam", "fedswa_above_fedsam_high_het"),
                                                   ("ablation", "fedswa_paper_best_cell")])
def test_notebook_06_quotes_the_claims_tables_verdict(section, claim_id):
    """The verdict 06's paragraphs print (committed outputs) is the committed claims table's paired verdict."""
    assert _cpu_lessons("06_fedswa_fedmoswa")[section]["claims_verdict"] == _table_verdict(claim_id)


def test_the_forest_is_not_labelled_as_training_nothing():
    meta = json.loads((FIGURES_DIR / "claims_forest.json").read_text())
    assert meta["kind"] == "claims" and meta["records"], "the forest names the records it reads"
    assert Path(FIGURES_DIR / "README.md").read_text().count("claims_forest") >= 1
