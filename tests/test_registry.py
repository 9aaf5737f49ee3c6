"""Every registered algorithm through the real engine: runs, is deterministic, resumes bit-identically,
and reports the communication it actually performs. Expectations come from the one table of cases
(``tests/cases.py``); the update math itself is checked by ``tests/test_contract.py``."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pandas as pd
import pytest
import torch

import fedlab
from cases import DEFAULTS, communication
from fedlab.algorithms import algorithm_class, algorithm_classes, algorithm_names
from fedlab.engine.accounting import communication_vectors

METHODS_PAGE_PATH = Path(__file__).resolve().parent.parent / "notebooks" / "book" / "guide" / "methods.md"
METHODS_PAGE = METHODS_PAGE_PATH.read_text()
NAMES = algorithm_names()
COLUMNS = ["round", "lr", "train_loss", "test_acc", "test_loss", "flatness_distance", "uplink_floats",
           "downlink_floats"]


def test_every_method_of_the_table_is_registered():
    missing = set(DEFAULTS) - set(algorithm_names())
    assert not missing, f"not registered: {sorted(missing)}"


def _floats(n: float) -> str:
    return f"{n:g}·d"


@pytest.mark.parametrize("name", NAMES)
def test_registry_metadata(name):
    cls = algorithm_class(name)
    assert cls.paper and cls.state_where
    assert cls.grad_evals_per_step == DEFAULTS[name].grads
    # the method's own module (importlib: ``__import__("fedlab.algorithms.x")`` returns ``fedlab``)
    module = importlib.import_module(cls.__module__)
    assert module.__name__ == f"fedlab.algorithms.{module.__name__.rsplit('.', 1)[-1]}" != "fedlab"
    doc = module.__doc__ or ""
    # it cites the paper of ``cls.paper`` (first author and year) ...
    # (a paper whose authors are not public yet is named by its code's repository, owner/name, instead)
    author = re.search(r"([A-Z][a-z]+) et al\.", cls.paper) or re.search(r"code [\w-]+/[\w-]+", cls.paper)
    year = re.search(r"(19|20)\d\d", cls.paper)
    assert author and year, f"{name}.paper = {cls.paper!r} names no 'Author et al.' (or code owner/name) and year"
    assert author.group(0) in doc and year.group(0) in doc, f"{name}: docstring does not cite {cls.paper!r}"
    # ... states an update rule (an assignment to the model) ...
    assert "θ" in doc and ("←" in doc or "θ^{t+1}" in doc), f"{name}: docstring states no update rule"
    # ... and the communication of the table
    up, down = communication(name)
    low = doc.lower()
    assert f"down {_floats(down)}" in low and f"up {_floats(up)}" in low, \
        f"{name}: docstring does not state 'down {_floats(down)}' and 'up {_floats(up)}'"
    for preset in cls.presets:
        fedlab.get_algorithm(name, preset=preset)
    # ... and points to its section of the book's methods page (paper vs code), which exists
    assert f"guide/methods.md#{name}" in doc, f"{name}: docstring does not point to guide/methods.md#{name}"
    assert f"\n## {name}\n" in METHODS_PAGE, f"{name}: no '## {name}' section in {METHODS_PAGE_PATH}"


@pytest.mark.parametrize("name", NAMES)
def test_facts_stated_on_the_class(name):
    """What figures, tables and ``fedlab.tune`` show of a method is stated by its own class (an inherited
    label, colour or grid would be its parent's), and the lab's style reads it from there."""
    from lab.style import method_color, method_label

    cls = algorithm_class(name)
    missing = [a for a in ("label", "color", "order", "paper", "tuning") if a not in vars(cls)]
    assert not missing, f"{name}: {cls.__name__} does not state {missing} itself"
    assert isinstance(cls.label, str) and cls.label.strip(), name
    assert re.fullmatch(r"#[0-9a-f]{6}", cls.color), f"{name}: color {cls.color!r} is not '#rrggbb'"
    assert type(cls.order) is int, f"{name}: order {cls.order!r} is not an integer"
    assert (method_label(name), method_color(name)) == (cls.label, cls.color)


def test_no_two_methods_share_a_label_colour_or_place():
    for attr in ("label", "color", "order"):
        holders: dict = {}
        for cls in algorithm_classes():
            holders.setdefault(getattr(cls, attr), []).append(cls.name)
        shared = {value: names for value, names in holders.items() if len(names) > 1}
        assert not shared, f"{attr} shared by {shared}; taken: {sorted(holders)}"


def test_methods_page_has_one_section_per_registered_method():
    sections = re.findall(r"^## (\S+)$", METHODS_PAGE, flags=re.MULTILINE)
    assert sorted(sections) == sorted(algorithm_names()), "methods page sections differ from the registry"


@pytest.mark.parametrize("name", NAMES)
def test_three_rounds_deterministic_resumable_and_honest_about_communication(name, tiny, tmp_path):
    cfg = dict(algorithm=name, rounds=3, eval_every=1, checkpoint_every=1)
    a = fedlab.run(tiny(runs_dir=str(tmp_path / "a"), **cfg), progress=False)
    b = fedlab.run(tiny(runs_dir=str(tmp_path / "b"), **cfg), progress=False)
    # three rounds on digits may not leave chance level (status "collapsed"); this test is about
    # determinism and communication, so any terminal status without divergence is fine
    assert a.status in ("finished", "collapsed"), a.status
    assert torch.isfinite(a.theta).all()
    pd.testing.assert_frame_equal(a.metrics[COLUMNS], b.metrics[COLUMNS])
    assert torch.equal(a.theta, b.theta)

    part = fedlab.run(tiny(runs_dir=str(tmp_path / "c"), **cfg), progress=False, stop_after_rounds=2)
    assert part.status == "running"
    resumed = fedlab.run(tiny(runs_dir=str(tmp_path / "c"), **cfg), progress=False)
    pd.testing.assert_frame_equal(a.metrics[COLUMNS], resumed.metrics[COLUMNS])
    assert torch.equal(a.theta, resumed.theta)

    d = a.theta.numel()
    m = int(a.metrics["n_sampled"].iloc[0])
    case = DEFAULTS[name]
    # lab.bench.speed measures what the method sends; it must agree with the table
    assert communication_vectors(name) == (case.up, case.down)
    # the engine's per-round counts are the vectors the method really sent, m clients per round
    assert (a.metrics["downlink_floats"] == (round(case.down * d) + case.down_scalars) * m).all()
    assert (a.metrics["uplink_floats"] == (round(case.up * d) + case.up_scalars) * m).all()
