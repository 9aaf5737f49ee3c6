"""Numbers must not move: a fixed-seed short run's final θ against recorded values, on any CPU.

A refactor of the engine, the round protocol or the package layout must leave a trained model's
floats unchanged. float32 bits depend on the kernels PyTorch picks for the CPU at hand
(``tests/_hardware.py``), so two guards are recorded in ``tests/numbers_fixed.json``:

* **portable, always checked**: m = 32 fixed Gaussian projections of the final θ (float64, numpy's
  generator, rows scaled by 1/√m so that ‖P v‖ ≈ ‖v‖) and the norm of the update θ_T − θ₀. The run
  passes when ‖P θ − P θ_ref‖ ≤ ``RTOL`` · ‖θ_T − θ₀‖_ref. Measured between kernel paths of one
  machine (AVX-512 native, forced AVX2, forced ATen default): at most 2.2e-6 of the update's norm;
  ``RTOL`` = 1e-4 is 45 times that, while a 1 % change of the learning rate moves θ by ~1e-2 of it
  (``test_the_portable_guard_sees_a_real_change``);
* **exact, where recorded**: SHA-256 of the final θ's float32 bytes per hardware fingerprint. On a
  machine whose fingerprint is not in the file the exact check is skipped with the fingerprint named.

The reference was computed at commit aa1bc9c's numeric code (unchanged since e4671b4, whose hashes
CI checked on its machine) on an Intel Xeon (AVX-512, AMX), one thread. A change that moves the
portable guard changed the numbers: find out why before re-recording (and say so in the commit).

    python tests/test_numbers_fixed.py --record-exact   # add this machine's hashes (guard must pass)
    python tests/test_numbers_fixed.py --record-reference  # re-record everything (numbers moved on purpose)
"""
from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

import fedlab
from _hardware import describe, fingerprint
from fedlab import Config

RECORD = Path(__file__).with_name("numbers_fixed.json")
METHODS = ("fedavg", "fedsam", "scaffold", "fedvssam")
RTOL = 1e-4
N_PROJECTIONS, PROJECTION_SEED = 32, 20261201


def config(algorithm: str, runs_dir: str, **overrides) -> Config:
    values = dict(algorithm=algorithm, dataset="digits", model="cnn", n_clients=6, participation=0.5, rounds=3,
                  local_steps=2, batch_size=16, lr=0.05, partition="dirichlet", alpha=0.5, eval_every=3, seed=7,
                  runs_dir=runs_dir, checkpoint_every=3)
    values.update(overrides)
    return Config(**values)


def final_theta(cfg: Config) -> tuple[torch.Tensor, torch.Tensor]:
    """(θ₀, θ_T) of a fresh run, float32 on the CPU."""
    result = fedlab.run(cfg, progress=False)
    theta0 = fedlab.Simulation.build(cfg).initial_state().theta0
    return theta0.detach().float().cpu(), result.theta.detach().to(torch.float32).contiguous().cpu()


def projection(d: int) -> np.ndarray:
    return np.random.default_rng(PROJECTION_SEED).standard_normal((N_PROJECTIONS, d)) / np.sqrt(N_PROJECTIONS)


def summary(theta0: torch.Tensor, theta: torch.Tensor) -> dict:
    t = theta.double().numpy()
    return {"d": int(t.size), "update_norm": float(np.linalg.norm(t - theta0.double().numpy())),
            "projection": [float(v) for v in projection(t.size) @ t]}


def sha256(theta: torch.Tensor) -> str:
    return hashlib.sha256(theta.numpy().tobytes()).hexdigest()


def distance(ref: dict, theta: torch.Tensor) -> float:
    """‖P θ − P θ_ref‖ relative to the reference update's norm."""
    got = projection(ref["d"]) @ theta.double().numpy()
    return float(np.linalg.norm(got - np.asarray(ref["projection"])) / ref["update_norm"])


def _record() -> dict:
    return json.loads(RECORD.read_text())


@pytest.fixture(scope="module")
def finals(tmp_path_factory):
    root = tmp_path_factory.mktemp("numbers")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return {a: final_theta(config(a, str(root / a))) for a in METHODS}
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("algorithm", METHODS)
def test_final_theta_within_tolerance_of_the_recorded_one(algorithm, finals):
    ref = _record()["reference"][algorithm]
    theta0, theta = finals[algorithm]
    assert theta.numel() == ref["d"]
    assert distance(ref, theta) <= RTOL, (
        f"{algorithm}: final θ moved by {distance(ref, theta):.3g} of the update's norm (tolerance {RTOL:g}); "
        f"hardware: {describe()}")


@pytest.mark.parametrize("algorithm", METHODS)
def test_final_theta_bit_for_bit_where_this_hardware_was_recorded(algorithm, finals):
    exact = _record()["exact"].get(fingerprint())
    if exact is None:
        pytest.skip(f"no exact hashes recorded for fingerprint {fingerprint()} ({describe()}); "
                    "the portable tolerance check ran instead")
    assert sha256(finals[algorithm][1]) == exact["sha256"][algorithm]


def test_the_portable_guard_sees_a_real_change(tmp_path, one_thread):
    """The tolerance is no blindfold: a 1 % larger learning rate is far outside it."""
    ref = _record()["reference"]["fedavg"]
    _, theta = final_theta(config("fedavg", str(tmp_path), lr=0.0505))
    assert distance(ref, theta) > 10 * RTOL


def _main(argv: list[str]) -> int:
    mode = argv[0] if argv else ""
    if mode not in ("--record-exact", "--record-reference"):
        print(__doc__)
        return 2
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        finals = {a: final_theta(config(a, str(Path(tmp) / a))) for a in METHODS}
    record = _record() if RECORD.exists() else {"reference": {}, "exact": {}}
    if mode == "--record-reference":
        record = {"reference": {a: summary(*finals[a]) for a in METHODS}, "exact": {}}
    else:
        far = {a: distance(record["reference"][a], finals[a][1]) for a in METHODS}
        if max(far.values()) > RTOL:
            print(f"refused: the portable guard fails here ({far}); numbers moved, not only kernels")
            return 1
    record["exact"][fingerprint()] = {"hardware": describe(), "sha256": {a: sha256(finals[a][1]) for a in METHODS}}
    RECORD.write_text(json.dumps(record, indent=1) + "\n")
    print(f"recorded {mode[9:]} for {fingerprint()} ({describe()}) in {RECORD}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
