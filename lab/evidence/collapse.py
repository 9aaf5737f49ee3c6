"""The collapse rule, re-exported for the lab's code and notebooks; it lives in the engine
(:mod:`fedlab.engine.collapse`) because it decides a run's status, so it is part of the run key. The evidence's
divergence rule, which reads a finished run's training loss and final metric, is beside it
(:mod:`lab.evidence.divergence`)."""
from fedlab.engine.collapse import CHANCE_MARGIN, chance_threshold, is_collapsed

__all__ = ["CHANCE_MARGIN", "chance_threshold", "is_collapsed"]
