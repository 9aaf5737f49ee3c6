"""Facts about a set of runs, in words, read from the runs' own configs (issue 41, item 6).

A paragraph that says how its runs were made ("the partition is the same for every seed") is true only for the
runs it was typed for: the same notebook runs at the ``ci`` size with one fixed partition and in the ``cpu``
profile with a partition drawn per seed. Such a phrase is computed here from the :class:`~fedlab.config.Config`
of the runs shown, so that a notebook prints it (or asserts it) instead of typing it.
"""
from __future__ import annotations

from collections.abc import Iterable

from fedlab.config import Config

__all__ = ["DRAWN_PER_SEED", "FIXED_PER_SPLIT", "partition_rule"]

FIXED_PER_SPLIT = "fixed per split"
"""Every run of a split uses one partition, whatever its training seed."""
DRAWN_PER_SEED = "drawn per seed"
"""Every run's partition is drawn with its training seed (``partition_seed = seed``), so seeds differ in it."""


def _split(config: Config) -> str:
    # imported here: lab.evidence.protocol pulls in the regime plan, which naming a split does not need
    from lab.evidence.protocol import split_key

    return split_key(config)


def partition_rule(configs: Iterable[Config]) -> str:
    """How the partitions of the runs ``configs`` were drawn: :data:`FIXED_PER_SPLIT` when the runs of each split
    share one ``partition_seed``, :data:`DRAWN_PER_SEED` when every run's ``partition_seed`` is its ``seed`` and
    some split holds runs of several seeds.

    "Fixed" is tested first: a split shown at one seed fits both rules, and "fixed" says nothing about seeds that
    are not shown. Runs that follow neither rule raise ValueError naming the splits, as does an empty
    ``configs``: a sentence must not state a rule the runs do not follow.
    """
    configs = list(configs)
    if not configs:
        raise ValueError("partition_rule needs at least one Config")
    partition_seeds: dict[str, set[int | None]] = {}
    for c in configs:
        partition_seeds.setdefault(_split(c), set()).add(c.partition_seed)
    if all(len(p) == 1 for p in partition_seeds.values()):
        return FIXED_PER_SPLIT
    if all(c.partition_seed == c.seed for c in configs):
        return DRAWN_PER_SEED
    mixed = sorted(s for s, p in partition_seeds.items() if len(p) > 1)
    raise ValueError(f"the runs follow no single partition rule: split(s) {', '.join(mixed)} mix partition seeds "
                     "that are not their training seeds")
