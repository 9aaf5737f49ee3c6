"""Helpers around the experiments: reproducibility (:mod:`~fedlab.tools.repro`: derived seeds and
generators, paths, environment and git stamp), figures with provenance (:mod:`~fedlab.tools.figures`:
``save_figure``, the figure index), the house plot style (:mod:`~fedlab.tools.plots`)
and notebook maintenance (:mod:`~fedlab.tools.nbtools`, ``python -m fedlab.tools.nbtools build``).
"""
