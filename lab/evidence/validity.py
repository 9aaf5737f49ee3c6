"""Whether a comparison tests the claim it is counted for (issue 41): degenerate arms, diverged runs, missing
controls, and margins larger than the room there is.

A paired interval is a verdict on a claim only when its arms are what the claim names. Four ways they are not,
each a verdict class of its own in the claims table (:mod:`lab.evidence.claims`), never counted with holds /
fails / inconclusive and always listed with its reason:

* **not tested — degenerate arm** (:func:`degenerate`): an arm that takes its tuned hyperparameters landed where
  its method *is* another one — a declared identity (:data:`IDENTITIES`: FedSWA at ρ = 1, α = 1, λ = 1 is FedAvg
  round for round; FedLESAM and FedSAM at ρ = 0 are FedAvg) applies to its resolved hyperparameters, or its
  per-round test accuracy equals the reference method's (:data:`REFERENCES`) bit for bit at every seed in the same
  federation. An arm whose ``params`` in ``figures/claims.yaml`` pin the identity's chosen values (those not
  at the method's defaults) is exempt: the claim asks for that cell on purpose (FedSWA's ρ × α ablation holds
  ρ = 1, α = 1 as one of its cells).
* **not tested — diverged** (:func:`diverged_arm`): a run of the arm is diverged by
  :func:`lab.evidence.divergence.run_divergence` (whatever the engine labelled it): it measures a blow-up.
* **confounded** (:func:`companion_runs`): the claim declares a control it needs (``requires``, e.g. FedSAM at
  FedNSAM's radius for a Δ_D claim, since FedSAM's Δ_D grows with ρ) and no committed record of it exists in the
  claim's federation.
* **not testable — headroom** (:func:`headroom`): a ``much_greater`` claim's margin exceeds the measured room
  between its right arm and a declared ``ceiling`` (e.g. FedAvg on the IID split of the same federation): no
  method could pass it here. Without a ceiling record the verdict stands and the note says the room is unchecked.
* **not testable — scope** (a claim's ``not_testable`` reason in ``figures/claims.yaml``): the claim is declared
  outside what this repository can test, with why (e.g. its baselines are not implemented, or the cpu budget gives
  too few seeds or clients for the regime it is about); read from no evidence, counted nowhere.

Committed records outside the claim's figure are read from the records folder through :class:`RecordPool`
(by algorithm, once per evaluation).
"""
from __future__ import annotations

import json
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedlab.results import RunResult

__all__ = ["CONFOUNDED", "IDENTITIES", "NOT_TESTABLE_HEADROOM", "NOT_TESTABLE_SCOPE", "NOT_TESTED_DEGENERATE",
           "NOT_TESTED_DIVERGED", "REFERENCES", "UNTESTED", "Identity", "RecordPool", "RunPool", "companion_runs", "degenerate",
           "degenerate_arms", "diverged_arm", "federation", "headroom", "identity_of", "matches", "same_series"]

NOT_TESTED_DEGENERATE = "not tested — degenerate arm"
NOT_TESTED_DIVERGED = "not tested — diverged"
CONFOUNDED = "confounded"
NOT_TESTABLE_HEADROOM = "not testable — headroom"
NOT_TESTABLE_SCOPE = "not testable — scope"
UNTESTED = (NOT_TESTABLE_SCOPE, NOT_TESTED_DIVERGED, NOT_TESTED_DEGENERATE, CONFOUNDED, NOT_TESTABLE_HEADROOM)
"""The classes in the order a claim reports them when several apply."""


@dataclass(frozen=True)
class Identity:
    """``algorithm`` at the resolved hyperparameters ``when`` computes what ``reference`` computes (``why``)."""

    algorithm: str
    when: Mapping[str, Any]
    reference: str
    why: str

    def applies(self, algorithm: str, hparams: Mapping[str, Any]) -> bool:
        return algorithm == self.algorithm and all(
            k in hparams and _same_value(hparams[k], v) for k, v in self.when.items())


IDENTITIES: tuple[Identity, ...] = (
    Identity("fedsam", {"rho": 0.0}, "fedavg", "the ascent ε̂ = ρ g/‖g‖ is exactly zero (fedlab/algorithms/fedsam.py)"),
    Identity("fedlesam", {"rho": 0.0}, "fedavg",
             "the perturbation δ_i = ρ (θ_old,i − θ^t)/‖·‖ is exactly zero (fedlab/algorithms/fedlesam.py)"),
    Identity("fedswa", {"rho": 1.0, "alpha": 1.0, "lr_multiplier": 1.0}, "fedavg",
             "every local step size η_k is η_t and the server step is the plain average "
             "(fedlab/algorithms/fedswa.py)"),
    Identity("fedprox", {"mu": 0.0}, "fedavg", "the proximal gradient μ (θ − θ^t) is exactly zero "
                                               "(fedlab/algorithms/fedprox.py)"),
)
"""The declared reductions of a method to another, from each algorithm's own definition."""

REFERENCES: tuple[str, ...] = tuple(dict.fromkeys(i.reference for i in IDENTITIES))
"""The methods an arm is compared with bit for bit (what the identities reduce to)."""


