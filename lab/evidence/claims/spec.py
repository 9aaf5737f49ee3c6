"""A claim as data: what ``figures/claims.yaml`` declares of one paper's claim, read and checked.

A claim names a paper's statement, the figure whose committed evidence judges it (``setting``), the metric, a
left arm, an op and the right arms (each a method, optionally with hyperparameters, a config or a label), and
what a reader needs beside fedlab's number: the paper's own ``effect``, labelled ``hypotheses`` (each naming the
run that would test it), the Holm ``family``, a non-inferiority claim's ``smallest_effect``, the controls it
``requires``, a ``much_greater`` claim's ``ceiling`` and the failure map's arm that also tests it (``map``). :func:`load_claims` reads and checks the file; how a
claim is read from its evidence is :mod:`lab.evidence.claims.reading`.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.repro import FIGURES_DIR
from lab.style import method_label

__all__ = ["CLAIMS_FILE", "KINDS", "NO_DATA", "OPS", "Claim", "arm_name", "figures_root", "leaning", "load_claims",
           "load_families"]

CLAIMS_FILE: Path = FIGURES_DIR / "claims.yaml"
KINDS = ("claim", "control", "sanity")
NO_DATA = "no data"  # an arm no committed record matches: declared for the rerun
OPS = (">", "<", ">=", "<=", "approx", "much_greater", "abs_le")


@dataclass(frozen=True)
class Claim:
    """One claim of ``figures/claims.yaml``, checked (:meth:`from_dict`; the fields are the module docstring's)."""

    id: str
    claim: str
    paper: str
    where: str
    notebook: str
    figure: str
    select: dict[str, Any]
    metric: Any
    left: dict[str, Any]
    op: str
    right: list[dict[str, Any]]
    tol: float = 0.0
    margin: float = 0.0
    cost: dict[str, float] | None = None
    reasons: dict[str, str] = field(default_factory=dict)  # verdict -> a hypothesis (labelled), shown with that verdict
    kind: str = "claim"  # claim | control | sanity (see the module docstring)
    effect: dict[str, Any] = field(default_factory=dict)  # the paper's own effect: value, unit, where, left, right
    hypotheses: dict[str, dict[str, str]] = field(default_factory=dict)  # verdict -> {hypothesis, test}
    controls: str = ""  # a control: the id of the claim whose mechanism it separates
    family: str = ""  # the Holm family (figures/claims.yaml `families`); "" : a family of its own
    smallest_effect: dict[str, Any] = field(default_factory=dict)  # >= / <=: {value | of, times, reason}
    requires: list[dict[str, Any]] = field(default_factory=list)  # controls without which it is confounded
    ceiling: dict[str, Any] = field(default_factory=dict)  # much_greater: the arm that bounds the room
    not_testable: str = ""  # why the claim is outside what fedlab can test ("": it is tested)
    map_arm: str = ""  # the failure map's FedSAM arm that also tests it (lab.evidence.map_table), "" when none

    @property
    def family_name(self) -> str:
        """The Holm family this claim's comparisons are adjusted in (its own when it declares none)."""
        return self.family or f"claim {self.id}"

    def paper_effect(self) -> str:
        """The paper's effect in words: ``"+10.2 points (50.3 vs 40.1; §2 table, CIFAR-100 Dir 0.1)"``."""
        e = self.effect
        if not e:
            return "–"
        if "value" not in e:
            return str(e.get("text", "–"))
        unit = e.get("unit", "points")
        text = f"{float(e['value']):+g} {unit}" if isinstance(e["value"], (int, float)) else str(e["value"])
        vs = f"{e['left']:g} vs {e['right']:g}" if isinstance(e.get("left"), (int, float)) and \
            isinstance(e.get("right"), (int, float)) else ""
        where = "; ".join(x for x in (vs, str(e.get("where", ""))) if x)
        return f"{text} ({where})" if where else text

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Claim":
        where = f"claim {d.get('id', '?')!r}"
        missing = [k for k in ("id", "claim", "source", "setting", "metric", "left", "op") if k not in d]
        if missing:
            raise ValueError(f"{where}: missing field(s) {missing}")
        if d["op"] not in OPS:
            raise ValueError(f"{where}: op={d['op']!r} is invalid; allowed: {', '.join(OPS)}")
        right = d.get("right", [])
        right = [right] if isinstance(right, Mapping) else list(right)
        if d["op"] != "abs_le" and not right:
            raise ValueError(f"{where}: op {d['op']!r} needs a right arm")
        metric = d["metric"]
        kind = str(d.get("kind", "claim"))
        if kind not in KINDS:
            raise ValueError(f"{where}: kind={kind!r} is invalid; allowed: {', '.join(KINDS)}")
        hypotheses = _hypotheses(where, d.get("hypotheses"))
        if not (metric in ("final_test_acc", "mean_flatness_distance")
                or (isinstance(metric, Mapping) and "column" in metric)):
            raise ValueError(f"{where}: metric={metric!r} is invalid; allowed: final_test_acc, "
                             "mean_flatness_distance, or {column: <name>, arm_column: <name>}")
        op = str(d["op"])
        family = str(d.get("family") or "")
        if family and op in ("approx", "abs_le"):
            raise ValueError(f"{where}: family={family!r}, but op {op!r} is an equivalence test with no single "
                             "p-value; leave it out of a family")
        smallest = _smallest_effect(where, op, d)
        ceiling = dict(d.get("ceiling") or {})
        if ceiling and (op != "much_greater" or not ceiling.get("algorithm")):
            raise ValueError(f"{where}: ceiling={ceiling!r} is invalid; allowed: an arm with an algorithm, on a "
                             "much_greater claim (whose margin the room can rule out)")
        requires = d.get("requires") or []
        requires = [requires] if isinstance(requires, Mapping) else list(requires)
        if any(not isinstance(a, Mapping) or not a.get("algorithm") for a in requires):
            raise ValueError(f"{where}: requires={requires!r} is invalid; allowed: a list of arms, each with an "
                             "algorithm (and params / config)")
        not_testable = d.get("not_testable") or ""
        if not_testable and not (isinstance(not_testable, Mapping) and str(not_testable.get("reason", "")).strip()):
            raise ValueError(f"{where}: not_testable={not_testable!r} is invalid; allowed: {{reason: <why fedlab "
                             "cannot test the claim>}")
        on_map = d.get("map")
        if on_map is not None and not (isinstance(on_map, Mapping) and isinstance(on_map.get("arm"), str)
                                       and on_map["arm"]):
            raise ValueError(f"{where}: map={d.get('map')!r} is invalid; allowed: {{arm: <a SAM arm of "
                             "lab/study/failure_map.yaml, e.g. fedsam-0.05>}")
        return cls(id=str(d["id"]), claim=str(d["claim"]), paper=str(d["source"]["paper"]),
                   where=str(d["source"].get("where", "")), notebook=str(d["setting"]["notebook"]),
                   figure=str(d["setting"]["figure"]), select=dict(d["setting"].get("select") or {}),
                   metric=metric, left=dict(d["left"] or {}), op=op, right=right,
                   tol=float(d.get("tol", 0.0)), margin=float(d.get("margin", 0.0)), cost=d.get("cost"),
                   reasons=_reasons(where, d.get("reasons")) | _hypothesis_texts(hypotheses),
                   kind=kind, effect=dict(d.get("effect") or {}), hypotheses=hypotheses,
                   controls=str(d.get("controls", "")), family=family, smallest_effect=smallest,
                   requires=[dict(a) for a in requires], ceiling=ceiling,
                   not_testable=str(not_testable["reason"]) if not_testable else "",
                   map_arm=str(on_map["arm"]) if on_map is not None else "")


def _smallest_effect(where: str, op: str, d: Mapping[str, Any]) -> dict[str, Any]:
    """The checked ``smallest_effect`` of a non-inferiority claim: ``{value, reason}`` (a number in the metric's
    unit, 0.01 = 1 point) or ``{of, times, reason}`` (``times`` × |the mean paired difference| of claim ``of``'s
    first comparison); {} when the claim gives none."""
    value = d.get("smallest_effect")
    if value is None:
        return {}
    if op not in (">=", "<="):
        raise ValueError(f"{where}: smallest_effect is the margin of a non-inferiority claim (op >= or <=), "
                         f"not of op {op!r}")
    if "margin" in d:
        raise ValueError(f"{where}: give smallest_effect or margin, not both")
    if not isinstance(value, Mapping) or not str(value.get("reason", "")).strip():
        raise ValueError(f"{where}: smallest_effect needs a reason, and a value or an 'of' (claim id)")
    if ("value" in value) == ("of" in value):
        raise ValueError(f"{where}: smallest_effect takes either value (a number) or of (a claim id), got "
                         f"{sorted(value)}")
    if "value" in value:
        number = value["value"]
        if isinstance(number, bool) or not isinstance(number, (int, float)) or number < 0:
            raise ValueError(f"{where}: smallest_effect.value={number!r} is invalid; allowed: a number ≥ 0")
        return {"value": float(number), "reason": str(value["reason"])}
    times = value.get("times", 1.0)
    if isinstance(times, bool) or not isinstance(times, (int, float)) or times <= 0:
        raise ValueError(f"{where}: smallest_effect.times={times!r} is invalid; allowed: a number > 0")
    return {"of": str(value["of"]), "times": float(times), "reason": str(value["reason"])}


def _hypotheses(where: str, value: Any) -> dict[str, dict[str, str]]:
    """``{verdict: {hypothesis, test}}``: each hypothesis must name the run that would test it."""
    out: dict[str, dict[str, str]] = {}
    for verdict, h in dict(value or {}).items():
        if verdict not in ("fails", "inconclusive"):
            raise ValueError(f"{where}: hypotheses may be given for the verdicts fails and inconclusive, not {verdict!r}")
        if not isinstance(h, Mapping) or not h.get("hypothesis") or not h.get("test"):
            raise ValueError(f"{where}: hypotheses.{verdict} needs 'hypothesis' and 'test' (the run that would test it)")
        out[verdict] = {"hypothesis": str(h["hypothesis"]), "test": str(h["test"])}
    return out


def _hypothesis_texts(hypotheses: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    return {v: f"hypothesis (untested): {h['hypothesis']} — would be tested by: {h['test']}"
            for v, h in hypotheses.items()}


def _reasons(where: str, value: Any) -> dict[str, str]:
    reasons = dict(value or {})
    bad = sorted(set(reasons) - {"fails", "inconclusive"})
    if bad:
        raise ValueError(f"{where}: reasons may be given for the verdicts fails and inconclusive, not {bad}")
    return {k: str(v) for k, v in reasons.items()}


def leaning(claim: Claim, differences: Sequence[float], what: str, why: str) -> str:
    """Which way the left − right ``differences`` of an ordering claim point, in words (``what`` point ...
    (``why``)), or "" when the claim orders nothing, no difference is given, or they point both ways."""
    op = claim.op
    if not differences or op not in (">", ">=", "<", "<=", "much_greater"):
        return ""
    sign = -1.0 if op in ("<", "<=") else 1.0
    margin = claim.margin if op == "much_greater" else 0.0
    gaps = [sign * d for d in differences]
    if any(g < 0 for g in gaps):
        return f"{what} point against the claim ({why})"
    if all(g > margin for g in gaps):
        return f"{what} point the claimed way ({why})"
    return ""


def figures_root() -> Path:
    """The evidence folder claims are judged from: ``$FEDLAB_FIGURES`` if set (a copy, e.g. to test a
    damaged file without touching the committed ones), else ``figures/`` of this repository."""
    env = os.environ.get("FEDLAB_FIGURES")
    return Path(env).expanduser() if env else FIGURES_DIR


def load_claims(path: Path | None = None) -> list[Claim]:
    """The claims of ``path`` (default ``<figures>/claims.yaml``), checked: unique ids, every ``family`` declared
    under ``families``, every ``smallest_effect.of`` a claim of the file."""
    path = figures_root() / CLAIMS_FILE.name if path is None else Path(path)
    data = _read_yaml(path)
    claims = [Claim.from_dict(d) for d in data.get("claims", [])]
    ids = [c.id for c in claims]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ValueError(f"{path}: duplicate claim id(s) {dup}")
    families = load_families(path)
    for c in claims:
        if c.family and c.family not in families:
            raise ValueError(f"{path}: claim {c.id!r}: family={c.family!r} is not declared under families "
                             f"(declared: {', '.join(families) or 'none'})")
        if c.smallest_effect.get("of") and c.smallest_effect["of"] not in ids:
            raise ValueError(f"{path}: claim {c.id!r}: smallest_effect.of={c.smallest_effect['of']!r} is no claim "
                             "of the file")
    return claims


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(Path(path).read_text()) or {}


def load_families(path: Path | None = None) -> dict[str, str]:
    """``{family: what it groups}`` of the ``families`` block of ``path`` (default ``<figures>/claims.yaml``): the
    groups inside which Holm's step-down controls the family-wise error."""
    path = figures_root() / CLAIMS_FILE.name if path is None else Path(path)
    block = _read_yaml(path).get("families") or {}
    if not isinstance(block, Mapping) or any(not isinstance(v, Mapping) or not v.get("what") for v in block.values()):
        raise ValueError(f"{path}: families must map each name to {{what: <the claims it groups>}}")
    return {str(k): str(v["what"]) for k, v in block.items()}


def arm_name(arm: Mapping[str, Any]) -> str:
    """An arm as tables name it: its ``label``, else its method's label (or ``name``) with its settings in
    brackets (``FedVSSAM [gu=False]``); ``value`` for a one-arm claim's empty arm."""
    if not arm:
        return "value"
    text = arm.get("name") or method_label(arm.get("algorithm", "?"))
    if arm.get("label"):
        return str(arm["label"])
    settings = {**(arm.get("params") or {}), **(arm.get("config") or {})}
    if settings:
        text += " [" + ", ".join(f"{k}={v}" for k, v in settings.items()) + "]"
    return text
