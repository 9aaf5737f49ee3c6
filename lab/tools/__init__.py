"""Helpers around the experiments: the repository's paths and stamps (:mod:`~lab.tools.repro`),
figures with provenance (:mod:`~lab.tools.figures`: ``save_figure``, the figure index), the house
plot style (:mod:`~lab.tools.plots`), notebook maintenance (:mod:`~lab.tools.nbtools`,
``python -m lab.tools.nbtools build``) and the tail of ``make run`` (:mod:`~lab.tools.summary`).
"""
