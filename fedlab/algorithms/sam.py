"""The one SAM step every sharpness-aware method in fedlab shares.

SAM (Foret et al., ICLR 2021) minimises max_{‖ε‖≤ρ} f(θ + ε) by the first-order solution
ε̂ = ρ · v / ‖v‖ with v = ∇f(θ; ξ), then descends along ∇f(θ + ε̂; ξ) on the *same* minibatch ξ.
Federated variants differ only in the direction v they perturb along, so the helper takes it as an
argument. The ascent never includes weight decay or correction terms unless the method says so.
"""
from __future__ import annotations

from torch import Tensor

from fedlab.algorithms.base import normalized
from fedlab.models.functional import Batch, GradFn

SAM_RADII = (0.0, 0.01, 0.02, 0.05)
"""ρ candidates in every SAM-family method's tuning grid: 0 (the method without its ascent step: the control
that says whether SAM helps at all), 0.01–0.05, and each method's own published radius where it is larger
(:func:`sam_radii`). FL-Simulator's 0.1 (tuned for ResNet-18) collapses the GroupNorm ``cnn``
(``figures/tuning/04_rho_sweep_fedsam_cnn.csv``); it is in the grid of the methods whose paper uses it, so
that the collapse is part of the recorded selection."""


def sam_radii(paper: float) -> tuple[float, ...]:
    """:data:`SAM_RADII` with the paper's radius added (sorted, once): a method's ρ candidates."""
    return tuple(sorted(set(SAM_RADII) | {paper}))


def sam_perturbation(direction: Tensor, rho: float, eps: float = 1e-12) -> Tensor:
    """ε̂ = ρ · v / (‖v‖ + eps). ρ = 0 gives exactly the zero vector."""
    return rho * normalized(direction, eps)


def sam_gradient(
    theta: Tensor, direction: Tensor, rho: float, batch: Batch, grad_fn: GradFn, eps: float = 1e-12
) -> tuple[Tensor, Tensor]:
    """(∇f(θ + ε̂; ξ), f(θ + ε̂; ξ)) with ε̂ = ρ v/‖v‖ along ``direction`` v, on the same batch ξ."""
    return grad_fn(theta + sam_perturbation(direction, rho, eps), batch)
