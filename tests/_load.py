"""Time windows for tests that wait on something outside the process (a subprocess, a server, a browser).

Every such wait in the suite is written as ``window(seconds)``: the seconds are what the step needs on
a quiet machine with room to spare, multiplied by ``FEDLAB_TEST_SLACK`` (default 4) so that a machine
running other work, or a slow CI runner, still passes. A window bounds a hang; it never measures
speed (benchmarks print numbers instead).
"""
from __future__ import annotations

import os

SLACK = float(os.environ.get("FEDLAB_TEST_SLACK", "4"))


def window(seconds: float) -> float:
    """``seconds`` scaled by the suite's slack."""
    return seconds * SLACK


def window_ms(seconds: float) -> float:
    """:func:`window` in milliseconds (Playwright's unit)."""
    return 1000 * window(seconds)
