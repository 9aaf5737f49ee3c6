"""Analysis tools: curvature, loss landscapes, flatness incompatibility, the friendly adversary, the
privacy a DP run spends (:mod:`~fedlab.analysis.privacy`) and accuracy against cost (:mod:`~fedlab.analysis.costs`).

Everything works on a *federation view* — a :class:`~fedlab.models.FlatModel` and per-client data
``[(x_i, y_i), ...]`` (:mod:`~fedlab.analysis.federation`) — and on flat parameter vectors θ::

    from fedlab.analysis import federation_from_config, global_loss_fn, top_eigenvalues
    model, clients, _ = federation_from_config(config)
    F = global_loss_fn(model, clients, batches=2, batch_size=64)
    top_eigenvalues(F, model.theta0(), k=2).values

Sharpness over training (a run measured every few rounds) is the lab's ``lab.sharpness``.
"""
from fedlab.analysis.federation import (ClientData, EmpiricalLoss, LossFn, client_data, client_loss_fn,
                                       evaluate_affine, evaluate_points, federation_from_config, global_loss_fn)
from fedlab.analysis.friendly import (FriendlyReport, GradientDecomposition, friendly_adversary, friendly_vs_alpha,
                                      friendly_vs_batch_size, gradient_decomposition)
from fedlab.analysis.gradients import ClientGradients, client_gradients
from fedlab.analysis.hessian import HessianOperator, TraceEstimate, hessian_matrix, hessian_trace, hvp, sam_sharpness
from fedlab.analysis.eigen import EigenResult, HessianEigen, lanczos, power_iteration, top_eigenvalues
from fedlab.analysis.costs import COST_AXES, cost_curves, cost_frame, plot_cost_accuracy
from fedlab.analysis.curvature import convergence_line, curvature_loss, curvature_sample, lambda_max
from fedlab.analysis.incompatibility import (IncompatibilityReport, MixingSweep, flatness_incompatibility, mixing_sweep,
                                             perturbation)
from fedlab.analysis.privacy import PrivacySpent, privacy_of_config, privacy_spent, rdp_sampled_gaussian
from fedlab.analysis.landscape import (Slice1D, Slice2D, filter_normalized_direction, interpolate, plot_contour,
                                       plot_surface, slice_1d, slice_2d)

__all__ = [
    "COST_AXES", "ClientData", "ClientGradients", "EigenResult", "EmpiricalLoss", "FriendlyReport",
    "GradientDecomposition", "HessianEigen", "HessianOperator", "IncompatibilityReport", "LossFn", "MixingSweep",
    "PrivacySpent", "Slice1D", "Slice2D", "TraceEstimate", "client_data", "client_gradients", "client_loss_fn",
    "convergence_line", "cost_curves", "cost_frame", "curvature_loss", "curvature_sample", "evaluate_affine",
    "evaluate_points", "federation_from_config", "filter_normalized_direction", "flatness_incompatibility",
    "friendly_adversary", "friendly_vs_alpha", "friendly_vs_batch_size", "global_loss_fn", "gradient_decomposition",
    "hessian_matrix", "hessian_trace", "hvp", "interpolate", "lambda_max", "lanczos", "mixing_sweep",
    "perturbation", "plot_contour", "plot_cost_accuracy", "plot_surface", "power_iteration", "privacy_of_config",
    "privacy_spent", "rdp_sampled_gaussian", "sam_sharpness", "slice_1d", "slice_2d", "top_eigenvalues",
]
