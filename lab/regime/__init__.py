"""The regime pilot of issue 28: a cpu regime where heterogeneity, drift and SAM matter, searched under
criteria fixed before any run (``lab/regime/criteria.yaml``).

:mod:`lab.regime.pilot` plans and runs a stage of the pilot and commits each finished run as a record
(``figures/regime/records/``); :mod:`lab.regime.analyse` reads the records and screens R1–R5 on stage A's
point estimates; :mod:`lab.regime.decide` decides R1–R5 on stage B's paired intervals and applies the
file's selection (``python -m lab regime decide``).
"""
