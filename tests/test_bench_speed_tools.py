"""The seconds-long modes of ``bench flsim`` and ``bench gpu --dry-run`` run and report consistent numbers;
the crop/flip probabilities reach the augmentation."""
from __future__ import annotations

import json

import pytest
import torch

from lab.bench.flsim import EVAL_BATCH_CANDIDATES
from fedlab.config import Config, ConfigError
from fedlab.engine.clients import LocalData
from fedlab import torch_generator


def _need_fmnist() -> None:
    from fedlab.data import DatasetNotFoundError, load_dataset

    try:
        load_dataset("fmnist", train_size=10, download=False)
    except DatasetNotFoundError:
        pytest.skip("Fashion-MNIST is not on disk")


def test_crop_and_flip_probabilities_reach_the_augmentation():
    x = torch.randn(16, 3, 8, 8, generator=torch_generator(0, "aug-x"))
    idx = torch.arange(16)
    off = LocalData(x, torch.zeros(16, dtype=torch.long), "crop_flip", crop_prob=0.0, crop_padding=4, flip_prob=0.0)
    assert torch.equal(off.batch(idx, torch_generator(0, "aug"))[0], x)  # neither crop nor flip: the images
    flip = LocalData(x, torch.zeros(16, dtype=torch.long), "crop_flip", crop_prob=0.0, crop_padding=4, flip_prob=1.0)
    assert torch.equal(flip.batch(idx, torch_generator(0, "aug"))[0], x.flip(3))
    for name, bad in (("crop_prob", 1.5), ("flip_prob", -0.1), ("crop_padding", -1)):
        with pytest.raises(ConfigError, match=name):
            Config(**{name: bad})
    with pytest.raises(ConfigError, match="local_steps"):
        Config(local_steps=None)
    assert Config(local_steps=None, local_epochs=5).local_epochs == 5


