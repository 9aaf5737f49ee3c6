"""Helpers around the experiments: figures with provenance (:mod:`~lab.tools.figures`: ``save_figure``,
the figure index), the house plot style (:mod:`~lab.tools.plots`), notebook maintenance
(:mod:`~lab.tools.nbtools`, ``python -m lab.tools.nbtools build``), the basin maps of notebook 02's toy
federation (:mod:`~lab.tools.basins`) and the tail of ``make run`` (:mod:`~lab.tools.summary`). The repository's paths and stamps are :mod:`lab.repro`, the methods'
labels and colours :mod:`lab.style`.
"""
