"""Facts about a set of runs, in words, computed from the runs themselves (issue 41, item 6).

A caption or a paragraph that states how its runs were made — whether the partition was fixed per split or drawn
per seed, whether the hyperparameters were tuned on each split or once and reused — is read from the runs' own
:class:`~fedlab.config.Config` objects and tuning sources here, never typed: a typed phrase stays true only until
the protocol changes (the rerun drew a partition per seed and tuned once on one split, while captions still said
"partition fixed per split" and "tuned per split").
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from fedlab.config import Config

__all__ = ["DRAWN_PER_SEED", "FIXED_PER_SPLIT", "TUNED_PER_SPLIT", "UNTUNED", "partition_rule", "tuned_on",
           "tuning_rule"]

FIXED_PER_SPLIT = "fixed per split"
DRAWN_PER_SEED = "drawn per seed"
TUNED_PER_SPLIT = "tuned per split"
UNTUNED = "not tuned (the methods' defaults)"


def _split(config: Config) -> str:
    # lazily imported: lab.evidence.protocol imports the regime plan, which is not needed to name a split
    from lab.evidence.protocol import split_key

    return split_key(config)


def partition_rule(configs: Iterable[Config]) -> str:
    """How the partitions of ``configs`` were drawn: :data:`FIXED_PER_SPLIT` when all the runs of each split share
    one ``partition_seed``; :data:`DRAWN_PER_SEED` when every run's ``partition_seed`` is its training ``seed`` and
    some split has runs of several seeds (so that the partitions differ between seeds).

    The fixed case is tested first: with a single seed per split both descriptions fit the runs, and "fixed per
    split" is the one that claims nothing about seeds not shown. Runs that follow neither rule (a split whose runs
    use different partition seeds that are not their training seeds) raise ValueError naming the split, so a
    caption never states a rule the runs do not follow. An empty ``configs`` raises ValueError too.
    """
    configs = list(configs)
    if not configs:
        raise ValueError("partition_rule needs at least one Config")
    by_split: dict[str, set[int | None]] = {}
    seeds_by_split: dict[str, set[int]] = {}
    for c in configs:
        by_split.setdefault(_split(c), set()).add(c.partition_seed)
        seeds_by_split.setdefault(_split(c), set()).add(c.seed)
    if all(len(p) == 1 for p in by_split.values()):
        return FIXED_PER_SPLIT
    if all(c.partition_seed == c.seed for c in configs):
        return DRAWN_PER_SEED
    mixed = sorted(s for s, p in by_split.items() if len(p) > 1)
    raise ValueError(f"the runs follow no single partition rule: split(s) {', '.join(mixed)} mix partition seeds "
                     "that are not their training seeds")


def tuned_on(source: str) -> str | None:
    """The split a :class:`~lab.evidence.protocol.Tuned` choice was tuned on, from its ``source``: the folder of
    its tuning file (``<tuning dir>/<split>/<method>.json``, as :func:`~lab.evidence.protocol.tuned_params` lays
    them out, optionally followed by ``" (tuned on …, reused on …)"`` or ``"; override …"``); None when the source
    names no tuning file (the method's defaults, an untuned profile)."""
    path = source.split(" (", 1)[0].split(";", 1)[0].strip()
    return Path(path).parent.name if path.endswith(".json") else None


def tuning_rule(tuned: Mapping[str, Iterable[str | None]]) -> str:
    """How the hyperparameters of a set of runs were chosen, from ``{split the runs ran on: the splits their
    choices were tuned on}`` (:func:`tuned_on` of each method's source; None for an untuned method).

    * :data:`UNTUNED` when no method on any split was tuned;
    * :data:`TUNED_PER_SPLIT` when every tuned choice was tuned on the split it runs on;
    * ``"tuned once on <s> and reused on <the others>"`` when all tuned choices come from one split ``s`` and some
      run on another split;
    * otherwise the list of which split's choice each split uses (``"tuned on <s> for <split>; …"``).

    A method without a tuning (None) is left out of the rule: the table of sources says which those are.
    """
    used = {split: sorted({s for s in sources if s is not None}) for split, sources in tuned.items()}
    if not any(used.values()):
        return UNTUNED
    if all(on == [split] for split, on in used.items() if on):
        return TUNED_PER_SPLIT
    origins = sorted({s for on in used.values() for s in on})
    if len(origins) == 1:
        others = sorted(split for split, on in used.items() if on and split != origins[0])
        return f"tuned once on {origins[0]} and reused on {', '.join(others)}"
    return "; ".join(f"tuned on {', '.join(on)} for {split}" for split, on in sorted(used.items()) if on)
