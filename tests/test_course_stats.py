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
'''


def test_counts_of_a_known_script(tmp_path: Path) -> None:
    path = tmp_path / "99_lesson.py"
    path.write_text(SCRIPT)
    got = notebook_stats(path)
    assert got.notebook == "99_lesson" and got.code_cells == 2
    assert got.code_lines == 5  # profile =, two lab imports, the fedlab import, x = 1
    assert got.lab_names == 3  # final_metric, run_seeds, lab.tools.plots; fedlab's run is not lab's
    assert got.infrastructure_words == 4  # ci, profile, records, papermill; "SAM" and "ball" are the lesson's
    assert got.prose_words == 15  # the heading's # is not a word


def test_the_command_refuses_a_folder_without_notebooks(tmp_path: Path, capsys) -> None:
    import pytest

    with pytest.raises(SystemExit):
        main(["--notebooks", str(tmp_path)])
    assert "no NN_slug.py notebook twins" in capsys.readouterr().err
