"""What a committed notebook shows: its parameters, its ``lessons: {...}`` line, its generated markdown.

Every notebook ends with a "What we learned" paragraph filled from the numbers it computed, and prints
those numbers as one JSON line (``lessons: {...}``). The lesson tests read them from the committed
``.ipynb`` — never by running the notebook — so a notebook whose source changed but whose outputs were
not rebuilt, or a paragraph that no longer matches its numbers, fails there.
"""
from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import nbformat

NB_DIR = Path(__file__).resolve().parent.parent / "notebooks"


@dataclass(frozen=True)
class Committed:
    params: dict[str, Any]  # the parameters cell's assignments (the ci defaults the outputs were made with)
    lessons: dict[str, Any]  # the JSON of the ``lessons:`` line
    markdown: str  # the text/markdown output of the cell that builds ``lessons``: the generated paragraph
    stdout: str  # every stdout stream of the code cells, joined
    sources: tuple[str, ...]  # the code cells' sources

    def assigned(self, name: str) -> Any:
        """The literal a top-level assignment in the code gives ``name``: ``name = <literal>``,
        ``name = dict(k=<literal>, ...)`` or ``a, name, c = <literal>, <literal>, <literal>``."""
        for source in self.sources:
            for node in ast.parse(source).body:
                if not isinstance(node, ast.Assign):
                    continue
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id == name:
                        return _literal(node.value)
                    if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                        for t, v in zip(target.elts, node.value.elts):
                            if isinstance(t, ast.Name) and t.id == name:
                                return _literal(v)
        raise KeyError(f"no top-level assignment of {name!r} in the notebook")


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "dict" and not node.args:
        return {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
    return ast.literal_eval(node)


def _assignments(source: str) -> dict[str, Any]:
    return {t.id: ast.literal_eval(node.value) for node in ast.parse(source).body
            if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)}


@cache
def committed(stem: str) -> Committed:
    """The committed outputs of ``notebooks/<stem>.ipynb``."""
    nb = nbformat.read(NB_DIR / f"{stem}.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    params = _assignments(next(c for c in code if "parameters" in c.metadata.get("tags", [])).source)
    stdout = "".join(o.get("text", "") for c in code for o in c.outputs
                     if o.output_type == "stream" and o.name == "stdout")
    lines = [line for line in stdout.splitlines() if line.startswith("lessons: ")]
    assert len(lines) == 1, f"{stem}: expected one 'lessons: ' line in the committed outputs, found {len(lines)}"
    # only the paragraph's own cell: other cells (the closing cpu section's captions) show markdown too
    markdown = "".join(o.data["text/markdown"] for c in code if "lessons = {" in c.source for o in c.outputs
                       if o.output_type == "display_data" and "text/markdown" in o.get("data", {}))
    return Committed(params, json.loads(lines[0].removeprefix("lessons: ")), markdown, stdout,
                     tuple(c.source for c in code))
