"""Sweeps: grids of experiments, where their runs execute, grid files, the summary table.

``fedlab.sweep.sweep(base, grid, seeds)`` and ``fedlab.sweep.summary_table(results)`` are the public
API (re-exported from :mod:`fedlab.sweep.grid`); :mod:`fedlab.sweep.backends` runs the configs
sequentially, on a local process pool or on Ray (``executed_on(config)``: the host, process and Ray
node each attempt of a run executed on); :mod:`fedlab.sweep.gridfile` reads the YAML grid
files of ``python -m fedlab sweep``.
"""
from fedlab.sweep.grid import (BACKENDS, MAX_RUNS, MissingExtraError, RunFailure, SweepError, SweepInterrupted,
                               expand_grid, rounds_to_target, summary_table, sweep)
from fedlab.sweep.runs import executed_on

__all__ = ["BACKENDS", "MAX_RUNS", "MissingExtraError", "RunFailure", "SweepError", "SweepInterrupted",
           "executed_on", "expand_grid", "rounds_to_target", "summary_table", "sweep"]
