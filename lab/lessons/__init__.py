"""What each committed cpu figure teaches: the paragraph that reads it, its numbers, and the checks on them.

A notebook section opens with its committed cpu figure, and one call shows it with its lesson::

    cpu = cpu_report("08_fedvssam")      # lab.course
    cpu.show("08_fedvssam_step_mse")     # the figure, its evidence line, the paragraph that reads it

The paragraph is written here, one function per figure (a *reader*, registered with :func:`reads`), from
committed files only — the figure's CSV and sidecar, the claims, the run records — so a notebook run at any
size says what the committed figure shows. A reader asserts every direction its paragraph states: a re-made
figure whose data no longer says what the text says fails at once instead of being misread. It returns its
numbers too; :meth:`NotebookEvidence.line` prints them all as the notebook's ``cpu_lessons: {...}`` line, which
``tests/test_cpu_lessons*.py`` read from the committed outputs and recompute another way.

The plumbing lives here so that the notebook keeps only the lesson: records, profiles and provenance are
behind ``show``.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from lab.evidence.report import CpuReport, committed_final_accuracy, committed_parameters, committed_table
from lab.evidence.report import cpu_report as _cpu_report
from lab.tools.lessons import lessons_line


@dataclass(frozen=True)
class Lesson:
    """A reader's result: ``numbers`` go to the ``cpu_lessons`` line under ``key``; ``text`` is the paragraph."""

    key: str
    numbers: dict[str, Any]
    text: str


@dataclass
class Context:
    """What a reader may use besides the committed files: the notebook's claims read by seed pairs (as its closing
    section shows them) and the numbers of the lessons shown before it in the same notebook."""

    report: CpuReport
    earlier: dict[str, dict[str, Any]]

    def table(self, name: str, panel: str | None = None) -> Any:
        """The committed data of figure ``name`` (its rows of ``panel``), as :func:`committed_table`."""
        return committed_table(name, panel, self.report.figures_dir)

    def seed_accuracies(self, name: str) -> Any:
        """Seeds × methods: the protocol's final accuracy (%) from figure ``name``'s per-seed curves, as
        :func:`committed_final_accuracy` (through ``final_metric``)."""
        return committed_final_accuracy(name, figures_dir=self.report.figures_dir)

    def parameters(self, name: str) -> dict[str, Any]:
        """The parameters the committed figure ``name`` was made with, as :func:`committed_parameters`."""
        return committed_parameters(name, self.report.figures_dir)


def paired_numbers(d: Any, scale: float = 1.0) -> dict[str, Any]:
    """A paired difference (:class:`lab.evidence.paired.PairedDifference`) as a paragraph quotes it: mean, 95 %
    interval, how many seeds are positive and how many are paired, each difference times ``scale``."""
    return {"mean": scale * d.mean, "low": scale * (d.mean - d.half_width), "high": scale * (d.mean + d.half_width),
            "positive": int(sum(v > 0 for v in d.values)), "n": d.n}


Reader = Callable[[Context], Lesson]
Summary = Callable[[dict[str, dict[str, Any]]], str]
_READERS: dict[str, Reader] = {}
_SUMMARIES: dict[str, Summary] = {}
# the module of each notebook's readers (imported when the notebook first shows a figure)
_MODULES = {"02_flatness_incompatibility": "lab.lessons.flatness", "03_friendly_adversary": "lab.lessons.friendly_adversary", "04_sam_baselines": "lab.lessons.baselines",
            "05_fedsmoo": "lab.lessons.fedsmoo",
            "06_fedswa_fedmoswa": "lab.lessons.swa",
            "07_fednsam": "lab.lessons.fednsam", "08_fedvssam": "lab.lessons.fedvssam",
            "09_sharpness_and_landscapes": "lab.lessons.sharpness", "10_benchmarks": "lab.lessons.benchmarks"}


def reads(figure: str) -> Callable[[Reader], Reader]:
    """Register the decorated function as the reader of the committed figure ``figure`` (one reader per figure)."""
    def register(fn: Reader) -> Reader:
        if figure in _READERS:
            raise ValueError(f"figure {figure!r} has two readers: {_READERS[figure].__qualname__} and "
                             f"{fn.__qualname__}")
        _READERS[figure] = fn
        return fn
    return register


