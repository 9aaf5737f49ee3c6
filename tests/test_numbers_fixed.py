"""Numbers must not move: a fixed-seed short run's final θ, bit for bit, against recorded hashes.

A refactor of the engine, the round protocol or the package layout must leave every float of a
trained model unchanged. The hashes below are the SHA-256 of the final θ's float32 bytes
(``theta.contiguous().numpy().tobytes()``) computed on main at commit e4671b4 (2026-12-01, before the
architecture step of issue 13), with this exact config, on CPU, one thread. A change that moves
them changed the numbers: find out why before re-recording (and say so in the commit).
"""
from __future__ import annotations

import hashlib

import pytest
import torch

import fedlab
from fedlab import Config

RECORDED = {
    "fedavg": "5cbd57605ae70aa83ab0cee32f497e6cb08ecb748fea4467846e461e83f6d3a5",
    "fedsam": "e422dae7c59ec477830fa1a3c8db2a4a09322bccb0e75500a0e97f1255c2564c",
    "scaffold": "8ed58ba98e81ade11a0b77b70fcc5fcca6daa0436099dc3b4ecfdc26d07f3bb8",
    "fedvssam": "dddf6da549821f0214c5e7c5e239335372e313778bb56650c11920c5ce3435cf",
}


def _theta_hash(algorithm: str, runs_dir: str) -> str:
    config = Config(algorithm=algorithm, dataset="digits", model="cnn", n_clients=6, participation=0.5,
                    rounds=3, local_steps=2, batch_size=16, lr=0.05, partition="dirichlet", alpha=0.5,
                    eval_every=3, seed=7, runs_dir=runs_dir, checkpoint_every=3)
    result = fedlab.run(config, progress=False, need_theta=True)
    theta = result.theta.detach().to(torch.float32).contiguous().cpu()
    return hashlib.sha256(theta.numpy().tobytes()).hexdigest()


@pytest.mark.parametrize("algorithm", sorted(RECORDED))
def test_final_theta_is_bit_for_bit_unchanged(algorithm, tmp_path, one_thread):
    assert _theta_hash(algorithm, str(tmp_path / "runs")) == RECORDED[algorithm]
