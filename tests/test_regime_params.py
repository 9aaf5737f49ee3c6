"""The cpu profile's notebook parameters generated from the rerun plan (lab/regime/params.py): the committed
files are up to date, a notebook built from them trains the plan's own configs, and the plan's seeds per run."""
from __future__ import annotations

import re

import pytest
import yaml

import fedlab
from fedlab.config import Config
from lab.evidence.protocol import notebook_params, rerun_config
from lab.regime import params as rp
from lab.regime import rerun as rr
from lab.regime.pilot import load_criteria


@pytest.fixture(scope="module")
def plan_and_criteria():
    return rr.load_plan(), load_criteria()


def test_every_cpu_parameter_file_holds_the_plans_federation(plan_and_criteria):
    assert rp.stale(*plan_and_criteria) == {}, "run `python -m lab regime rerun-params`"


def test_render_replaces_the_block_and_drops_the_files_own_copies_of_its_keys():
    values = {"model": "mlp", "rounds": 100, "eval_subsample": None}
    text = "# header\nprofile: cpu\nmodel: cnn\nrounds: 30\nalpha: 0.1\n"
    once = rp.render(text, values)
    assert yaml.safe_load(once) == {"profile": "cpu", "model": "mlp", "rounds": 100, "eval_subsample": None,
                                    "alpha": 0.1}
    assert once.index("profile:") < once.index(rp.BEGIN) < once.index("alpha:")
    assert rp.render(once, values) == once
    changed = rp.render(once, {**values, "rounds": 50})
    assert yaml.safe_load(changed)["rounds"] == 50 and changed.count(rp.BEGIN) == 1


def test_notebook_11s_trained_sections_take_notebook_10s_federation():
    """§8–9 of notebook 09b train under ``fed_*`` names: the same federation as the benchmark's, field for field."""
    ours, bench = notebook_params("09b_global_perturbation", "cpu"), notebook_params("10_benchmarks", "cpu")
    for key in ("dataset", "model", "train_size", "test_size", "n_clients", "participation", "rounds", "local_steps",
                "batch_size", "lr", "lr_schedule", "eval_every"):
        want = bench[key + "s"][0] if key in ("dataset", "model") else bench[key]
        assert ours[f"fed_{key}"] == want, f"fed_{key}: notebook 09b has {ours[f'fed_{key}']!r}, notebook 10 {want!r}"


@pytest.mark.parametrize("notebook", rp.NOTEBOOKS)
def test_a_notebook_built_from_its_cpu_parameters_trains_the_plans_configs(notebook, plan_and_criteria):
    """What the notebooks do with these parameters (Config from the federation fields, the split's alpha,
    partition seed fixed, then run_seeds(paired=True) → rerun_config) is the config rerun-train records."""
    plan, criteria = plan_and_criteria
    p = notebook_params(notebook, "cpu")
    one = {k.removesuffix("s"): v[0] for k, v in p.items() if k in ("datasets", "models")}
    fields = {k: p[k] for k in ("dataset", "model", "train_size", "test_size", "n_clients", "participation",
                                "rounds", "local_steps", "batch_size", "lr", "lr_schedule", "eval_every",
                                "eval_subsample") if k in p} | one
    assert p["paired_partitions"] is True and p["rerun_plan"] is True and p["n_seeds"] == len(plan["seeds"])
    base = Config(algorithm="fedsam", algorithm_params={"rho": 0.05}, partition="dirichlet", alpha=0.1,
                  partition_seed=0, **fields)
    item = rr.SeedRun(rr.PlanRun("dirichlet-0.1", "fedsam", "{}", "test"), 3)
    want = rr.run_config(plan, criteria, item, {"rho": 0.05})
    assert rerun_config(base, 3).hashed_fields() == want.hashed_fields()


def test_planned_seeds_follow_the_plan():
    seeds = list(range(6))
    assert rp.planned_seeds("dirichlet-0.1", "fedavg", {}, seeds) == seeds  # a claim's arm: every seed
    assert rp.planned_seeds("dirichlet-0.1", "fedvssam", {"gamma_l": 0.4}, seeds) == seeds[:3]  # a figure only
    assert rp.planned_seeds("pathological-3", "fedavg", None, seeds) == []  # a split the plan does not train
    assert rp.planned_seeds("dirichlet-0.1", "fedvssam", {"gamma_l": 0.123}, seeds) == []
    assert rp.planned_seeds("dirichlet-0.1", "fedavg", {}, [4, 5]) == [4, 5]
    # the plan spells FedNSAM's paper arm with momentum_overwrite_bug: false, the method's default: the same run
    assert rp.planned_seeds("dirichlet-0.1", "fednsam", {"variant": "paper"}, seeds) == seeds
    default_alpha = fedlab.get_algorithm("mofedsam").hp.alpha  # not tuned: at its default it is the tuned run
    assert rp.planned_seeds("dirichlet-0.1", "mofedsam", {"alpha": default_alpha}, seeds) == seeds
    assert rp.planned_seeds("dirichlet-0.1", "mofedsam", {"alpha": default_alpha + 0.3}, seeds) == []


def test_plan_seeds_uses_the_plan_only_when_asked_and_refuses_an_unplanned_required_run():
    cfg = Config(algorithm="fedvssam", partition="dirichlet", alpha=0.1)
    assert rp.plan_seeds(cfg, {"gamma_l": 0.123}, [0, 1], use_plan=False) == [0, 1]
    assert rp.plan_seeds(cfg, {"gamma_l": 0.4}, range(6), use_plan=True) == [0, 1, 2]
    assert rp.plan_seeds(cfg, {"gamma_l": 0.123}, range(6), use_plan=True, required=False) == []
    with pytest.raises(ValueError, match="does not train fedvssam"):
        rp.plan_seeds(cfg, {"gamma_l": 0.123}, range(6), use_plan=True)


@pytest.mark.parametrize("notebook", rp.NOTEBOOKS)
def test_a_notebooks_closing_section_states_the_regime_its_cpu_parameters_hold(notebook):
    """The row of the closing section (``lab.tools.how_made``) that introduces ``params/<notebook>.cpu.yaml``, in
    the committed .ipynb that the book shows, gives that file's rounds, K, η, clients and seeds, and none of the
    K = 5 profile's, which the generated federation block replaced."""
    import nbformat

    p = notebook_params(notebook, "cpu")
    nb = nbformat.read(f"notebooks/{notebook}.ipynb", as_version=4)
    name = f"`notebooks/params/{notebook}.cpu.yaml`"
    rows = [line for c in nb.cells if c.cell_type == "markdown" for line in c.source.splitlines()
            if line.startswith("| `cpu` |") and name in line]
    assert len(rows) == 1, f"{notebook}: {len(rows)} rows introduce {name}"
    text = rows[0]
    for want in (f"{p['rounds']} rounds of K = {p['local_steps']} local steps at η = {p['lr']:g}",
                 f"{p['n_clients']} clients", f"{100 * p['participation']:.0f}% per round", f"{p['n_seeds']} seeds"):
        assert want in text, f"{notebook}: the row of {name} does not say {want!r}: {text}"
    for stale in (r"K = 5\b", r"\b30 rounds", "60 000", "all of Fashion-MNIST", "GroupNorm CNN"):
        assert not re.search(stale, text), f"{notebook}: the row of {name} still says {stale!r}"
