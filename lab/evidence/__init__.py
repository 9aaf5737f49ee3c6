"""The repository's evidence: how committed results become claims.

:mod:`~lab.evidence.protocol` (the cpu profile: splits, seeds, tuned hyperparameters),
:mod:`~lab.evidence.records` (committed run records under ``figures/records/``),
:mod:`~lab.evidence.claims` and :mod:`~lab.evidence.paired` (the papers' claims evaluated from those
records), :mod:`~lab.evidence.report` (the notebooks' closing sections), :mod:`~lab.evidence.budget`
(what a CPU profile costs) and :mod:`~lab.evidence.rekey` (renaming committed records after a change
of the run key). Tuning, intervals over seeds and the manifest check are the library's
(:mod:`fedlab.evidence`).
"""
