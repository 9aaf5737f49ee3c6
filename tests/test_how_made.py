"""Each notebook's closing "How this evidence was made" section is written from its parameters, never by hand."""
from __future__ import annotations

import re

import pytest

from lab.tools import how_made as hm

NOTEBOOKS = [p.stem for p in sorted(hm.NB_DIR.glob("[0-9][0-9]*_*.py")) if p.stem not in hm.SKIPPED]

TINY = '''# %% [markdown]
# # 99 · A tiny notebook
#
# Text.

# %% tags=["parameters"]
profile = "ci"  # the size
dataset = "fmnist"
model = "mlp"
train_size = 2000
n_clients = 10
participation = 0.3
alpha = 0.1
rounds = 8
local_steps = 5
lr = 0.05
n_seeds = 1

# %%
print(profile)
'''


@pytest.fixture
def tiny(tmp_path):
    (tmp_path / "99_tiny.py").write_text(TINY)
    (tmp_path / "params").mkdir()
    (tmp_path / "params" / "99_tiny.cpu.yaml").write_text("profile: cpu\nn_clients: 100\nparticipation: 0.1\n"
                                                         "rounds: 100\nlocal_steps: 50\nn_seeds: 6\n")
    return tmp_path


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_section_matches_its_parameters(notebook):
    text = (hm.NB_DIR / f"{notebook}.py").read_text()
    assert hm.section_of(text, notebook) == hm.how_made_lines(notebook), \
        f"{notebook}: the section is stale; run python -m lab.tools.how_made --write"


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_the_section_is_the_last_cell(notebook):
    cells = (hm.NB_DIR / f"{notebook}.py").read_text().split("\n# %%")
    assert hm.BEGIN in cells[-1] and cells[-1].startswith(" [markdown]\n# ## How this evidence was made")


def test_no_notebook_restates_the_regime_by_hand():
    """The sentence the sections replaced (the cpu federation typed into each intro) is gone everywhere."""
    for notebook in NOTEBOOKS:
        text = (hm.NB_DIR / f"{notebook}.py").read_text()
        assert "the rerun's regime (chosen by the pilot" not in text, notebook
        assert not re.search(r"class-balanced 10 000 of\s*#?\s*Fashion-MNIST", text), notebook


def test_defaults_and_overlay(tiny):
    ci = hm.size_parameters("99_tiny", "ci", tiny)
    cpu = hm.size_parameters("99_tiny", "cpu", tiny)
    assert ci["n_clients"] == 10 and cpu["n_clients"] == 100
    assert cpu["dataset"] == "fmnist" and cpu["train_size"] == 2000  # not in the file: the default stays
    assert hm.size_parameters("99_tiny", "paper", tiny) is None
    with pytest.raises(ValueError, match="size='gpu'"):
        hm.size_parameters("99_tiny", "gpu", tiny)


def test_words_name_what_the_parameters_say(tiny):
    words = hm.federation_words(hm.size_parameters("99_tiny", "cpu", tiny))
    assert words == ("Fashion-MNIST, the mlp model, 2,000 training images, 100 clients, 10% per round, "
                     "Dirichlet α = 0.1, 100 rounds of K = 50 local steps at η = 0.05, 6 seeds")
    assert hm.federation_words({"dataset": "cifar10", "model": "resnet18_gn", "train_size": None,
                                "partition": "iid", "alpha": 0.1, "device": "cuda"}) == \
        "CIFAR-10, the resnet18_gn model, all training images, on a GPU"  # an IID split states no α
    assert hm.federation_words({"dim": 20}) == "the toy problems of its parameters cell"


def test_write_appends_replaces_and_checks(tiny):
    assert hm.write(tiny, check=True) == ["99_tiny"]
    assert hm.BEGIN not in (tiny / "99_tiny.py").read_text()  # checking writes nothing
    assert hm.write(tiny) == ["99_tiny"]
    text = (tiny / "99_tiny.py").read_text()
    assert hm.section_of(text) == hm.how_made_lines("99_tiny", tiny)
    assert "| `cpu` | `notebooks/params/99_tiny.cpu.yaml` over the defaults | Fashion-MNIST" in text
    assert hm.write(tiny) == []  # up to date
    (tiny / "params" / "99_tiny.cpu.yaml").write_text("n_clients: 50\n")
    assert hm.write(tiny, check=True) == ["99_tiny"]  # a changed file makes the section stale
    hm.write(tiny)
    assert "50 clients" in (tiny / "99_tiny.py").read_text() and text.count(hm.BEGIN) == 1


def test_bad_notebooks_are_named(tmp_path):
    (tmp_path / "98_bare.py").write_text("# %%\nx = 1\n")
    with pytest.raises(ValueError, match="98_bare.py: no cell tagged 'parameters'"):
        hm.parameter_defaults("98_bare", tmp_path)
    (tmp_path / "97_call.py").write_text('# %% tags=["parameters"]\nn = int("3")\n')
    with pytest.raises(ValueError, match="parameter n is not a literal"):
        hm.parameter_defaults("97_call", tmp_path)
    with pytest.raises(ValueError, match="no .* block"):
        hm.section_of("# %% [markdown]\n# text\n", "x.py")
