"""The ``lessons: {...}`` line with which a notebook's "What we learned" section prints its numbers.

Each notebook fills its closing paragraph from numbers it computed and prints them as one JSON line;
the lesson tests (``tests/test_lessons.py``) read that line from the committed outputs. Floats are
rounded, inside nested dicts too, so that the line is the same on every CPU for float64 closed forms.
"""
from __future__ import annotations

import json
from typing import Any


def _rounded(value: Any, digits: int) -> Any:
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {str(k): _rounded(v, digits) for k, v in value.items()}
    return value


def lessons_line(lessons: dict[str, Any], digits: int = 6, prefix: str = "lessons") -> str:
    """'lessons: ' (or ``prefix``: e.g. ``cpu_lessons`` for a paragraph read from the committed cpu data) and the
    JSON of ``lessons`` with sorted keys and every float rounded to ``digits``."""
    return f"{prefix}: " + json.dumps(_rounded(lessons, digits), sort_keys=True)
