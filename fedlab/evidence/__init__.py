"""Evidence from runs: hyperparameter selection on a held-out split (:mod:`~fedlab.evidence.tuning`,
``fedlab.tune``) and means and intervals over seeds (:mod:`~fedlab.evidence.uncertainty`). The rule
that marks a run collapsed is the engine's (:mod:`fedlab.engine.collapse`).
"""
