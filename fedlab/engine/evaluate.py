"""Batched evaluation of a flat model on a held-out set."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from fedlab.models.functional import FlatModel

CPU_EVAL_BATCH = 128
"""Evaluation batch on CPU. The activations of a batch should stay in cache: on the ``cnn`` the
first block's output is 100 KiB per image, so 1000 images (100 MB) evaluate ~2× slower than 128
(Fashion-MNIST test set: 3.2 s vs 1.5 s on 2 cores). Accelerators prefer large batches."""
ACCELERATOR_EVAL_BATCH = 1000


def eval_batch_size(device: torch.device) -> int:
    """The default evaluation batch for ``device``: :data:`CPU_EVAL_BATCH` on CPU, else 1000."""
    return CPU_EVAL_BATCH if device.type == "cpu" else ACCELERATOR_EVAL_BATCH


@torch.no_grad()
def evaluate(model: FlatModel, theta: Tensor, x: Tensor, y: Tensor,
             batch_size: int | None = None) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of θ on (x, y), in chunks of ``batch_size``.

    Samples are independent (GroupNorm, no batch statistics), so the batch size changes the
    accuracy not at all and the mean loss only in its last bits (the order of a float sum).
    ``batch_size=None`` picks :func:`eval_batch_size` for the device of ``x``.
    """
    if batch_size is None:
        batch_size = eval_batch_size(x.device)
    correct = 0
    total_loss = 0.0
    for start in range(0, x.shape[0], batch_size):
        logits = model.forward(theta, x[start:start + batch_size])
        target = y[start:start + batch_size]
        total_loss += F.cross_entropy(logits, target, reduction="sum").item()
        correct += (logits.argmax(dim=1) == target).sum().item()
    n = x.shape[0]
    return correct / n, total_loss / n
