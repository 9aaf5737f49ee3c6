"""An amendment to the pilot's pre-registered criteria: rules added before the runs they govern.

``criteria.yaml`` may not change once a record names its digest; a case it did not foresee, or a
measurement defect found on the way, is handled by a new file that names (and is refused unless it
matches) the digest of the criteria it amends, states its reasons, and is committed before the runs it
changes. Amendment 1 (``amendment1.yaml``) governs stage B:

* ``stage_b.order`` — the candidates stage B runs, in order (stage A's R3 met only where R1 was missed);
* ``stage_b.fixed`` — :class:`fedlab.Config` fields that override the criteria's ``fixed`` in stage B
  (``parallel_clients: 1``, so a number does not depend on the load it ran under);
* ``outcome.require`` — tiers of criteria: the regime is the first candidate of the order meeting every
  criterion of the first tier, else of the next (read by :func:`lab.regime.decide.amended_outcome`).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

AMENDMENT_FILE = Path(__file__).with_name("amendment1.yaml")
CRITERIA_NAMES = ("R1", "R2", "R3", "R4", "R5")


@dataclass(frozen=True)
class Amendment:
    """The parts of an amendment file the plan and the decision read (``raw``: the whole file)."""

    path: Path
    digest: str  # SHA-256 of the file's bytes: every stage-B record names it
    stage_fixed: dict[str, dict[str, Any]]  # stage → Config fields overriding the criteria's ``fixed``
    order: tuple[str, ...]
    require: tuple[tuple[str, ...], ...]
    raw: dict[str, Any] = field(repr=False)


def load_amendment(path: str | Path, criteria_digest: str, candidates: Any) -> Amendment:
    """Read and check an amendment of the criteria whose digest is ``criteria_digest``.

    Refused with :class:`lab.regime.criteria.CriteriaError` naming the file and the field: a file that is
    not a YAML mapping, ``amends.sha256`` other than the criteria's digest (an amendment of other
    criteria), an ``order`` naming no declared candidate or repeating one, a ``fixed`` field that
    :class:`fedlab.Config` does not have, ``require`` tiers that are not lists of R1–R5."""
    from fedlab.config import Config
    # the study files' error under the criteria's name for it, taken from below: the criteria read this module
    from lab.study.spec import StudyError as CriteriaError, read_design

    path = Path(path)
    data, raw = read_design(path, "amendment")
    amends = (raw.get("amends") or {}).get("sha256") if isinstance(raw.get("amends"), dict) else None
    if amends != criteria_digest:
        raise CriteriaError(f"{path}: amends.sha256={amends!r} is not the digest of the criteria it is read with "
                            f"({criteria_digest[:12]}…): it amends other criteria")
    stage_b = raw.get("stage_b")
    if not isinstance(stage_b, dict):
        raise CriteriaError(f"{path}: stage_b is missing or not a mapping")
    order = stage_b.get("order")
    if not isinstance(order, list) or not order or len(set(order)) != len(order) \
            or any(c not in candidates for c in order):
        raise CriteriaError(f"{path}: stage_b.order={order!r} must list distinct declared candidates "
                            f"({', '.join(candidates)})")
    fixed = stage_b.get("fixed") or {}
    known = {f.name for f in fields(Config)}
    if not isinstance(fixed, dict) or any(k not in known for k in fixed):
        bad = sorted(set(fixed) - known) if isinstance(fixed, dict) else fixed
        raise CriteriaError(f"{path}: stage_b.fixed has {bad!r}, which is not a Config field")
    tiers = (raw.get("outcome") or {}).get("require") if isinstance(raw.get("outcome"), dict) else None
    if not isinstance(tiers, list) or not tiers or not all(
            isinstance(t, list) and t and all(k in CRITERIA_NAMES for k in t) for t in tiers):
        raise CriteriaError(f"{path}: outcome.require={tiers!r} must be a non-empty list of non-empty lists of "
                            f"{', '.join(CRITERIA_NAMES)}")
    return Amendment(path, hashlib.sha256(data).hexdigest(), {"B": dict(fixed)}, tuple(order),
                     tuple(tuple(t) for t in tiers), raw)
