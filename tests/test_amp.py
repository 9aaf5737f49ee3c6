"""bf16 autocast of the local gradients (``Config(amp=True)``), on CPU as on CUDA.

Claims under test: only the gradient oracles run under autocast (evaluation, the analysis losses and
the algorithms' vector arithmetic stay float32); the gradient arrives in float32 and differs from the
float32 one by bf16 rounding (a few per cent, never zero); the threaded executor applies autocast in
its worker threads (bit-identical to the sequential amp path); vmap and the conventional loop agree
with the sequential amp path to bf16 accuracy; and on Fashion-MNIST the accuracy curve of bf16
training stays close to float32's (closer than a change of seed).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import fedlab
from _hardware import describe
from fedlab import Config
from fedlab.algorithms import algorithm_class
from fedlab.engine import Simulation
from fedlab.models import FlatModel, build_model
from _load import window


def _batch(shape: tuple[int, ...], n: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return torch.randn((n, *shape), generator=gen), torch.randint(0, 10, (n,), generator=gen)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("channels_last", [False, True])
def test_amp_oracles_are_bf16_but_return_float32(channels_last):
    shape = (1, 28, 28)
    amp = FlatModel(build_model("cnn", shape, 10, seed=3), channels_last=channels_last, amp=True)
    f32 = FlatModel(build_model("cnn", shape, 10, seed=3), channels_last=channels_last)
    batch = _batch(shape)
    theta = amp.theta0()
    g_amp, loss_amp = amp.autograd_grad_fn(theta, batch)
    g_fun, _ = amp.grad_fn(theta, batch)
    g_f32, loss_f32 = f32.autograd_grad_fn(theta, batch)
    assert g_amp.dtype == torch.float32 and loss_amp.dtype == torch.float32
    # bf16 keeps 8 mantissa bits: the gradient moves by a few per cent, and it must move at all
    assert 1e-3 < _rel(g_amp, g_f32) < 0.1
    assert abs(float(loss_amp - loss_f32)) < 0.02 * float(loss_f32)
    # both oracles run the same bf16 operators
    assert _rel(g_amp, g_fun) < 2e-3
    # evaluation and the analysis tools see the float32 function
    assert torch.equal(amp.loss(theta, batch), f32.loss(theta, batch))
    assert torch.equal(amp.forward(theta, batch[0]), f32.forward(theta, batch[0]))
    assert amp.replica().amp


def test_algorithm_arithmetic_never_runs_under_autocast(tiny, tmp_path, monkeypatch):
    cls = algorithm_class("fedsam")
    seen: list[bool] = []
    real = cls.local_step

    def spy(self, *args, **kwargs):
        seen.append(torch.is_autocast_enabled("cpu"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(cls, "local_step", spy)
    fedlab.run(tiny(algorithm="fedsam", amp=True, rounds=1, runs_dir=str(tmp_path)), progress=False)
    assert seen and not any(seen)


def test_amp_threads_equal_sequential_bit_for_bit(tiny, tmp_path, one_thread):
    """Autocast state is per thread: the oracle enters it itself, so worker threads get bf16 too."""
    base = dict(algorithm="fedsam", rounds=2, eval_every=1, amp=True)
    seq = fedlab.run(tiny(**base, runs_dir=str(tmp_path / "seq")), progress=False)
    thr = fedlab.run(tiny(**base, client_threads=2, runs_dir=str(tmp_path / "thr")), progress=False)
    f32 = fedlab.run(tiny(**(base | {"amp": False}), runs_dir=str(tmp_path / "f32")), progress=False)
    assert torch.equal(thr.theta, seq.theta)
    np.testing.assert_array_equal(thr.metrics["train_loss"], seq.metrics["train_loss"])
    assert not torch.equal(f32.theta, seq.theta)  # amp really changed the arithmetic


def test_amp_vectorised_agrees_with_sequential(tiny, tmp_path):
    """vmap batches the bf16 convolutions differently: agreement to bf16 rounding (1 % of max |θ|)."""
    base = dict(algorithm="fedsam", rounds=3, eval_every=1, amp=True)
    seq = fedlab.run(tiny(**base, runs_dir=str(tmp_path / "seq")), progress=False)
    vec = fedlab.run(tiny(**base, parallel_clients=4, runs_dir=str(tmp_path / "vec")), progress=False)
    assert (vec.theta - seq.theta).abs().max() <= 1e-2 * seq.theta.abs().max()
    np.testing.assert_allclose(vec.metrics["train_loss"], seq.metrics["train_loss"], rtol=1e-2)


@pytest.mark.parametrize("algorithm", ["fedavg", "fedsam"])
def test_conventional_amp_agrees_with_fedlab_amp(tiny, tmp_path, algorithm):
    """The benchmark's bf16 baseline trains the same model: θ within 2 % of max |θ| after 3 rounds,
    losses within 1 % (float32: 1e-5, see test_vectorised; bf16 rounding differences compound)."""
    from lab.bench.conventional import ConventionalFL
    from fedlab.models.functional import flatten_params

    cfg = tiny(algorithm=algorithm, n_clients=4, participation=0.5, partition="iid", rounds=3, amp=True,
               algorithm_params={"rho": 0.05} if algorithm == "fedsam" else {}, runs_dir=str(tmp_path))
    sim = Simulation.build(cfg)
    conv = ConventionalFL.from_simulation(sim)
    assert conv.amp
    losses = [conv.run_round(t) for t in range(cfg.rounds)]
    ours = sim.run(progress=False)
    assert (flatten_params(conv.model) - ours.theta).abs().max() <= 2e-2 * ours.theta.abs().max()
    np.testing.assert_allclose(losses, ours.metrics["train_loss"], rtol=1e-2)


def test_amp_accuracy_curve_on_fashion_mnist(tmp_path, one_thread, fmnist_or_skip):
    """bf16 training tracks float32 on real data closer than a change of seed does: FedSAM on
    Fashion-MNIST (Dirichlet 1.0, 10 rounds), the bf16 curve's mean gap to float32 over the
    evaluations at most the mean gap between float32 seeds 0 and 1 (a broken bf16 path, one that
    stalls or diverges, is tens of points away).

    The yardstick is measured in the same process, so it holds on any CPU: bf16 rounding perturbs
    every step and the two trajectories separate as two seeds would, by an amount that depends on the
    kernels (native AVX512-BF16/AMX or emulated). Measured, gap bf16 / gap of seeds, max and mean:
    Xeon with AMX 0.058 / 0.112 and 0.020 / 0.048; the same with kernels forced to AVX2 (no native
    bf16) 0.064 / 0.112 and 0.017 / 0.050, forced to ATen's default 0.108 / 0.104 and 0.032 / 0.046;
    an EPYC without native bf16 saw a 0.064 maximum. Single evaluations swing with the early
    rounds, so only the mean is bounded.
    """
    cfg = Config(algorithm="fedsam", algorithm_params={"rho": 0.02}, dataset="fmnist", train_size=3000,
                 test_size=500, n_clients=20, participation=0.25, alpha=1.0, rounds=10, local_steps=5,
                 batch_size=32, lr=0.05, eval_every=1, client_threads=2, channels_last=True)
    f32 = fedlab.run(cfg.replace(runs_dir=str(tmp_path / "f32")), progress=False)
    bf16 = fedlab.run(cfg.replace(amp=True, runs_dir=str(tmp_path / "bf16")), progress=False)
    seed1 = fedlab.run(cfg.replace(seed=1, runs_dir=str(tmp_path / "seed1")), progress=False)
    acc = f32.metrics["test_acc"].to_numpy()
    assert acc[-1] > 0.5  # it learns: the curves compared are not flat noise
    assert not np.array_equal(bf16.metrics["train_loss"].to_numpy(), f32.metrics["train_loss"].to_numpy())
    gap = np.abs(bf16.metrics["test_acc"].to_numpy() - acc)
    seeds = np.abs(seed1.metrics["test_acc"].to_numpy() - acc)
    where = f"bf16 gap {gap}, seed gap {seeds}; {describe()}"
    assert gap.mean() <= seeds.mean(), where


def test_curve_gap():
    from lab.bench.amp import curve_gap

    assert curve_gap([0.5, 0.6, 0.7], [0.5, 0.5, 0.8]) == pytest.approx((0.1, 2 * 0.1 / 3))
    assert curve_gap([0.3], [0.3]) == (0.0, 0.0)


def test_bench_amp_check_quick_prints_the_table(tmp_path):
    out = tmp_path / "amp.json"
    proc = subprocess.run([sys.executable, "-m", "lab", "bench", "--amp-check", "--quick", "--json", str(out)],
                          cwd=Path(__file__).resolve().parents[1], env={**os.environ, "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=window(240))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "bf16 accuracy check (quick)" in proc.stdout and "|seed1-seed0| max/mean" in proc.stdout
    rows = json.loads(out.read_text())["rows"]
    assert [r["algorithm"] for r in rows] == ["fedavg", "fedsam"]
    for r in rows:
        curves = r["curves"]
        assert set(curves) == {"float32 seed 0", "bf16 seed 0", "float32 seed 1"}
        assert len({len(c) for c in curves.values()}) == 1 and len(curves["bf16 seed 0"]) == 4
        assert curves["float32 seed 0"] != curves["float32 seed 1"]  # the seed really changed
        assert all(0.0 <= a <= 1.0 for c in curves.values() for a in c)
        assert 0.0 <= r["bf16_gap"][1] <= r["bf16_gap"][0] <= 1.0
