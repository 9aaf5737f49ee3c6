"""Captions state how their runs were made from the runs themselves (lab.evidence.facts, issue 41 item 6).

Each phrase must come from the case it names: a caption that said "partition fixed per split" over runs that drew a
partition per seed, or "tuned per split" over a choice tuned once and reused, is what these tests catch.
"""
from __future__ import annotations

import pytest

import fedlab
from lab.evidence.facts import (DRAWN_PER_SEED, FIXED_PER_SPLIT, TUNED_PER_SPLIT, UNTUNED, partition_rule, tuned_on,
                                tuning_rule)

BASE = fedlab.Config(dataset="digits", partition="dirichlet", alpha=0.1, rounds=4)


def _runs(alphas: tuple[float, ...], seeds: tuple[int, ...], paired: bool) -> list[fedlab.Config]:
    """Configs of every (split, seed): ``paired`` draws the partition with the training seed (the rerun protocol),
    else every run of a split shares partition seed 0 (the fixed protocol)."""
    return [BASE.replace(alpha=a, seed=s, partition_seed=s if paired else 0) for a in alphas for s in seeds]


def test_runs_sharing_one_partition_per_split_are_fixed_per_split():
    assert partition_rule(_runs((0.1, 0.5), (0, 1, 2), paired=False)) == FIXED_PER_SPLIT
    # each split its own fixed partition seed: still one partition per split
    configs = [BASE.replace(alpha=0.1, seed=s, partition_seed=7) for s in (0, 1)] + \
              [BASE.replace(alpha=0.5, seed=s, partition_seed=3) for s in (0, 1)]
    assert partition_rule(configs) == FIXED_PER_SPLIT


def test_runs_whose_partition_seed_is_their_seed_are_drawn_per_seed():
    assert partition_rule(_runs((0.1, 0.5), (0, 1, 2, 3, 4, 5), paired=True)) == DRAWN_PER_SEED
    assert partition_rule(_runs((0.1, 0.5), (0, 1, 2), paired=True)) != FIXED_PER_SPLIT  # the caption's old error


def test_one_seed_claims_nothing_about_other_seeds():
    # seed 0 with partition seed 0 fits both rules; the fixed one states only what the runs show
    assert partition_rule(_runs((0.1,), (0,), paired=True)) == FIXED_PER_SPLIT


def test_runs_that_follow_no_rule_are_refused_not_described():
    mixed = [BASE.replace(seed=0, partition_seed=5), BASE.replace(seed=1, partition_seed=9)]
    with pytest.raises(ValueError, match="no single partition rule: split\\(s\\) dirichlet-0.1"):
        partition_rule(mixed)
    with pytest.raises(ValueError, match="at least one"):
        partition_rule([])


def test_tuned_on_reads_the_split_of_the_tuning_file():
    assert tuned_on("figures/rerun/tuning/dirichlet-0.1/fedsam.json") == "dirichlet-0.1"
    assert tuned_on("figures/rerun/tuning/dirichlet-0.1/fedsam.json (tuned on dirichlet-0.1, reused on "
                    "dirichlet-0.5)") == "dirichlet-0.1"
    assert tuned_on("figures/rerun/tuning/dirichlet-0.5/fedsam.json; override {'rho': 0.1}") == "dirichlet-0.5"
    assert tuned_on("defaults (nothing declared to tune)") is None
    assert tuned_on("defaults (untuned: no fedsam.json for split dirichlet-0.5)") is None


def test_a_choice_tuned_once_and_reused_is_not_called_tuned_per_split():
    rule = tuning_rule({"dirichlet-0.1": ["dirichlet-0.1", None], "dirichlet-0.5": ["dirichlet-0.1", "dirichlet-0.1"]})
    assert rule == "tuned once on dirichlet-0.1 and reused on dirichlet-0.5"
    assert rule != TUNED_PER_SPLIT


def test_choices_tuned_on_their_own_split_are_tuned_per_split():
    assert tuning_rule({"dirichlet-0.1": ["dirichlet-0.1"], "dirichlet-0.5": ["dirichlet-0.5", None]}) == TUNED_PER_SPLIT
    assert tuning_rule({"dirichlet-0.1": ["dirichlet-0.1"]}) == TUNED_PER_SPLIT  # one split, tuned on it


def test_untuned_and_mixed_choices_say_so():
    assert tuning_rule({"dirichlet-0.1": [None], "dirichlet-0.5": [None]}) == UNTUNED
    mixed = tuning_rule({"dirichlet-0.1": ["dirichlet-0.1"], "dirichlet-0.5": ["dirichlet-0.1", "dirichlet-0.5"]})
    assert mixed == "tuned on dirichlet-0.1 for dirichlet-0.1; tuned on dirichlet-0.1, dirichlet-0.5 for dirichlet-0.5"


def test_the_committed_tuning_is_described_as_reused_from_the_tuning_split():
    """The cpu profile's choices, as tuned_params gives them for notebook 10's splits, produce the reuse phrase
    naming the rerun plan's tuning split (a test on the committed tuning files, not on synthetic strings)."""
    from lab.evidence.protocol import profile_splits, split_key, tuned_params, tuning_split

    splits = profile_splits("cpu")
    assert len(splits) > 1, "notebook 10's cpu profile has several splits"
    rule = tuning_rule({split_key(c): [tuned_on(tuned_params(m, c).source) for m in ("fedsam", "fedavg")]
                        for c in splits.values()})
    assert rule.startswith(f"tuned once on {tuning_split()} and reused on ")
