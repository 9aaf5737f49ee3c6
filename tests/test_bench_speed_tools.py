"""The seconds-long modes of ``bench flsim`` and ``bench gpu --dry-run`` run and report consistent numbers;
the crop/flip probabilities reach the augmentation."""
from __future__ import annotations

import json

import pytest
import torch

from fedlab.config import Config, ConfigError
from fedlab.engine.clients import LocalData
from fedlab.tools.repro import torch_generator


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
    from fedlab.cli import main

    out = tmp_path / "flsim.json"
    assert main(["bench", "flsim", "--quick", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert [a["algorithm"] for a in res["algorithms"]] == ["fedavg", "fedsam"]
    for a in res["algorithms"]:
        assert a["n_test"] == 100 and a["n_union"] == 300 and len(a["rounds"]) == 2
        assert 0 < a["train_share_of_floor"] and 0 < a["eval_share_of_floor"]
        r = a["rounds"][-1]
        assert r["train_samples"] > 0 and r["train_s"] > 0 and r["union_eval_s"] > 0
    assert res["settings"]["crop_prob"] == 0.5 and res["settings"]["local_steps"] is None
    assert "FedSAM/FedAvg training" in capsys.readouterr().out
    assert main(["bench", "flsim", "--quick", "--eval-diagnosis"]) == 0
    assert "batch   256" in capsys.readouterr().out


def test_bench_gpu_dry_run(tmp_path, capsys):
    _need_fmnist()
    from fedlab.cli import main

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
