"""Test-only hooks for the sweep's worker processes, loaded at interpreter start-up through ``PYTHONPATH``.

A sweep trains in processes the test does not run (the local pool's spawned workers, a script's subprocess, Ray's
workers); all of them inherit the environment, so a test that puts this folder on ``PYTHONPATH`` and sets one of the
variables below reaches every one of them, and the library carries no hook. Both stop a run at a known round instead
of racing a timer:

* ``FEDLAB_SWEEP_TEST_CRASH="<Config.hash()>:<round>"``: the process training that config exits abruptly
  (``os._exit``: no cleanup, like a SIGKILL) when that 0-based round starts;
* ``FEDLAB_SWEEP_TEST_HOLD="<round>:<folder>"``: every run that reaches that 0-based round writes
  ``<folder>/<hash>.held`` (holding its pid) and waits there until it is killed: the sweep is known to be mid-run.
"""
from __future__ import annotations

import os

CRASH_ENV, HOLD_ENV = "FEDLAB_SWEEP_TEST_CRASH", "FEDLAB_SWEEP_TEST_HOLD"


def _arm() -> None:
    import time
    from pathlib import Path

    from fedlab.engine.loop import Simulation

    target, _, crash_round = os.environ.get(CRASH_ENV, "").partition(":")
    hold_round, _, hold_dir = os.environ.get(HOLD_ENV, "").partition(":")
    original = Simulation.train_round

    def train_round(self, state, t, clients=None):
        key = self.config.hash()
        if target and key == target and t == int(crash_round):
            os._exit(70)
        if hold_dir and t == int(hold_round):
            Path(hold_dir, f"{key}.held").write_text(str(os.getpid()))
            while True:  # until the test's signal ends this process
                time.sleep(1)
        return original(self, state, t, clients)

    Simulation.train_round = train_round


if os.environ.get(CRASH_ENV) or os.environ.get(HOLD_ENV):
    _arm()
