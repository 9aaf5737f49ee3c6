"""README's "What the rerun shows" paragraph says only what the generated claims table says (issue 41): each
sentence that carries a verdict is tied here to the claim it reads, and fails when the data moves the verdict."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
TABLE = REPO / "figures" / "claims_cpu.csv"

# the sentence (a phrase of it) → the claims it reads and the verdict each must have in the committed table
PROSE = [
    ("so the claim that FedSAM falls below FedAvg fails,\nat the papers' radius too",
     {"fedsam_below_fedavg_dir01": "fails", "fedsam_at_paper_radius_below_fedavg_dir01": "fails"}),
    ("so it does not beat its comparison set",
     {"fedvssam_above_best_baseline_dir01": "fails", "fedvssam_above_best_baseline_dir05": "fails"}),
    ("FedGMT ends above FedSAM", {"fedgmt_above_fedsam_dir01": "holds"}),
    ("MoFedSAM ends below FedSAM", {"mofedsam_above_fedsam_dir01": "fails"}),
    ("FedSAM's global model is flatter (smaller λ_max) than FedAvg's at Dirichlet 0.1 and 1",
     {"fedsam_flatter_lambda_max_dir01": "holds", "fedsam_flatter_lambda_max_dir1": "holds"}),
    ("FedVSSAM's is sharper than\nboth FedSAM's and FedAvg's, so its flatness claim fails",
     {"fedvssam_flatter_lambda_max": "fails"}),
    ("(not testable — headroom)",
     {"fednsam_much_above_fedsam": "not testable — headroom", "fednsam_paper_much_above_fedsam": "not testable — headroom"}),
    ("the paper variant's Δ_D is smaller than both,\nthe code variant's only than FedSAM at the matched radius, so its "
     "claim fails", {"fednsam_smaller_flatness_distance": "fails", "fednsam_paper_smaller_flatness_distance": "holds"}),
    ("FedSWA and FedLESAM were tuned into FedAvg",
     {"fedswa_above_fedsam_high_het": "not tested — degenerate arm",
      "fedlesam_ge_fedsam_half_cost": "not tested — degenerate arm"}),
    ("FedGF's runs diverged", {"fedgf_above_fedsam_dir01": "not tested — diverged"}),
]


@pytest.mark.parametrize("phrase, verdicts", PROSE, ids=[p[0][:40] for p in PROSE])
def test_each_readme_sentence_matches_the_committed_verdicts(phrase: str, verdicts: dict[str, str]) -> None:
    text = README.read_text(encoding="utf-8")
    shows = text[text.index("**What the rerun shows.**"):text.index("<!-- fedlab:claims:start -->")]
    assert phrase in shows, f"README no longer says {phrase!r}: update PROSE with the sentence that replaced it"
    table = pd.read_csv(TABLE).groupby("id")["paired_verdict"].first()
    for claim, verdict in verdicts.items():
        assert table[claim] == verdict, f"{claim} is {table[claim]!r} in the table, the README says {verdict!r}"
