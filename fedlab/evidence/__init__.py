"""Evidence: how results become claims.

:mod:`~fedlab.evidence.tuning` (hyperparameter selection on a held-out split; ``fedlab.tune``),
:mod:`~fedlab.evidence.uncertainty` (means and intervals over seeds), :mod:`~fedlab.evidence.collapse`
(runs that ended at chance), :mod:`~fedlab.evidence.records` (committed run records under
``figures/records/``), :mod:`~fedlab.evidence.claims` (the papers' claims evaluated from those
records) and :mod:`~fedlab.evidence.budget` (what a CPU profile costs).
"""
