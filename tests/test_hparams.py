"""Hyperparameter checks come from the declarations (issue 13 item 5): one table of every field of every
registered algorithm, built from ``dataclasses.fields`` and the type hints, drives the same checks —
a wrong type, a bool for a number, a string outside a ``Literal``, a number outside its ``Interval`` is
rejected with a message naming the algorithm, the field, the value and what is allowed; the
boundaries and every ``Literal`` choice are accepted."""
from __future__ import annotations

import dataclasses
import math
import re
import typing

import pytest

from fedlab.algorithms import algorithm_class, algorithm_names, get_algorithm
from fedlab.algorithms.base import Interval


def _fields():
    for name in algorithm_names():
        cls = algorithm_class(name).hparams_cls
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            hint = hints[f.name]
            base = [a for a in typing.get_args(hint) if a is not type(None)][0] if typing.get_origin(hint) in (
                typing.Union, __import__("types").UnionType) else hint
            yield pytest.param(name, f, base, id=f"{name}.{f.name}")


FIELDS = list(_fields())


def _rejected(name: str, field: str, value: object, allowed: str) -> None:
    with pytest.raises(ValueError) as err:
        get_algorithm(name, **{field: value})
    text = str(err.value)
    assert f"'{name}'" in text and f"{field}={value!r}" in text and allowed in text, text


def _accepted_by_field_check(name: str, field: str, value: object) -> None:
    try:
        get_algorithm(name, **{field: value})
    except ValueError as err:  # only a bound between fields (HParams.validate) may still refuse it
        assert str(err).startswith(f"algorithm_params for '{name}': "), str(err)


def test_every_number_has_an_interval():
    for param in FIELDS:
        name, f, base = param.values
        if base in (int, float):
            assert isinstance(f.metadata.get("interval"), Interval), f"{name}.{f.name} declares no interval"


@pytest.mark.parametrize("name, f, base", FIELDS)
def test_field_checked_from_its_declaration(name, f, base):
    default = getattr(algorithm_class(name).hparams_cls(), f.name)
    get_algorithm(name, **{f.name: default})  # the declared default is allowed
    if typing.get_origin(base) is typing.Literal:
        for choice in typing.get_args(base):
            get_algorithm(name, **{f.name: choice})
        _rejected(name, f.name, "no_such_choice", "one of " + repr(typing.get_args(base)[0]))
        return
    if base is bool:
        _rejected(name, f.name, 1, "True or False")
        _rejected(name, f.name, "yes", "True or False")
        return
    assert base in (int, float), f"{name}.{f.name}: unexpected annotation {base!r}"
    _rejected(name, f.name, True, "(not a bool)")
    _rejected(name, f.name, "0.1", "(not a bool)")
    interval: Interval = f.metadata["interval"]
    if base is float:
        _rejected(name, f.name, math.inf, str(interval))
        _rejected(name, f.name, math.nan, str(interval))
    else:
        _rejected(name, f.name, 2.5, "an integer")
    for bound, is_open, step in ((interval.lo, interval.lo_open, -1), (interval.hi, interval.hi_open, +1)):
        if bound is None:
            continue
        bound = int(bound) if base is int else float(bound)
        if is_open:
            _rejected(name, f.name, bound, str(interval))
        else:
            _accepted_by_field_check(name, f.name, bound)  # a closed end is allowed
        outside = bound + step if base is int else bound + step * max(1.0, abs(bound))
        _rejected(name, f.name, outside, str(interval))


@pytest.mark.parametrize("interval, text", [
    (Interval(0), "[0, inf)"), (Interval(0, 1, hi_open=True), "[0, 1)"),
    (Interval(0, lo_open=True), "(0, inf)"), (Interval(None, 2), "(-inf, 2]"),
])
def test_interval_notation(interval, text):
    assert str(interval) == text


def test_a_bound_between_fields_names_the_algorithm():
    with pytest.raises(ValueError, match=re.escape("algorithm_params for 'fedsmoo_adaptive': lam_max must be in "
                                                   "[0.2, inf) (got 0.1)")):
        get_algorithm("fedsmoo_adaptive", lam_min=0.2, lam_max=0.1)
