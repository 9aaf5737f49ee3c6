"""A method added by the checklist alone (``notebooks/book/guide/methods.md``, "Adding a method") passes the
registry, contract, label and tuning-grid tests, run on it as they run on every registered method (issue 44).

What the checklist asks, and nothing else, is done here: the module (loaded into ``fedlab.algorithms`` from a
temporary file), its rows in the table of cases with its float64 reference (the dummy is FedSAM's math under
another name, so FedSAM's reference is its reference), and a ``## dummysam`` section of the methods page. The
lists of methods, the labels, the colours and the tuning grid are not touched: they come from the class. The
registry, the table, the reference and the page are restored afterwards (checked).
"""
from __future__ import annotations

import importlib.util
import sys

import pytest

import cases
import reference
import test_contract
import test_registry
import test_tuning
from cases import Case, Reduction
from fedlab.algorithms import _registry, algorithm_classes, algorithm_names
from fedlab.tuning import default_grid
from test_contract import world  # noqa: F401  (the contract's federation, a fixture)

pytestmark = pytest.mark.usefixtures("one_thread")  # as the contract suite: one intra-op thread

NAME = "dummysam"
MODULE = '''"""DummySAM — FedSAM under another name, the method tests/test_new_method.py adds (Nobody et al., ICML 2099).

Client, K steps:  g = ∇f_i(θ; ξ),  θ ← θ − η_t (clip(∇f_i(θ + ρ g/(‖g‖ + ε); ξ), C) + wd·θ).
Server:           θ^{t+1} = θ^t + η_g · (1/m) Σ_{i∈S_t} Δ_i.
Communication per round: down 1·d, up 1·d. Two gradients per step. Paper vs code: METHODS_PAGE_SECTION.
"""
from __future__ import annotations

from dataclasses import dataclass

from fedlab.algorithms._registry import register
from fedlab.algorithms.base import descend, hparam
from fedlab.algorithms.fedavg import FedAvg, FedAvgParams
from fedlab.algorithms.sam import sam_gradient, sam_radii


@dataclass(frozen=True)
class DummySAMParams(FedAvgParams):
    rho: float = hparam(0.07, lo=0)  # the paper's radius
    eps: float = hparam(1e-12, lo=0)


@register
class DummySAM(FedAvg):
    name = "dummysam"
    label, color, order = "DummySAM", "#123456", 99
    paper = "Nobody et al., ICML 2099"
    hparams_cls = DummySAMParams
    tuning = {"rho": sam_radii(DummySAMParams.rho)}
    grad_evals_per_step = 2

    def local_step(self, theta, cstate, msg, batch, grad_fn, step):
        g, loss = grad_fn(theta, batch)
        g_sam, _ = sam_gradient(theta, g, self.hp.rho, batch, grad_fn, self.hp.eps)
        return descend(theta, g_sam, step), cstate, loss
'''.replace("METHODS_PAGE_SECTION", "guide/methods.md" + "#" + NAME)  # assembled: the section exists only while the test runs
ROWS = (
    Case(NAME, NAME, {}, 1, 1, 2, reduces_to=Reduction({"rho": 0.0}, "fedavg")),
    Case(NAME, f"{NAME}-rho", {"rho": 0.2, "server_lr": 0.8}, 1, 1, 2),
)
SECTION = f"\n## {NAME}\n\nDummySAM is FedSAM under another name; its paper and code do not disagree.\n"


@pytest.fixture
def added(tmp_path, monkeypatch):
    """The dummy method added by the checklist: module, case rows (+ reference), methods-page section."""
    path = tmp_path / f"{NAME}.py"
    path.write_text(MODULE, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"fedlab.algorithms.{NAME}", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    try:
        spec.loader.exec_module(module)  # its @register adds it to the registry
        for mod in (cases, test_contract):
            monkeypatch.setattr(mod, "CASES", cases.CASES + ROWS)
        monkeypatch.setitem(cases.DEFAULTS, NAME, ROWS[0])  # test_registry reads the same dict
        monkeypatch.setitem(reference.METHODS, NAME, reference.METHODS["fedsam"])
        monkeypatch.setattr(test_registry, "METHODS_PAGE", test_registry.METHODS_PAGE + SECTION)
        yield module
    finally:
        _registry._REGISTRY.pop(NAME, None)
        monkeypatch.undo()
        assert NAME not in algorithm_names() and NAME not in cases.DEFAULTS and NAME not in reference.METHODS
        assert f"## {NAME}" not in test_registry.METHODS_PAGE and test_contract.CASES is cases.CASES
        assert f"fedlab.algorithms.{NAME}" not in sys.modules


def test_registry_tests_pass_for_the_new_method(added, tiny, tmp_path):
    assert NAME in algorithm_names() and algorithm_classes()[-1].name == NAME  # order 99: last in figures
    test_registry.test_every_method_of_the_table_is_registered()
    test_registry.test_registry_metadata(NAME)
    test_registry.test_methods_page_has_one_section_per_registered_method()
    test_registry.test_three_rounds_deterministic_resumable_and_honest_about_communication(NAME, tiny, tmp_path)


def test_contract_tests_pass_for_the_new_method(added, world):  # noqa: F811
    test_contract.test_table_covers_every_registered_method()
    for case in ROWS:
        test_contract.test_hyperparameters_and_gradient_count_per_step(case)
        test_contract.test_communication_and_gradient_evaluations_through_the_engine(case, world)
        for mode in ("fixed", "epoch"):
            for executor in test_contract.EXECUTORS:
                if (mode, executor) != ("epoch", "vmap"):  # as the suite: vmap needs one K for every client
                    test_contract.test_engine_matches_independent_reference(case, mode, executor, world)
    test_contract.test_reduction_is_exact(ROWS[0], world)
    # (test_client_state_read_at_a_third_participation skips stateless methods such as this one)


def test_label_and_tuning_grid_tests_pass_for_the_new_method(added):
    test_registry.test_facts_stated_on_the_class(NAME)
    test_registry.test_no_two_methods_share_a_label_colour_or_place()
    test_tuning.test_default_grid_names_real_hyperparameters(NAME)
    test_tuning.test_default_grids_are_the_preregistered_ones()
    # the grid is derived from the declared default: the SAM radii and the paper's 0.07
    assert default_grid(NAME) == {"rho": (0.0, 0.01, 0.02, 0.05, 0.07)}
