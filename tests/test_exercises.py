"""Every notebook's `## Exercises` cell gives a solution after each exercise, hidden by default (issue 29).

The book renders a ``<details>`` block collapsed, with its ``<summary>`` as the toggle. The pattern, as in
01b_foundations: each numbered exercise (a line ``N. `` at the cell's top level) is followed, before the
next exercise, by exactly one ``<details>`` block whose first line is ``<summary>Solution</summary>``, with a
blank line after the summary and before ``</details>`` (without them the markdown inside is not rendered).
"""
from __future__ import annotations

import re
from pathlib import Path

import jupytext
import pytest

NB_DIR = Path(__file__).resolve().parent.parent / "notebooks"
SCRIPTS = sorted(NB_DIR.glob("[0-9][0-9]*_*.py"))
SUMMARY = "<summary>Solution</summary>"


def exercises_cell(script: Path) -> str | None:
    """The source of the notebook's markdown cell headed ``## Exercises``, or None."""
    cells = [c.source for c in jupytext.read(script).cells
             if c.cell_type == "markdown" and c.source.lstrip().startswith("## Exercises")]
    assert len(cells) <= 1, f"{script.name}: more than one '## Exercises' cell"
    return cells[0] if cells else None


def solution_problems(text: str) -> list[str]:
    """What is wrong with the solutions of one exercises cell (empty: each exercise has its one solution)."""
    problems: list[str] = []
    lines = text.splitlines()
    exercises: list[tuple[int, list[int]]] = []  # (number, line indices of the <details> blocks that follow it)
    open_at = None  # line index of the <details> not yet closed
    for i, line in enumerate(lines):
        stripped = line.strip()
        if open_at is None and (m := re.match(r"(\d+)\. ", line)):  # top level only, never inside a solution
            exercises.append((int(m.group(1)), []))
        elif stripped.startswith("<details"):
            if open_at is not None:
                problems.append(f"line {i + 1}: <details> inside the <details> opened on line {open_at + 1}")
            if not exercises:
                problems.append(f"line {i + 1}: <details> before the first exercise")
            else:
                exercises[-1][1].append(i)
            open_at = i
            rest = [s.strip() for s in lines[i + 1:i + 3]] + ["", ""]
            if rest[0] != SUMMARY:
                problems.append(f"line {i + 1}: <details> not followed by {SUMMARY}")
            elif rest[1] != "":
                problems.append(f"line {i + 2}: no blank line after {SUMMARY}")
        elif stripped.startswith("</details>"):
            if open_at is None:
                problems.append(f"line {i + 1}: </details> without a <details>")
            elif lines[i - 1].strip():
                problems.append(f"line {i + 1}: no blank line before </details>")
            open_at = None
    if open_at is not None:
        problems.append(f"line {open_at + 1}: <details> never closed")
    if not exercises:
        problems.append("no numbered exercise")
    numbers = [n for n, _ in exercises]
    if numbers != list(range(1, len(numbers) + 1)):
        problems.append(f"exercises numbered {numbers}, not 1, 2, ...")
    for n, blocks in exercises:
        if len(blocks) != 1:
            problems.append(f"exercise {n}: {len(blocks)} <details> solution blocks, not one")
    return problems


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_every_exercise_has_one_solution(script):
    text = exercises_cell(script)
    if text is None:
        pytest.skip("no '## Exercises' cell")
    assert not solution_problems(text), f"{script.name}: " + "; ".join(solution_problems(text))


GOOD = f"""## Exercises

Predict first.

1. **One.** Do this.
   And this.

<details>
{SUMMARY}

Because. A list inside a solution is not an exercise:

1. first
2. second

</details>

2. **Two.** Do that.

<details>
{SUMMARY}

That.

</details>
"""


@pytest.mark.parametrize("broken, why", [
    (GOOD.replace("<details>\n<summary>Solution</summary>\n\nThat.\n\n</details>\n", ""), "exercise 2: 0"),
    (GOOD + f"\n<details>\n{SUMMARY}\n\nAgain.\n\n</details>\n", "exercise 2: 2"),
    (GOOD[:GOOD.rindex("</details>")], "never closed"),
    (GOOD.replace(f"{SUMMARY}\n\nThat.", "<summary>Answer</summary>\n\nThat."), "not followed by"),
    (GOOD.replace(f"{SUMMARY}\n\nThat.", f"{SUMMARY}\nThat."), "no blank line after"),
    (GOOD.replace("That.\n\n</details>", "That.\n</details>"), "no blank line before"),
    (GOOD.replace("2. **Two.**", "3. **Two.**"), "numbered"),
])
def test_the_check_finds_a_missing_or_broken_solution(broken, why):
    assert not solution_problems(GOOD)
    assert any(why in p for p in solution_problems(broken)), solution_problems(broken)
