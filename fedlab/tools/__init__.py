"""Helpers around the experiments: reproducibility (:mod:`~fedlab.tools.repro`: derived seeds and
generators, paths, environment, figure saving), the house plot style (:mod:`~fedlab.tools.plots`)
and notebook maintenance (:mod:`~fedlab.tools.nbtools`, ``python -m fedlab.tools.nbtools build``).
"""
