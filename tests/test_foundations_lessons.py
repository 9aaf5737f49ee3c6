"""The "What we learned" of notebook 01b against its committed outputs and an independent computation.

The notebook fills its closing paragraph from the numbers it computed and prints them as one JSON line
(``lessons: {...}``). Here the client-drift numbers are recomputed another way — FedAvg's fixed point
θ_K^∞ = [Σ(I − M_i)]⁻¹ Σ(I − M_i) θ_i* with M_i = (I − ηA_i)^K built from the eigendecomposition of each
A_i instead of a matrix power — and the directions the paragraph states are checked on the committed
numbers, so a stale notebook (parameters changed, outputs not rebuilt) or a paragraph that no longer
matches its data fails here.
"""
from __future__ import annotations

import re

import pytest
import torch

from _notebook_outputs import committed as read_committed
from fedlab.toy import quadratic_federation


@pytest.fixture(scope="module")
def committed() -> tuple[dict, dict, str, str]:
    """(parameters, lessons, the paragraph's markdown, all stdout) of the committed notebook."""
    nb = read_committed("01b_foundations")
    return nb.params, nb.lessons, nb.markdown, nb.stdout


def _fixed_point(A: torch.Tensor, optima: torch.Tensor, lr: float, K: int) -> torch.Tensor:
    evals, evecs = torch.linalg.eigh(A)
    P = evecs @ torch.diag_embed(1 - (1 - lr * evals) ** K) @ evecs.transpose(-1, -2)  # I − M_i
    return torch.linalg.solve(P.sum(0), (P @ optima.unsqueeze(-1)).sum(0)).squeeze(-1)


def test_drift_numbers_match_an_independent_computation(committed):
    params, lessons, _, _ = committed
    _, _, theta_star, problems = quadratic_federation(params["quad_clients"], 2, seed=params["seed"])
    A = torch.stack([a for a, _ in problems])
    optima = torch.stack([b for _, b in problems])
    for K in params["quad_steps"]:
        drift = float(torch.linalg.vector_norm(_fixed_point(A, optima, params["quad_lr"], K) - theta_star))
        assert lessons["drift"][str(K)] == pytest.approx(drift, abs=1e-4), K
    assert lessons["mean_gap"] == pytest.approx(float(torch.linalg.vector_norm(optima.mean(0) - theta_star)), abs=1e-4)


def test_the_stated_directions_hold_in_the_committed_numbers(committed):
    params, lessons, _, stdout = committed
    drift = [lessons["drift"][str(K)] for K in params["quad_steps"]]
    assert params["quad_steps"][0] == 1 and drift[0] == 0.0  # one local step: no drift
    assert all(a < b for a, b in zip(drift, drift[1:]))  # grows with K over the simulated K
    assert lessons["fedavg_max_gap"] == 0.0 and lessons["fedsam_max_gap"] == 0.0  # bit for bit
    assert stdout.count("bit for bit: True") == 3 and "bit for bit: False" not in stdout  # θ⁰, FedAvg, FedSAM
    assert 0.5 < lessons["rise_share"] <= 1.0
    assert lessons["lambda_rescaled"] / lessons["lambda_original"] > 1.5  # same function, other λ_max
    assert lessons["sharpness_full"] < lessons["sharpness_batch"] < lessons["sharpness_client_batch"]
    assert ": False" not in stdout, "a printed check of the notebook came out False"


def test_the_paragraph_prints_the_committed_numbers(committed):
    params, lessons, markdown, _ = committed
    K_small, K_large = params["quad_steps"][1], params["quad_steps"][-1]
    for text in (f"{lessons['drift'][str(K_small)]:.3f} at K = {K_small}",
                 f"{lessons['drift'][str(K_large)]:.3f} at K = {K_large}", f"towards {lessons['mean_gap']:.3f}",
                 f"from {lessons['lambda_original']:.2f} to {lessons['lambda_rescaled']:.2f}",
                 f"{round(100 * lessons['rise_share'])} % of the exact", "to the last bit"):
        assert text in markdown, text
    shown = re.search(r"minibatch was ([\d.]+)× that of the whole training set", markdown)
    assert shown and float(shown.group(1)) == pytest.approx(lessons["sharpness_batch"] / lessons["sharpness_full"],
                                                            abs=0.06)