def _same_value(a: Any, b: Any) -> bool:
    """Exact equality, 0 and 0.0 alike (a tuned ρ of 0.0 meets an identity's 0)."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return a == b


def _hparams(config: Any) -> dict[str, Any]:
    return config.built_algorithm.hp.to_dict()


def matches(res: RunResult, arm: Mapping[str, Any], select: Mapping[str, Any]) -> bool:
    """Whether run ``res`` belongs to ``arm`` (its algorithm, name, Config fields and resolved hyperparameters as
    given) within the setting's ``select`` (Config fields)."""
    cfg = res.config
    if any(getattr(cfg, k, None) != v for k, v in select.items()):
        return False
    if arm.get("algorithm") and cfg.algorithm != arm["algorithm"]:
        return False
    if arm.get("name") and cfg.name != arm["name"]:
        return False
    if any(getattr(cfg, k, None) != v for k, v in (arm.get("config") or {}).items()):
        return False
    if arm.get("params"):
        hp = _hparams(cfg)
        if any(hp.get(k) != v for k, v in arm["params"].items()):
            return False
    return True


def identity_of(config: Any) -> Identity | None:
    """The declared identity that ``config``'s algorithm at its resolved hyperparameters meets, or None."""
    hp = _hparams(config)
    return next((i for i in IDENTITIES if i.applies(config.algorithm, hp)), None)


def federation(config: Any, **overrides: Any) -> str:
    """Every field that decides a run's numbers except the method (``algorithm``, ``algorithm_params``), as one
    string: two runs of one seed with the same federation differ only by their method. ``overrides`` replace
    fields first (e.g. ``partition="iid", alpha=None`` for the IID split of the same federation)."""
    cfg = config.replace(**overrides) if overrides else config
    fields = {k: v for k, v in cfg.hashed_fields().items() if k not in ("algorithm", "algorithm_params")}
    return json.dumps(fields, sort_keys=True, default=str)


def same_series(a: RunResult, b: RunResult) -> bool:
    """Whether two runs' per-round test accuracies are equal bit for bit (the same rounds evaluated, the same
    floats; a missing evaluation matches only a missing one)."""
    ma, mb = a.metrics[["round", "test_acc"]], b.metrics[["round", "test_acc"]]
    if len(ma) != len(mb) or not np.array_equal(ma["round"].to_numpy(), mb["round"].to_numpy()):
        return False
    return bool(np.array_equal(ma["test_acc"].to_numpy(dtype=float), mb["test_acc"].to_numpy(dtype=float),
                               equal_nan=True))


def _first_difference(a: RunResult, b: RunResult) -> int | None:
    """The first round at which two runs' test accuracies differ (None: never, over the rounds both have)."""
    x = dict(zip(a.metrics["round"].astype(int), a.metrics["test_acc"].astype(float)))
    y = dict(zip(b.metrics["round"].astype(int), b.metrics["test_acc"].astype(float)))
    for r in sorted(set(x) & set(y)):
        if not (x[r] == y[r] or (math.isnan(x[r]) and math.isnan(y[r]))):
            return r
    return None


