"""Batched evaluation of a flat model on a held-out set."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from fedlab.models.functional import FlatModel


@torch.no_grad()
def evaluate(model: FlatModel, theta: Tensor, x: Tensor, y: Tensor, batch_size: int = 1000) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of θ on (x, y), in chunks of ``batch_size``."""
    correct = 0
    total_loss = 0.0
    for start in range(0, x.shape[0], batch_size):
        logits = model.forward(theta, x[start:start + batch_size])
        target = y[start:start + batch_size]
        total_loss += F.cross_entropy(logits, target, reduction="sum").item()
        correct += (logits.argmax(dim=1) == target).sum().item()
    n = x.shape[0]
    return correct / n, total_loss / n
