"""lab.evidence.facts.partition_rule: the partition rule of a set of runs, read from their configs (issue 41)."""
from __future__ import annotations

import pytest

import fedlab
from lab.evidence.facts import DRAWN_PER_SEED, FIXED_PER_SPLIT, partition_rule
from lab.evidence.protocol import PARTITION_SEED, rerun_config

BASE = fedlab.Config(dataset="fmnist", model="mlp", n_clients=10, partition="dirichlet", alpha=0.1, rounds=5)


def test_fixed_partition_across_seeds():
    # what run_seeds does without paired: one partition seed, several training seeds
    configs = [BASE.replace(seed=s, partition_seed=PARTITION_SEED) for s in range(3)]
    assert partition_rule(configs) == FIXED_PER_SPLIT


def test_rerun_protocol_draws_one_partition_per_seed():
    configs = [rerun_config(BASE, s) for s in range(3)]
    assert partition_rule(configs) == DRAWN_PER_SEED


def test_one_seed_is_called_fixed():
    assert partition_rule([rerun_config(BASE, 4)]) == FIXED_PER_SPLIT


def test_each_split_may_have_its_own_fixed_partition():
    other = BASE.replace(alpha=0.5)
    configs = [BASE.replace(seed=s, partition_seed=0) for s in range(2)] + \
              [other.replace(seed=s, partition_seed=7) for s in range(2)]
    assert partition_rule(configs) == FIXED_PER_SPLIT


def test_no_rule_is_refused():
    with pytest.raises(ValueError, match="no single partition rule"):
        partition_rule([BASE.replace(seed=0, partition_seed=3), BASE.replace(seed=1, partition_seed=5)])
    with pytest.raises(ValueError, match="at least one"):
        partition_rule([])