class RecordPool:
    """The committed records of a folder, loaded by algorithm on first use (each checked by
    :func:`lab.evidence.records.load_record`) and kept for the rest of one evaluation."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._runs: dict[str, list[RunResult]] = {}

    def runs(self, algorithm: str) -> list[RunResult]:
        """Every committed record of ``algorithm`` in the folder (none when the folder does not exist)."""
        if algorithm not in self._runs:
            from lab.evidence.records import SUFFIX, load_record

            paths = sorted(self.directory.glob(f"{algorithm}-*{SUFFIX}")) if self.directory.is_dir() else []
            loaded = [load_record(p.name.removesuffix(SUFFIX), self.directory) for p in paths
                      if not p.name.startswith(".")]
            self._runs[algorithm] = [r for r in loaded if r is not None and r.config.algorithm == algorithm]
        return self._runs[algorithm]


class RunPool:
    """:class:`RecordPool`'s interface over runs already in memory (a notebook's own, trained at a size whose runs
    are never committed), so that :func:`degenerate` classifies them by the same rule as the committed ones."""

    def __init__(self, runs: Iterable[RunResult]) -> None:
        self._all = list(runs)

    def runs(self, algorithm: str) -> list[RunResult]:
        """The runs of ``algorithm`` among those given."""
        return [r for r in self._all if r.config.algorithm == algorithm]


def degenerate_arms(arms: Mapping[str, Sequence[RunResult]],
                    pool: "RecordPool | RunPool | None" = None) -> dict[str, str]:
    """``{arm: reason}`` for each arm of ``arms`` (name → its runs, one per seed) that is another method in
    disguise by :func:`degenerate` (a declared identity at its resolved hyperparameters, or its test accuracy
    equal to the reference method's bit for bit at every seed); arms that are not are left out. The references
    are looked up in ``pool``, by default the runs of ``arms`` themselves. No arm pins hyperparameters here:
    a set of models (a scatter, a rank correlation) counts each distinct model once, whatever was asked for."""
    pool = RunPool(r for rs in arms.values() for r in rs) if pool is None else pool
    found = {name: degenerate(name, {}, list(rs), pool) for name, rs in arms.items()}  # type: ignore[arg-type]
    return {name: why for name, why in found.items() if why}


def companion_runs(pool: RecordPool, arm: Mapping[str, Any], like: Sequence[RunResult],
                   overrides: Mapping[str, Any] | None = None) -> dict[Hashable, RunResult]:
    """``{seed: run}``: the committed runs of ``arm`` (from the whole records folder, not only the claim's figure)
    in the federation of the runs ``like`` at their seeds, with ``overrides`` applied to that federation (the first
    run of a seed when several match)."""
    if not arm.get("algorithm"):
        raise ValueError(f"a control or ceiling arm needs an algorithm, got {dict(arm)}")
    extra = dict(overrides or {})
    want = {(federation(r.config, **extra), r.config.seed) for r in like}
    out: dict[Hashable, RunResult] = {}
    # fewest hyperparameters set first: a reference is the method as registered, not a control of it
    # (FedAvg at server_lr 0.6 shares FedAvg's federation and seed)
    for r in sorted(pool.runs(str(arm["algorithm"])), key=lambda r: len(r.config.algorithm_params)):
        if (federation(r.config), r.config.seed) in want and matches(r, arm, {}):
            out.setdefault(r.config.seed, r)
    return out


def _chosen(identity: Identity) -> set[str]:
    """The keys of an identity a tuning has to choose to land on it: those whose value is not the method's
    default (FedSWA's α = 1 and λ = 1 are its defaults; its ρ = 1 is a choice)."""
    from fedlab.algorithms import get_algorithm

    defaults = get_algorithm(identity.algorithm, {}).hp.to_dict()
    return {k for k, v in identity.when.items() if not (k in defaults and _same_value(defaults[k], v))}


def degenerate(name: str, arm: Mapping[str, Any], runs: Sequence[RunResult], pool: RecordPool) -> str:
    """Why the arm ``name`` (its ``runs``, one per seed) is degenerate, or "" when it is not (see the module
    docstring). The reason names the identity and how many seeds equal the reference's runs bit for bit."""
    from lab.style import method_label

    if not runs:
        return ""
    pinned = set((arm.get("params") or {}))
    found = [identity_of(r.config) for r in runs]
    declared = found[0] if all(i is found[0] for i in found) else None  # one identity for every seed, or none
    if declared is not None and _chosen(declared) <= pinned:
        return ""  # the claim asks for this cell itself
    references = [declared.reference] if declared is not None else list(REFERENCES)
    for ref in references:
        if ref == runs[0].config.algorithm:
            continue
        partners = companion_runs(pool, {"algorithm": ref}, runs)
        equal = [r.config.seed for r in runs if r.config.seed in partners and same_series(r, partners[r.config.seed])]
        differ = [(r.config.seed, _first_difference(r, partners[r.config.seed])) for r in runs
                  if r.config.seed in partners and r.config.seed not in equal]
        bits = (f"its test accuracy equals {method_label(ref)}'s bit for bit at {len(equal)} of {len(runs)} seeds"
                + (f" (not at seed {', '.join(f'{s}: from round {r}' for s, r in differ)})" if differ else "")
                if partners else f"no {method_label(ref)} record of its federation to compare bit for bit")
        if declared is not None:
            at = ", ".join(f"{k} = {v:g}" if isinstance(v, float) else f"{k} = {v}" for k, v in declared.when.items())
            return f"{name} runs at {at}, where it is {method_label(ref)}: {declared.why}; {bits}"
        if not pinned and partners and len(equal) == len(runs):
            return f"{name}: {bits}"
    return ""


def diverged_arm(name: str, runs: Sequence[RunResult]) -> str:
    """Why the arm ``name`` is not tested because a run of it diverged (:mod:`lab.evidence.divergence`), or ""."""
    from lab.evidence.divergence import run_divergence

    # by seed, not in the order the records come (their keys change with the code): the text is reproducible
    found = sorted(((r.config.seed, why) for r in runs if (why := run_divergence(r))), key=lambda f: f[0])
    if not found:
        return ""
    seeds = ", ".join(str(s) for s, _ in found)
    return f"{name}: {len(found)} of {len(runs)} runs diverged (seed(s) {seeds}; seed {found[0][0]}: {found[0][1]})"


def headroom(ceiling: Mapping[Hashable, float], right: Mapping[Hashable, float]) -> tuple[float, int]:
    """The room above the right arm: mean(ceiling) − mean(right) over the seeds both have, and their number
    (NaN and 0 when none). A ``much_greater`` claim whose margin exceeds it is not testable."""
    seeds = sorted(set(ceiling) & set(right), key=str)
    if not seeds:
        return math.nan, 0
    room = sum(float(ceiling[s]) for s in seeds) / len(seeds) - sum(float(right[s]) for s in seeds) / len(seeds)
    return room, len(seeds)
