"""The one module a notebook imports from the lab: the evidence and figure helpers the course uses, beside the
public API of :mod:`fedlab` (``tests/test_notebooks_meta.py`` holds every notebook to these two).

A lesson trains with :mod:`fedlab`; what it needs from this repository's research harness — the committed run
records and the protocol that reads them, the claims, the figure writer with its provenance, the house style of
the plots — is re-exported here from the lab's own modules, where each is defined and documented once. The
vocabulary of that harness is explained on one page of the book, ``notebooks/book/guide/running.md``.
"""
from lab.evidence.aggregation import aggregation_weights
from lab.evidence.claims import CLAIMS_FILE, evaluate_claim_paired, load_claims
from lab.evidence.claims.unpaired import unpaired_verdict
from lab.evidence.collapse import chance_threshold
from lab.evidence.facts import DRAWN_PER_SEED, partition_rule, tuned_on, tuning_rule
from lab.evidence.paired import paired_difference
from lab.evidence.protocol import (K5_TUNING_DIR, PARTITION_SEED, Curve, final_metric, profile_federation,
                                   rerun_config, run_seeds, split_key, tuned_params, tuning_dir)
from lab.evidence.records import figure_runs, recorded, run_or_load
from lab.evidence.report import committed_final_accuracy, committed_parameters, committed_table
from lab.evidence.validity import NOT_TESTED_DEGENERATE, RecordPool, degenerate_arms
from lab.lessons import cpu_report
from lab.regime.params import plan_seeds
from lab.repro import CITABLE_PROFILES, FIGURES_DIR
from lab.sharpness import track_sharpness
from lab.study.report import map_lesson
from lab.tools.basins import ELSEWHERE, assign_basins, basin_shares, run_from_starts, start_grid
from lab.tools.costs import cost_curves, plot_cost_accuracy
from lab.tools.figures import save_curves, save_figure
from lab.tools.forest import claims_forest
from lab.tools.lessons import lessons_line
from lab.tools.plots import (METHOD_ORDER, all_runs, curve_data, draw_band, draw_seeds, draw_small_multiples,
                             final_estimate, finished_runs, method_color, method_label, round_ticks, run_styles,
                             status_note, use_house_style)

__all__ = ["CITABLE_PROFILES", "CLAIMS_FILE", "DRAWN_PER_SEED", "ELSEWHERE", "FIGURES_DIR", "K5_TUNING_DIR",
           "METHOD_ORDER", "NOT_TESTED_DEGENERATE", "PARTITION_SEED", "Curve", "RecordPool", "aggregation_weights",
           "all_runs", "assign_basins", "basin_shares", "chance_threshold", "claims_forest", "committed_final_accuracy",
           "committed_parameters", "committed_table", "cost_curves", "cpu_report", "curve_data", "degenerate_arms",
           "draw_band", "draw_seeds", "draw_small_multiples", "evaluate_claim_paired", "figure_runs", "final_estimate",
           "final_metric", "finished_runs", "lessons_line", "load_claims", "map_lesson", "method_color",
           "method_label", "paired_difference", "partition_rule", "plan_seeds", "plot_cost_accuracy",
           "profile_federation", "recorded", "rerun_config", "round_ticks", "run_from_starts", "run_or_load",
           "run_seeds", "run_styles", "save_curves", "save_figure", "split_key", "start_grid", "status_note",
           "track_sharpness", "tuned_on", "tuned_params", "tuning_dir", "tuning_rule", "unpaired_verdict",
           "use_house_style"]
