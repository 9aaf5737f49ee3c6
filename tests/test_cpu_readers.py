"""The readers of ``lab.lessons``: the paragraphs that read the committed cpu figures, behind ``cpu.show``.

The numbers themselves are recomputed another way by ``tests/test_cpu_lessons*.py`` from the line each notebook
prints; here: that line is what the readers give *today* from the committed files (a notebook executed before
its figure was re-made fails), that every reader is shown by its notebook and no notebook computes a lesson of
its own where a reader exists, and how a reader reports data that no longer says what its paragraph states.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from _cpu_lessons import line, same
from lab import lessons
from lab.lessons import Context, Lesson, NotebookEvidence, cpu_report, reads, reader_of
from lab.repro import FIGURES_DIR

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(lessons._MODULES)


def _readers(notebook: str) -> dict[str, lessons.Reader]:
    reader_of("", notebook)
    return {fig: fn for fig, fn in lessons._READERS.items() if fn.__module__ == lessons._MODULES[notebook]}


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_the_committed_line_is_what_the_readers_give_today(notebook):
    evidence = cpu_report(notebook)
    for figure in _readers(notebook):
        result = evidence.lesson(figure)
        assert result is not None and result.text.strip()
        same(line(notebook)[result.key], json.loads(json.dumps(result.numbers)), f"{notebook}: {figure}")


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_reader_is_shown_once_by_its_notebook_which_computes_no_lesson_itself(notebook):
    source = (ROOT / "notebooks" / f"{notebook}.py").read_text()
    # cpu.show (the figure and its paragraph) or cpu.read (the paragraph under a figure drawn the same at every
    # size); an f-string name (10's claim arms, named by the split the section picks) matches as a pattern
    shown = [re.escape(name).replace(r"\{", "{").replace(r"\}", "}") for name in
             re.findall(r'cpu\.(?:show|read)\(f?"([^"]+)"\)', source)]
    shown = [re.sub(r"\{[^}]*\}", ".+", name) for name in shown]
    readers = _readers(notebook)
    assert readers, f"{notebook} has no readers"
    for figure in readers:
        hits = sum(bool(re.fullmatch(name, figure)) for name in shown)
        assert hits == 1, f"{notebook} shows {figure} {hits} times"
        assert (FIGURES_DIR / f"{figure}.json").is_file(), f"{figure}: no committed figure to read"
    assert "cpu.summary()" in source and "cpu_lessons" not in source, \
        f"{notebook} writes its own cpu_lessons: its readers and summary live in {lessons._MODULES[notebook]}"


def test_a_reader_whose_data_no_longer_holds_names_its_figure(tmp_path):
    figures = tmp_path / "figures"
    shutil.copytree(FIGURES_DIR, figures, ignore=shutil.ignore_patterns("*.pdf", "*.png", "_scratch"))
    evidence = cpu_report("03_friendly_adversary", figures)
    csv = figures / "03_friendly_pairs.csv"
    rows = csv.read_text().splitlines()
    header = rows[0].split(",")
    col = header.index("loss_change")
    # every cross-client pair made unfriendly: "a large share of cross-client pairs is friendly" no longer holds
    rows = [rows[0]] + [",".join(f[:col] + ["1.0"] + f[col + 1:]) if "other client" in r else r
                        for r in rows[1:] for f in [r.split(",")]]
    csv.write_text("\n".join(rows) + "\n")
    with pytest.raises(AssertionError, match="03_friendly_pairs: the committed data no longer says"):
        evidence.lesson("03_friendly_pairs")


def test_registering_a_second_reader_for_a_figure_is_refused():
    reader_of("", "08_fedvssam")
    with pytest.raises(ValueError, match="two readers"):
        reads("08_fedvssam_ablation")(lambda ctx: Lesson("x", {}, ""))


def test_the_context_gives_the_earlier_lessons_and_a_figure_without_reader_shows_no_lesson():
    evidence: NotebookEvidence = cpu_report("03_friendly_adversary")
    assert evidence.lesson("03_not_a_figure") is None and evidence.lessons == {}
    first = evidence.lesson("03_decomposition")
    seen = {}

    def probe(ctx: Context) -> Lesson:
        seen.update(ctx.earlier)
        return Lesson("probe", {}, "")

    lessons._READERS["03_probe"] = probe
    try:
        evidence.lesson("03_probe")
    finally:
        del lessons._READERS["03_probe"]
    assert seen == {first.key: first.numbers}
    assert evidence.line().startswith("cpu_lessons: ") and json.loads(evidence.line().split(": ", 1)[1])["probe"] == {}


def test_a_run_that_remakes_the_figures_reads_every_lesson_at_the_end(capsys):
    """At the profile whose figures are committed the notebook replaces each figure after the section's top has
    shown it: the lessons wait for the summary, which reads them from the figures as they are then."""
    evidence = cpu_report("03_friendly_adversary", remaking=True)
    evidence.show("03_decomposition")
    assert evidence.lessons == {}, "no lesson read from a figure this run is about to replace"
    evidence.summary()
    printed = capsys.readouterr().out
    assert set(evidence.lessons) == {"decomposition", "pairs", "rates", "near_minimum", "fedsam_trajectory"}
    assert printed.strip().splitlines()[-1] == evidence.line()
    same(line("03_friendly_adversary"), json.loads(evidence.line().split(": ", 1)[1]), "03 at the end of a remaking run")
