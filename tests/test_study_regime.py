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
    """``figures/regime``'s outputs written again from the committed records into a temporary folder."""
    from lab.regime import analyse as an
    from lab.regime import decide as dc
    from lab.regime.pilot import load_criteria

    out = tmp_path_factory.mktemp("regime")
    criteria = load_criteria()
    an.write_outputs(criteria, out_dir=out)
    dc.write_outputs(criteria, out_dir=out)
    return out


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
