"""Models for fedlab: buffer-free (GroupNorm) CNNs, ResNet-18s and a WRN, built by name.

``build_model(name, input_shape, n_classes)`` builds one of ``MODELS``; ``FlatModel`` turns it into
a function of one flat parameter vector θ for ``torch.func`` (see ``functional``).
"""
from __future__ import annotations

from .functional import Distill, FlatModel, ParamSpec, flatten_params, load_flat_, param_spec
from .registry import MODELS, build_model, count_parameters, model_info

__all__ = ["MODELS", "Distill", "FlatModel", "ParamSpec", "build_model", "count_parameters", "flatten_params",
           "load_flat_", "model_info", "param_spec"]
