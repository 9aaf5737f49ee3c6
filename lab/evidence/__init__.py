"""The repository's evidence: how committed results become claims.

:mod:`~lab.evidence.protocol` (the cpu profile: splits, seeds, tuned hyperparameters, the final metric) and
:mod:`~lab.evidence.tuning_protocol` (how those hyperparameters are tuned), :mod:`~lab.evidence.records` (committed
run records under ``figures/records/``) and :mod:`~lab.evidence.record_load` (a record read back and checked),
:mod:`~lab.evidence.claims` and :mod:`~lab.evidence.paired` (the papers' claims evaluated from those
records), :mod:`~lab.evidence.divergence` (which runs measure a blow-up, not the method),
:mod:`~lab.evidence.report` (the notebooks' closing sections), :mod:`~lab.evidence.budget`
(what a CPU profile costs) and :mod:`~lab.evidence.rekey` (renaming committed records after a change
of the run key), :mod:`~lab.evidence.manifest` and :mod:`~lab.evidence.integrity` (the digest manifest that
guards every committed evidence file, and its checked re-record step) and :mod:`~lab.evidence.tuning_files` (the
committed tuning choices, checked). Tuning itself and intervals over seeds are the library's
(:mod:`fedlab.tuning`, :mod:`fedlab.uncertainty`).
"""
