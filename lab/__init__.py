"""The lab: this repository's research harness beside the :mod:`fedlab` library.

It serves the evidence, figures, book and benchmarks of *this* checkout — the protocol and the
committed run records (:mod:`lab.evidence`), figure writing with provenance and the house style
(:mod:`lab.tools`), the benchmarks (:mod:`lab.bench`) and the repository's commands
(``python -m lab ...``). The lab imports the library; the library never imports the lab
(``tests/test_layering.py``).

Importing the lab sets its environment (:func:`lab.repro.lab_environment`): ``$FEDLAB_RUNS``
defaults to this repository's ``runs/`` — so a notebook executed with ``--cwd notebooks`` writes its
runs where ``make run`` and the tests look — and the allocator thresholds are fixed (timing only).
"""
from lab.repro import lab_environment

lab_environment()