def test_bench_flsim_quick(tmp_path, capsys):
    _need_fmnist()
    from lab.cli import main

    out = tmp_path / "flsim.json"
    assert main(["bench", "flsim", "--quick", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert [a["algorithm"] for a in res["algorithms"]] == ["fedavg", "fedsam"]
    for a in res["algorithms"]:
        assert a["n_test"] == 100 and a["n_union"] == 300 and len(a["rounds"]) == 2
        assert 0 < a["train_share_of_floor"] and 0 < a["eval_share_of_floor"]
        r = a["rounds"][-1]
        assert r["train_samples"] > 0 and r["train_s"] > 0 and r["union_eval_s"] > 0
        assert r["plain_train_s"] > 0 and a["train_over_plain"] > 0 and a["eval_over_plain"] > 0
        assert a["eval_batch"] in EVAL_BATCH_CANDIDATES and set(a["eval_batch_seconds_per_image"]) == \
            {str(b) for b in EVAL_BATCH_CANDIDATES}  # JSON keys are strings
    assert res["settings"]["crop_prob"] == 0.5 and res["settings"]["local_steps"] is None
    assert "FedSAM/FedAvg training" in capsys.readouterr().out
    assert main(["bench", "flsim", "--quick", "--eval-diagnosis"]) == 0
    assert "batch   256" in capsys.readouterr().out


@pytest.mark.parametrize("algorithm", ["fedavg", "fedsam"])
def test_flsim_plain_reference_does_fedlabs_work(tiny, algorithm):
    """The plain-PyTorch loop of ``bench flsim`` trains on fedlab's batches, augmentation included:
    one round of it from θ₀ lands on fedlab's θ₁ (epoch mode, crop p 0.5; equal client sizes, so
    its unweighted average is FedAvg's weighted one).

    "Lands on" is measured against the round's update, ‖θ_plain − θ₁‖ ≤ 1 % of ‖θ₁ − θ₀‖: the two
    loops run other kernels (nn.Module vs functional), and how far float32 rounding then carries them
    apart depends on the CPU (here 1e-6 of the update, 4e-5 with the kernels forced to ATen's default;
    an AVX2-only EPYC saw 3e-3 of max |θ| after two epochs, hence one epoch of 10 steps). Without
    augmentation the loop lands twice the update away: that is what the bound must tell apart."""
    from lab.bench.conventional import ConventionalFL
    from lab.bench.flsim import plain_round_seconds
    from fedlab.engine import Simulation
    from fedlab.models.functional import flatten_params

    cfg = tiny(algorithm=algorithm, n_clients=4, participation=0.5, partition="iid", local_steps=None,
               local_epochs=1, batch_size=16, augment=True, crop_prob=0.5, train_size=640,
               algorithm_params={"rho": 0.05} if algorithm == "fedsam" else {})
    sim = Simulation.build(cfg)
    assert len({len(ix) for ix in sim.partition.client_indices}) == 1
    state = sim.initial_state()
    theta0 = sim.algorithm.global_model(state.server).clone()
    plain = ConventionalFL.from_simulation(sim)
    seconds, cpu = plain_round_seconds(plain, sim, 0, theta0)
    sim.train_round(state, 0)
    ours = sim.algorithm.global_model(state.server)
    moved = (ours - theta0).norm()
    assert seconds > 0 and cpu > 0 and moved > 0
    assert (flatten_params(plain.model) - ours).norm() <= 1e-2 * moved
    # and it really used the augmented batches: without augmentation the same loop lands elsewhere
    sim_off = Simulation.build(cfg.replace(augment=False))
    plain_off = ConventionalFL.from_simulation(sim_off)
    plain_round_seconds(plain_off, sim_off, 0, theta0)
    assert (flatten_params(plain_off.model) - ours).norm() > 0.1 * moved


def test_plain_evaluation_matches_fedlabs():
    from lab.bench.flsim import plain_evaluation
    from fedlab.engine.evaluate import evaluate
    from fedlab.models import FlatModel, build_model

    module = build_model("lenet5", (3, 16, 16), 10, seed=0)
    model = FlatModel(module)
    x = torch.randn(50, 3, 16, 16, generator=torch_generator(0, "eval-x"))
    y = torch.randint(0, 10, (50,), generator=torch_generator(0, "eval-y"))
    acc, loss = plain_evaluation(module, x, y, 16)
    ours = evaluate(model, model.theta0(), x, y, batch_size=16)
    assert acc == ours[0] and loss == pytest.approx(ours[1], rel=1e-6) and loss > 0


def test_choose_eval_batch_measures_every_candidate_and_rejects_bad_ones():
    from lab.bench.flsim import choose_eval_batch
    from fedlab.models import FlatModel, build_model

    model = FlatModel(build_model("mlp", (1, 8, 8), 10, seed=0))
    x = torch.randn(96, 1, 8, 8, generator=torch_generator(0, "eval-x"))
    y = torch.randint(0, 10, (96,), generator=torch_generator(0, "eval-y"))
    best, per_image = choose_eval_batch(model, model.theta0(), x, y, (8, 32), images=64, repeats=2)
    assert set(per_image) == {8, 32} and best == min(per_image, key=per_image.__getitem__)
    assert all(v > 0 for v in per_image.values())
    with pytest.raises(ValueError, match="eval batch candidates"):
        choose_eval_batch(model, model.theta0(), x, y, (0, 32))


def test_bench_gpu_dry_run(tmp_path, capsys):
    _need_fmnist()
    from lab.cli import main

    out = tmp_path / "gpu.json"
    assert main(["bench", "gpu", "--dry-run", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["dry_run"] and set(res["parts"]) == {"speed", "curvature", "paper"}
    modes = {r["mode"] for r in res["speed"]["rows"]}
    assert {"conventional", "sequential", "auto"} <= modes
    assert {r["solver"] for r in res["curvature"]["rows"]} == {"new", "power", "old", "plain"}
    assert res["paper"]["fedsam"]["round_s"] > 0 and res["paper"]["fedavg"]["config"]["model"] == "resnet18_gn"
    goals = {g["goal"]: g for g in res["goals"]}
    assert goals["sam_over_fedavg"]["measured"] is not None
    assert "goal" in capsys.readouterr().out


def test_fixed_malloc_thresholds_stop_evaluation_page_faults():
    import platform
    import resource

    from fedlab.engine.evaluate import evaluate
    from fedlab.engine.malloc import stable_malloc
    from fedlab.models import FlatModel, build_model

    if platform.system() != "Linux" or not stable_malloc():
        pytest.skip("glibc mallopt not available")
    model = FlatModel(build_model("lenet5", (3, 32, 32), 10, seed=0))
    x = torch.randn(400, 3, 32, 32, generator=torch_generator(0, "malloc-x"))
    y = torch.zeros(400, dtype=torch.long)
    theta = model.theta0()
    evaluate(model, theta, x, y, batch_size=200)  # first use: the heap grows (faults expected)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    first = evaluate(model, theta, x, y, batch_size=200)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    # 200 × 64 × 28 × 28 floats = 40 MB per activation: above glibc's 32 MiB dynamic mmap cap, so
    # without fixed thresholds every batch maps (and faults in) ~10,000 fresh pages per tensor
    assert faults < 2000, faults
    assert evaluate(model, theta, x, y, batch_size=200) == first