def summarises(notebook: str) -> Callable[[Summary], Summary]:
    """Register the decorated function as ``notebook``'s closing summary: bullet points in Markdown, written from
    the numbers of the notebook's lessons (every figure shown before the summary)."""
    def register(fn: Summary) -> Summary:
        if notebook in _SUMMARIES:
            raise ValueError(f"notebook {notebook!r} has two summaries")
        _SUMMARIES[notebook] = fn
        return fn
    return register


def reader_of(figure: str, notebook: str) -> Reader | None:
    """The registered reader of ``figure`` (importing ``notebook``'s readers first), or None where the figure
    has no paragraph of its own."""
    if notebook in _MODULES:
        importlib.import_module(_MODULES[notebook])
    return _READERS.get(figure)


@dataclass
class NotebookEvidence:
    """A notebook's committed cpu evidence (:class:`~lab.evidence.report.CpuReport`) with its lessons."""

    report: CpuReport
    remaking: bool = False  # this run re-makes the committed figures: their lessons are read at the end
    lessons: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def verdicts(self) -> list[Any]:
        return self.report.verdicts

    def text(self) -> str:
        return self.report.text()

    def show_figures(self, skip: tuple[str, ...] = ()) -> None:
        self.report.show_figures(skip)

    def lesson(self, name: str) -> Lesson | None:
        """The lesson of the committed figure ``name`` (its numbers kept for :meth:`line`), computed from the
        committed files; None when ``name`` has no reader."""
        reader = reader_of(name, self.report.notebook)
        if reader is None:
            return None
        try:
            result = reader(Context(self.report, dict(self.lessons)))
        except AssertionError as err:  # the paragraph's checks name what no longer holds; say which figure
            raise AssertionError(f"{name}: the committed data no longer says what its paragraph in "
                                 f"{reader.__module__} states: {err}") from err
        self.lessons[result.key] = result.numbers
        return result

    def show(self, name: str) -> None:
        """Embed the committed figure ``name`` under its evidence line, then the paragraph that reads it (IPython
        display)."""
        from IPython.display import Markdown, display

        if self.remaking:  # the committed figure is about to be replaced: its lesson would read the old data
            display(Markdown(f"*This run re-makes `{name}`: the figure and the paragraph that reads it are shown by "
                             "the closing summary, from the new data.*"))
            return
        self.report.show(name)
        result = self.lesson(name)
        if result is not None:
            display(Markdown(result.text))

    def summary(self) -> None:
        """The closing summary of the cpu run (Markdown), then the ``cpu_lessons`` line of every lesson shown
        (IPython display; the line is printed, for nbval and ``tests/test_cpu_lessons*.py``)."""
        from IPython.display import Markdown, display

        notebook = self.report.notebook
        reader_of("", notebook)
        if notebook not in _SUMMARIES:
            raise KeyError(f"{notebook} has no summary in lab.lessons (register one with @summarises)")
        if self.remaking:  # every lesson now, from the figures this run has just written
            self.report = _cpu_report(notebook, self.report.figures_dir)
            for figure, reader in list(_READERS.items()):
                if reader.__module__ == _MODULES[notebook]:
                    self.report.show(figure)
                    display(Markdown(self.lesson(figure).text))
        display(Markdown(_SUMMARIES[notebook](self.lessons)))
        print(self.line())

    def read(self, name: str) -> None:
        """The paragraph that reads the committed figure ``name``, without the figure: for a figure this notebook has
        just drawn, the same at every size (a closed-form toy), so the figure above *is* the committed one."""
        from IPython.display import Markdown, display

        result = self.lesson(name)
        if result is None:
            raise KeyError(f"{name} has no reader in lab.lessons")
        display(Markdown(result.text))

    def line(self) -> str:
        """The ``cpu_lessons: {...}`` line of every lesson shown so far (sorted keys, floats rounded)."""
        return lessons_line(self.lessons, prefix="cpu_lessons")


def cpu_report(notebook: str, figures_dir: Path | None = None, *, remaking: bool = False) -> NotebookEvidence:
    """The committed cpu evidence of ``notebook`` (a stem such as ``08_fedvssam``), with the lessons of its
    figures. ``remaking``: the notebook runs at the profile whose figures are committed, so it replaces them as
    it goes; each lesson is then read by :meth:`NotebookEvidence.summary`, after the figures are written."""
    return NotebookEvidence(_cpu_report(notebook, figures_dir), remaking)
