"""The regime pilot on the study machinery: its committed outputs regenerate from its committed records, the
pre-registration is enforced before a stage trains, and a resumed stage trains nothing twice."""
from __future__ import annotations

import io
from pathlib import Path

import pytest

from lab.repro import FIGURES_DIR

COMMITTED = FIGURES_DIR / "regime"
# The numbers: written by `python -m lab regime analyse` and `regime decide`, compared byte for byte. The
# figures' sidecars (.json) and PDFs name the commit and date they were made at, so they are compared by
# their pixels (PNG) instead.
EXACT = ("pilot.md", "pilot_table.csv", "pilot.csv", "stage_b.md", "stage_b.csv")
PIXELS = ("pilot.png", "stage_b.png")


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``figures/regime``'s outputs written again from the committed records into a temporary folder, through
    the study command line: ``python -m lab study analyse|decide lab/regime/pilot.yaml``."""
    from lab.cli import main
    from lab.regime.pilot import PILOT_FILE

    import shutil

    from lab.evidence.records import OLDER_CODE_NAME
    from lab.repro import FIGURES_DIR

    figures = tmp_path_factory.mktemp("figures")
    # a copy of the committed folder (records, manifest, the older-code list): save_figure commits the runs behind
    # a figure as records next to it, which there are the committed records themselves, as in figures/regime
    shutil.copytree(FIGURES_DIR / "regime", figures / "regime")
    assert (figures / "regime" / OLDER_CODE_NAME).is_file()
    for name in EXACT + PIXELS:  # the outputs go, so only the commands below can bring them back
        (figures / "regime" / name).unlink()
    with pytest.MonkeyPatch.context() as mp:  # the outputs go to <figures>/regime, the records are read as committed
        mp.setattr("lab.regime.analyse.FIGURES_DIR", figures)
        mp.setattr("lab.regime.decide.FIGURES_DIR", figures)
        assert main(["study", "analyse", str(PILOT_FILE)]) == 0
        assert main(["study", "decide", str(PILOT_FILE)]) == 0
    return figures / "regime"


@pytest.mark.parametrize("name", EXACT)
def test_the_pilots_committed_numbers_regenerate_byte_identically(regenerated: Path, name: str) -> None:
    assert (regenerated / name).read_bytes() == (COMMITTED / name).read_bytes(), \
        f"figures/regime/{name} no longer follows from the committed records (diff it with {regenerated / name})"


@pytest.mark.parametrize("name", PIXELS)
def test_the_pilots_committed_figures_regenerate_pixel_identically(regenerated: Path, name: str) -> None:
    import matplotlib.image as mi
    import numpy as np

    new, old = mi.imread(regenerated / name), mi.imread(COMMITTED / name)
    assert new.shape == old.shape and np.array_equal(new, old), f"figures/regime/{name} draws differently now"


def test_r5s_share_is_of_the_registry_the_pilot_read() -> None:
    """11 of the 21 methods registered when the pilot decided take two gradients per step; a method
    registered since must not move the committed R5 estimate (pilot.md says 0.52)."""
    from lab.regime.analyse import two_gradient_share

    assert two_gradient_share() == pytest.approx(11 / 21)


# --- one runner: pre-registration and resumption, with a fake pool (nothing is trained) --------------
def _git(root: Path, *args: str) -> None:
    import subprocess

    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                   check=True, capture_output=True)


def _fake_result(config) -> dict:
    """What a worker returns for ``config``, without training: a finished run whose evaluated accuracy is
    drawn from the config's hash, so the arms differ and the pilot's ρ* and best drift correction exist."""
    import pandas as pd

    key = config.hash()
    final = 0.5 + int(key[:4], 16) / 0x10000 / 4
    rounds = list(range(1, config.rounds + 1))
    acc = [final if r % config.eval_every == 0 or r == config.rounds else float("nan") for r in rounds]
    return {"config": config, "metrics": pd.DataFrame({"round": rounds, "test_acc": acc, "wall_seconds": 0.01}),
            "status": "finished", "run_dir": str(Path("nowhere") / f"{config.algorithm}-{key}"),
            "summary": {"status": "finished", "config_hash": key}, "wall_seconds": 1.0, "load_at_start": 0.0}


class FakePool:
    """Stands in for :func:`lab.study.workers.train_many`: trains each run the caller's plan offers by
    writing a fake result through the caller's own ``write``, asking the plan again after every record
    (as the real pool does); a run offered twice is a failure of the resumption under test."""

    def __init__(self) -> None:
        self.trained: list = []
        self.offered: list[int] = []

    def __call__(self, progress, *, config_of, key_of, label_of, write, workers=2, out=None, max_runs=None):
        written = 0
        while todo := list(progress.todo()):
            self.offered.append(len(todo))
            run = todo[0]
            assert key_of(run) not in self.trained, f"{label_of(run)} offered again after its record was written"
            write(run, _fake_result(config_of(run)))
            self.trained.append(key_of(run))
            written += 1
        self.offered.append(0)
        return written, 0, False


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> FakePool:
    fake = FakePool()
    monkeypatch.setattr("lab.study.workers.train_many", fake)
    return fake


def _refused_until_committed_unchanged(repository: Path, design: Path, call) -> None:
    """``call`` is refused while ``design`` is uncommitted, and again once it is edited after its commit."""
    from lab.study.spec import StudyError

    match = f"{design.name}: not pre-registered"
    with pytest.raises(StudyError, match=match):
        call()
    _git(repository, "add", design.name)
    _git(repository, "commit", "-qm", f"register {design.name}")
    design.write_text(design.read_text() + "# edited after registration\n")
    with pytest.raises(StudyError, match=match):
        call()


def test_a_pilot_stage_is_refused_until_its_design_files_are_committed_unchanged(tmp_path: Path,
                                                                                 pool: FakePool) -> None:
    from test_regime import TINY_PILOT

    from lab.regime.pilot import CRITERIA_FILE
    from lab.study.runner import train
    from lab.study.spec import StudyError, load_study

    criteria, pilot = tmp_path / "criteria.yaml", tmp_path / "pilot.yaml"
    criteria.write_bytes(CRITERIA_FILE.read_bytes())
    pilot.write_text(TINY_PILOT)
    _git(tmp_path, "init", "-q")
    records = tmp_path / "records"

    def stage_a() -> int:
        return train(load_study(pilot), stage="A", candidates=["M10k-K20"], records=records, repository=tmp_path,
                     out=io.StringIO())

    with pytest.raises(StudyError, match="pilot.yaml: not pre-registered"):
        stage_a()
    _git(tmp_path, "add", "pilot.yaml")
    _git(tmp_path, "commit", "-qm", "register the study file only")
    _refused_until_committed_unchanged(tmp_path, criteria, stage_a)  # the criteria are its design too
    assert not records.exists() and pool.trained == []  # refused before anything was trained or written


def test_a_resumed_pilot_stage_trains_nothing_twice(tmp_path: Path, pool: FakePool) -> None:
    from lab.regime.pilot import PILOT_FILE, build_plan, load_records
    from lab.study.runner import train
    from lab.study.spec import load_study

    study, records = load_study(PILOT_FILE), tmp_path / "records"
    criteria = study.criteria
    first = train(study, stage="A", candidates=["M10k-K20"], records=records, out=io.StringIO())
    plan = build_plan(criteria, "A", load_records(records, criteria), ["M10k-K20"])
    # every run of the stage, ρ*'s arm included once the grid was recorded; all on record now
    assert first == len(pool.trained) == len(plan.done) == 26 and not plan.todo and not plan.pending
    assert train(study, stage="A", candidates=["M10k-K20"], records=records, out=io.StringIO()) == 0
    assert len(pool.trained) == 26 and pool.offered[-1] == 0


def test_the_rerun_is_refused_until_its_plan_is_committed_unchanged(tmp_path: Path, pool: FakePool) -> None:
    from lab.regime import rerun as rr
    from lab.regime.pilot import load_criteria

    design = tmp_path / "rerun.yaml"
    design.write_bytes(rr.RERUN_FILE.read_bytes())
    _git(tmp_path, "init", "-q")
    root = tmp_path / "rerun"

    def rerun() -> int:
        return rr.train(rr.load_plan(design), load_criteria(), root=root, design=design, repository=tmp_path,
                        claims=[], seconds={}, out=io.StringIO())

    _refused_until_committed_unchanged(tmp_path, design, rerun)
    assert not root.exists() and pool.trained == []  # refused before anything was trained or written


def test_a_resumed_study_trains_nothing_twice_and_an_edited_one_nothing_at_all(tmp_path: Path,
                                                                             pool: FakePool) -> None:
    import yaml

    from lab.study.runner import train
    from lab.study.spec import StudyError, load_study

    from test_study import TINY  # the tiny study of the runner's own tests

    design = dict(TINY, seeds=[0, 1])
    (tmp_path / "lab").mkdir()
    path = tmp_path / "lab" / "tiny.yaml"
    path.write_text(yaml.safe_dump(design, sort_keys=False))
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "lab/tiny.yaml")
    _git(tmp_path, "commit", "-qm", "register")
    records = tmp_path / "records"
    assert train(load_study(path), workers=1, records=records, repository=tmp_path, out=io.StringIO()) == 2
    log = io.StringIO()
    assert train(load_study(path), workers=1, records=records, repository=tmp_path, out=log) == 0
    assert "2/2 recorded, 0 to train now" in log.getvalue() and len(pool.trained) == 2
    path.write_text(path.read_text() + "# edited after registration\n")
    with pytest.raises(StudyError, match="not pre-registered"):
        train(load_study(path), workers=1, records=records, repository=tmp_path, out=io.StringIO())
