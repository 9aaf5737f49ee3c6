"""Sweeps: grids of experiments (:mod:`~fedlab.sweep.grid`), where their runs execute
(:mod:`~fedlab.sweep.backends`), YAML grid files (:mod:`~fedlab.sweep.gridfile`), the summary table.
"""
from fedlab.sweep.grid import (BACKENDS, MAX_RUNS, MissingExtraError, RunFailure, SweepError, SweepInterrupted,
                               expand_grid, rounds_to_target, summary_table, sweep)
from fedlab.sweep.runs import executed_on

__all__ = ["BACKENDS", "MAX_RUNS", "MissingExtraError", "RunFailure", "SweepError", "SweepInterrupted",
           "executed_on", "expand_grid", "rounds_to_target", "summary_table", "sweep"]
