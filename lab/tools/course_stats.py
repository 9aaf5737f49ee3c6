"""How much of each notebook is lesson and how much is harness: the counts the course issue asks for before and
after (lines of code, ``lab`` names imported, infrastructure words in the prose).

    python -m lab.tools.course_stats            # one row per notebook, then the totals
    python -m lab.tools.course_stats --json out.json

Read from the jupytext ``.py`` twin of each notebook (``notebooks/NN_slug.py``): a code line is a non-blank
line of a code cell that is not only a comment; the ``lab`` names are the distinct names a code cell imports
from ``lab`` or its subpackages (``from lab.x import a, b`` counts a and b; ``import lab.x`` counts lab.x);
the infrastructure words are the matches of :data:`INFRASTRUCTURE` in the markdown cells, case-insensitive —
the vocabulary of how evidence is made (profiles, records, the executors and checkers), which belongs on one
book page and not in every lesson's prose.
"""
from __future__ import annotations

import argparse
import ast
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from lab.repro import REPO_ROOT

__all__ = ["INFRASTRUCTURE", "NotebookStats", "notebook_stats", "main"]

INFRASTRUCTURE: tuple[str, ...] = (
    r"\bprofiles?\b", r"\bci\b", r"\bcpu size\b", r"\bpaper profile\b", r"\bpapermill\b", r"\bnbval\b",
    r"\brecords?\b", r"\bprovenance\b", r"\bsidecars?\b", r"\bmanifests?\b", r"\bregime\b", r"\bpilot\b",
    r"\brerun\b", r"figures/", r"lab/", r"\.yaml\b", r"\bcommitted\b", r"\bharness\b", r"\bNBVAL\w*",
)
"""Patterns of the infrastructure vocabulary (one place; the counts in the course issue's note use these)."""

_CELL = re.compile(r"^# %%(.*)$")
CLOSING = ("## What the cpu run shows", "## How this evidence was made")
"""Headings of a notebook's closing sections, where the evidence's plumbing is meant to live (the course issue)."""


@dataclass(frozen=True)
class NotebookStats:
    notebook: str
    code_lines: int
    code_cells: int
    lab_names: int
    infrastructure_words: int
    prose_words: int
    lesson_infrastructure_words: int = 0  # before the closing sections (CLOSING), where the lessons are


def _cells(text: str) -> list[tuple[str, list[str]]]:
    """(kind, lines) of each cell of a jupytext percent script; the header before the first cell is dropped."""
    cells: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        m = _CELL.match(line)
        if m:
            cells.append(("markdown" if "[markdown]" in m.group(1) else "code", []))
        elif cells:
            cells[-1][1].append(line)
    return cells


def _lab_names(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a cell with IPython magics: fall back to the import lines alone
        tree = ast.parse("\n".join(line for line in source.splitlines() if line.lstrip().startswith(("from", "import"))))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "lab":
            names |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names if a.name.split(".")[0] == "lab"}
    return names


def notebook_stats(script: Path) -> NotebookStats:
    """The counts of one notebook from its jupytext twin ``script``."""
    cells = _cells(script.read_text(encoding="utf-8"))
    code = [lines for kind, lines in cells if kind == "code"]
    prose = "\n".join("\n".join(line.removeprefix("#").strip() for line in lines)
                      for kind, lines in cells if kind == "markdown")
    code_lines = sum(1 for lines in code for line in lines if line.strip() and not line.lstrip().startswith("#"))
    lab = set().union(*(_lab_names("\n".join(lines)) for lines in code)) if code else set()
    infra = _infrastructure(prose)
    words = len(re.findall(r"[^\W_][\w'’-]*", prose))  # words, not markdown's # and |
    lesson = _before(prose, CLOSING)
    return NotebookStats(script.stem, code_lines, len(code), len(lab), infra, words, _infrastructure(lesson))


def _infrastructure(prose: str) -> int:
    return sum(len(re.findall(p, prose, flags=re.IGNORECASE)) for p in INFRASTRUCTURE)


def _before(prose: str, headings: tuple[str, ...]) -> str:
    """The prose before the first line that is one of ``headings`` (the whole prose when none is there)."""
    lines = prose.splitlines()
    stop = next((i for i, line in enumerate(lines) if line.strip() in headings), len(lines))
    return "\n".join(lines[:stop])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.tools.course_stats", description=__doc__.split("\n\n")[0])
    parser.add_argument("--notebooks", type=Path, default=REPO_ROOT / "notebooks", help="folder of NN_slug.py twins")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    scripts = sorted(p for p in args.notebooks.glob("[0-9][0-9]*_*.py"))
    if not scripts:
        parser.error(f"--notebooks {args.notebooks}: no NN_slug.py notebook twins there")
    rows = [notebook_stats(p) for p in scripts]
    head = (f"{'notebook':34} {'code lines':>10} {'cells':>6} {'lab names':>9} {'infra words':>11} {'in lessons':>10} "
            f"{'prose words':>11}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r.notebook:34} {r.code_lines:10d} {r.code_cells:6d} {r.lab_names:9d} {r.infrastructure_words:11d} "
              f"{r.lesson_infrastructure_words:10d} {r.prose_words:11d}")
    print(f"{'total':34} {sum(r.code_lines for r in rows):10d} {sum(r.code_cells for r in rows):6d} "
          f"{sum(r.lab_names for r in rows):9d} {sum(r.infrastructure_words for r in rows):11d} "
          f"{sum(r.lesson_infrastructure_words for r in rows):10d} {sum(r.prose_words for r in rows):11d}")
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
