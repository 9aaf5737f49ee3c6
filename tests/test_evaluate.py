"""Batched evaluation: the batch size is a speed knob, not part of the result."""
from __future__ import annotations

import pytest
import torch

from fedlab.engine.evaluate import CPU_EVAL_BATCH, eval_batch_size, evaluate
from fedlab.models import FlatModel, build_model


def test_batch_size_does_not_change_the_result():
    model = FlatModel(build_model("cnn", (1, 12, 12), 10, seed=0))
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(300, 1, 12, 12, generator=gen)
    y = torch.randint(0, 10, (300,), generator=gen)
    theta = model.theta0()
    ref_acc, ref_loss = evaluate(model, theta, x, y, batch_size=300)
    for bs in (1, 7, CPU_EVAL_BATCH, None, 1000):
        acc, loss = evaluate(model, theta, x, y, batch_size=bs)
        assert acc == ref_acc
        assert loss == pytest.approx(ref_loss, rel=1e-6)
    logits = model.forward(theta, x)
    assert ref_acc == (logits.argmax(1) == y).sum().item() / 300
    assert ref_loss == pytest.approx(torch.nn.functional.cross_entropy(logits, y).item(), rel=1e-6)


def test_default_batch_depends_on_the_device():
    assert eval_batch_size(torch.device("cpu")) == CPU_EVAL_BATCH
    assert eval_batch_size(torch.device("cuda")) > CPU_EVAL_BATCH  # no CUDA needed to ask
