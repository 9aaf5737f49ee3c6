"""Measurement: every benchmark of fedlab, none of it on a run's numeric path.

``python -m lab bench ...`` runs :mod:`lab.bench.speed` (ms per round per algorithm, speed
modes, the AMP check of :mod:`lab.bench.amp`, the conventional baseline of
:mod:`lab.bench.conventional`); ``bench step | analysis | flsim | gpu | sweep`` run
:mod:`~lab.bench.step` (ms per local step against a plain PyTorch loop), :mod:`~lab.bench.curvature`,
:mod:`~lab.bench.flsim`, :mod:`~lab.bench.gpu` and :mod:`~lab.bench.sweep`. :mod:`lab.bench.machine` is what they share: the device
synchronisation before a clock is read, the machine description, the usable cores;
:mod:`lab.bench.workload` what they run on (random data, FLOP counts, a matmul's rate).
"""
