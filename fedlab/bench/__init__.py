"""Measurement: every benchmark of fedlab, none of it on a run's numeric path.

``python -m fedlab bench ...`` runs :mod:`fedlab.bench.speed` (ms per round per algorithm, speed
modes, the AMP check of :mod:`fedlab.bench.amp`, the conventional baseline of
:mod:`fedlab.bench.conventional`); ``bench analysis | flsim | gpu | sweep`` run
:mod:`~fedlab.bench.curvature`, :mod:`~fedlab.bench.flsim`, :mod:`~fedlab.bench.gpu` and
:mod:`~fedlab.bench.sweep`. :mod:`fedlab.bench.machine` is what they share: the device
synchronisation before a clock is read, the machine description, the usable cores.
"""
