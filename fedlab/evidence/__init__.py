"""Evidence from runs: hyperparameter selection on a held-out split
(:mod:`~fedlab.evidence.tuning`, ``fedlab.tune``), means and intervals over seeds
(:mod:`~fedlab.evidence.uncertainty`) and the digest manifest that guards committed result files
(:mod:`~fedlab.evidence.integrity`, ``python -m fedlab.evidence``). The rule that marks a run
collapsed is the engine's (:mod:`fedlab.engine.collapse`).
"""
