"""lab.tools.course_stats counts what the course issue reports: code lines, lab names, infrastructure words."""
from __future__ import annotations

from pathlib import Path

from lab.tools.course_stats import main, notebook_stats

SCRIPT = '''# ---
# jupyter:
#   kernelspec: {name: python3}
# ---

# %% [markdown]
# # A lesson
#
# The ci profile writes records; papermill runs it. SAM looks at a ball.

# %% tags=["parameters"]
profile = "ci"  # a comment after code counts as code

# %%
# a comment-only line is not code
from lab.evidence.protocol import final_metric, run_seeds
import lab.tools.plots
from fedlab import run

x = 1

# %% [markdown]
# ## How this evidence was made
#
# The cpu profile's records.
'''


def test_counts_of_a_known_script(tmp_path: Path) -> None:
    path = tmp_path / "99_lesson.py"
    path.write_text(SCRIPT)
    got = notebook_stats(path)
    assert got.notebook == "99_lesson" and got.code_cells == 2
    assert got.code_lines == 5  # profile =, two lab imports, the fedlab import, x = 1
    assert got.lab_names == 3  # final_metric, run_seeds, lab.tools.plots; fedlab's run is not lab's
    assert got.infrastructure_words == 6  # ci, profile, records, papermill; profile, records in the closing section
    assert got.lesson_infrastructure_words == 4  # "SAM" and "ball" are the lesson's; the closing section is not
    assert got.prose_words == 15 + 9  # the headings' # are not words


def test_the_command_refuses_a_folder_without_notebooks(tmp_path: Path, capsys) -> None:
    import pytest

    with pytest.raises(SystemExit):
        main(["--notebooks", str(tmp_path)])
    assert "no NN_slug.py notebook twins" in capsys.readouterr().err


QUICKSTART = Path(__file__).resolve().parents[1] / "notebooks" / "00_quickstart.py"


def test_the_quickstart_is_ten_lines_of_the_public_api() -> None:
    """The course issue's quickstart: ≤ 10 lines of code, nothing from the lab (no evidence, no verdicts before the
    learner has met FedAvg and SAM), only ``fedlab``'s public names."""
    import ast

    got = notebook_stats(QUICKSTART)
    assert got.code_lines <= 10 and got.lab_names == 0, got
    tree = ast.parse(QUICKSTART.read_text())
    modules = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert modules == {"fedlab", "matplotlib.pyplot"}, modules
    attrs = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
             and isinstance(n.value, ast.Name) and n.value.id == "fedlab"}
    import fedlab

    assert attrs and attrs <= set(fedlab.__all__), attrs - set(fedlab.__all__)


def test_what_the_quickstart_says_you_should_see(tmp_path: Path) -> None:
    """Its "what you should see": FedAvg starts well below and ends around two thirds correct after its 30 rounds
    (read through the protocol's final metric; bounds wide enough for any CPU's rounding)."""
    import ast

    import fedlab
    from lab.evidence.protocol import final_metric

    cell = next(n for n in ast.parse(QUICKSTART.read_text()).body
                if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "config")
    config = eval(compile(ast.Expression(cell.value), "00_quickstart", "eval"), {"fedlab": fedlab})
    assert config.rounds == 30
    result = fedlab.run(config, algorithm="fedavg", progress=False, runs_dir=str(tmp_path))
    first = float(result.metrics["test_acc"].dropna().iloc[0])
    assert first < 0.5 and 0.55 < final_metric(result).value < 0.85, (first, final_metric(result))
