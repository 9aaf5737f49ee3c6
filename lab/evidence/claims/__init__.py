"""The papers' claims, evaluated from stored results: holds / fails / inconclusive / not run.

The claims are data (``figures/claims.yaml``, next to the results they judge); this package is their evaluator,
one concept a module:

* :mod:`~lab.evidence.claims.spec` — a claim as declared and checked (:class:`Claim`, :func:`load_claims`);
* :mod:`~lab.evidence.claims.evidence` — what a claim is judged from: the committed records of the figure its
  setting names (:func:`lab.evidence.records.figure_runs`, filtered by ``select``) or a column of that figure's CSV;
* :mod:`~lab.evidence.claims.reading` — the one reading of a claim, by seed pairs, decided in Holm families
  (:func:`evaluate_claims_paired`; ``python -m lab claims``, the committed claims files and the generated table);
* :mod:`~lab.evidence.claims.table` — the claims table written: the numeric CSV, the listing, the Markdown block
  and the pages that carry it (:func:`write_claims`, ``python -m lab claims --write``).

Kinds (``kind`` in the YAML): a paper's ``claim`` (counted), a ``control`` (a run that separates a claimed
mechanism — flatness — from momentum or step size; counted apart) and a ``sanity`` check (an identity true by
construction, shown to prove the measurement, never counted as a claim that holds). Each claim carries the paper's
own ``effect`` (value, unit, table) beside fedlab's paired difference, and ``hypotheses`` — labelled as such, each
naming the run that would test it — instead of explanations.

Not a reading of the claims, and not exported here: :mod:`lab.evidence.claims.unpaired`, a finding about the
reading (what two separate intervals per claim would decide), whose verdict the numeric table keeps in a column.
"""
from lab.evidence.claims.evidence import Evidence, evidence_of, independent_runs
from lab.evidence.claims.reading import (NOT_PAIRED, TESTED, PairedComparison, PairedVerdict, combine,
                                         evaluate_claim_paired, evaluate_claims_paired)
from lab.evidence.claims.spec import (CLAIMS_FILE, KINDS, NO_DATA, OPS, Claim, arm_name, figures_root, leaning,
                                      load_claims, load_families)
from lab.evidence.claims.table import (AS_IF_SEEDS, BLOCK_END, BLOCK_START, FOREST, claims_markdown, effect_text,
                                       p_text, paired_table, paired_text, replace_claims_block, verdict_counts,
                                       verdict_text, write_claims)

__all__ = ["AS_IF_SEEDS", "BLOCK_END", "BLOCK_START", "CLAIMS_FILE", "FOREST", "KINDS", "NOT_PAIRED", "NO_DATA", "OPS",
           "TESTED", "Claim", "Evidence", "PairedComparison", "PairedVerdict", "arm_name", "claims_markdown", "combine",
           "effect_text", "evaluate_claim_paired", "evaluate_claims_paired", "evidence_of", "figures_root",
           "independent_runs", "leaning", "load_claims", "load_families", "p_text", "paired_table", "paired_text",
           "replace_claims_block", "verdict_counts", "verdict_text", "write_claims"]
