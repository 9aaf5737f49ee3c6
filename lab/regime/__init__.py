"""The regime pilot of issue 28: a cpu regime where heterogeneity, drift and SAM matter, searched under
criteria fixed before any run (``lab/regime/criteria.yaml``), and the rerun in the regime it chose.

Lowest first: :mod:`lab.regime.criteria` reads the criteria (and :mod:`lab.regime.amendment` the amendment that
governs stage B); :mod:`lab.regime.pilot_records` reads the committed records (``figures/regime/records/``) and
scores a run; :mod:`lab.regime.pilot_plan` plans a stage from both; :mod:`lab.regime.pilot` runs a stage as a
study and commits each finished run as a record. :mod:`lab.regime.stage_a` screens R1–R5 on stage A's point
estimates (written by :mod:`lab.regime.analyse`); :mod:`lab.regime.stage_b` decides R1–R5 on stage B's paired
intervals and applies the file's selection (written by :mod:`lab.regime.decide`, ``python -m lab regime decide``).
The rerun: :mod:`lab.regime.rerun_plan` lists and costs its runs (``lab/regime/rerun.yaml``), :mod:`lab.regime.rerun`
tunes, trains and measures them, :mod:`lab.regime.params` writes its federation into the notebooks' parameters.
"""
