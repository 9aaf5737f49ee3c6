"""Tests for fedlab.data.augment: vectorised per-sample crop + flip."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fedlab.data import apply_augment, random_crop_flip
from fedlab import torch_generator


def _batch(n=16, c=3, h=32, w=32, seed=0):
    return torch.randn(n, c, h, w, generator=torch_generator(seed, "test-batch"))


def _window_offsets(out_i: torch.Tensor, padded_i: torch.Tensor, h: int, w: int, p: int) -> list[tuple]:
    return [
        (dy, dx)
        for dy in range(2 * p + 1)
        for dx in range(2 * p + 1)
        if torch.equal(out_i, padded_i[:, dy : dy + h, dx : dx + w])
    ]


def test_shape_dtype_device_preserved():
    x = _batch()
    y = random_crop_flip(x, torch_generator(0, "aug"))
    assert y.shape == x.shape and y.dtype == x.dtype and y.device == x.device
    assert y.data_ptr() != x.data_ptr()


def test_identity_without_padding_or_flip():
    x = _batch()
    assert torch.equal(random_crop_flip(x, torch_generator(0, "aug"), padding=0, flip_p=0.0), x)
    assert torch.equal(random_crop_flip(x, torch_generator(0, "aug"), padding=4, flip_p=0.0, crop_p=0.0), x)


def test_always_flip_is_exact_mirror():
    x = _batch(c=2, h=8, w=12)
    assert torch.equal(random_crop_flip(x, torch_generator(0, "aug"), padding=0, flip_p=1.0), x.flip(-1))


@pytest.mark.parametrize("flip_p", [0.0, 1.0])
def test_crops_are_windows_of_zero_padded_input(flip_p):
    x, p = _batch(n=12, h=10, w=10), 3
    y = random_crop_flip(x, torch_generator(1, "aug"), padding=p, flip_p=flip_p)
    padded = F.pad(x, (p, p, p, p))
    offsets = []
    for i in range(len(x)):
        target = y[i].flip(-1) if flip_p == 1.0 else y[i]
        found = _window_offsets(target, padded[i], 10, 10, p)
        assert len(found) == 1, f"sample {i} is not a window of its padded input"
        offsets.append(found[0])
    assert len(set(offsets)) > 1, "all samples got the same offset"


def test_padding_is_zero_in_normalised_units():
    x = torch.full((64, 1, 6, 6), 5.0)
    y = random_crop_flip(x, torch_generator(2, "aug"), padding=2)
    assert set(torch.unique(y).tolist()) == {0.0, 5.0}


def test_reproducible_and_seed_dependent():
    x = _batch()
    a = random_crop_flip(x, torch_generator(7, "aug"))
    assert torch.equal(a, random_crop_flip(x, torch_generator(7, "aug")))
    assert not torch.equal(a, random_crop_flip(x, torch_generator(8, "aug")))


def test_per_sample_offsets_and_flip_rate():
    base = _batch(n=1, c=1, h=12, w=12)
    x = base.expand(2000, 1, 12, 12).contiguous()
    y = random_crop_flip(x, torch_generator(3, "aug"), padding=4, flip_p=0.5)
    distinct = torch.unique(y.reshape(2000, -1), dim=0).shape[0]
    assert distinct > 120, f"only {distinct} distinct crops out of 162 possible"
    flips = random_crop_flip(x, torch_generator(4, "aug"), padding=0, flip_p=0.5)
    rate = (flips == base.flip(-1)).all(dim=(1, 2, 3)).float().mean().item()
    assert 0.45 < rate < 0.55


def test_fl_simulator_crop_probability():
    base = _batch(n=1, c=1, h=12, w=12)
    x = base.expand(2000, 1, 12, 12).contiguous()
    y = random_crop_flip(x, torch_generator(5, "aug"), padding=4, flip_p=0.0, crop_p=0.5)
    unchanged = (y == base).all(dim=(1, 2, 3)).float().mean().item()
    assert 0.45 < unchanged < 0.6  # 0.5 skipped + 0.5 × 1/81 centre crops


def test_apply_augment_dispatch():
    x = _batch()
    assert apply_augment(None, x, torch_generator(0, "aug")) is x
    assert torch.equal(
        apply_augment("crop_flip", x, torch_generator(0, "aug")),
        random_crop_flip(x, torch_generator(0, "aug"), padding=4, flip_p=0.5),
    )
    with pytest.raises(ValueError, match="unknown augmentation 'cutout'"):
        apply_augment("cutout", x, torch_generator(0, "aug"))


def test_bad_arguments():
    x = _batch(n=2)
    g = torch_generator(0, "aug")
    with pytest.raises(ValueError, match="padding"):
        random_crop_flip(x, g, padding=-1)
    with pytest.raises(ValueError, match="flip_p"):
        random_crop_flip(x, g, flip_p=1.5)
    with pytest.raises(ValueError, match="batch"):
        random_crop_flip(x[0], g)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_window_property_and_rejects_cpu_generator():
    x = _batch(n=8, h=10, w=10).cuda()
    with pytest.raises(ValueError, match="generator is on"):
        random_crop_flip(x, torch_generator(0, "aug"))
    y = random_crop_flip(x, torch_generator(0, "aug", device="cuda"), padding=2, flip_p=0.0)
    assert y.device == x.device
    padded = F.pad(x, (2, 2, 2, 2))
    for i in range(len(x)):
        assert len(_window_offsets(y[i], padded[i], 10, 10, 2)) == 1


def test_config_augmentation_fields_reach_the_batches(tiny):
    """crop_prob / crop_padding / flip_prob are hashed config fields passed to random_crop_flip."""
    from fedlab.config import ConfigError
    from fedlab.engine import Simulation

    idx = torch.arange(16)
    default = Simulation.build(tiny(augment=True)).local_data
    x = default.x[idx]
    assert torch.equal(default.batch(idx, torch_generator(0, "aug"))[0],
                       random_crop_flip(x, torch_generator(0, "aug"), padding=4, flip_p=0.5))  # today's recipe
    off = Simulation.build(tiny(augment=True, crop_prob=0.0, flip_prob=0.0)).local_data
    assert torch.equal(off.batch(idx, torch_generator(0, "aug"))[0], x)  # no crop, no flip: the images
    fl_sim = Simulation.build(tiny(augment=True, crop_prob=0.5, crop_padding=2, flip_prob=0.25)).local_data
    assert torch.equal(fl_sim.batch(idx, torch_generator(0, "aug"))[0],
                       random_crop_flip(x, torch_generator(0, "aug"), padding=2, flip_p=0.25, crop_p=0.5))
    base = tiny()
    assert len({base.hash(), base.replace(crop_prob=0.5).hash(), base.replace(crop_padding=2).hash(),
                base.replace(flip_prob=0.0).hash()}) == 4
    for field, value in (("crop_prob", 1.5), ("flip_prob", -0.1), ("crop_padding", -1), ("crop_padding", 1.5)):
        with pytest.raises(ConfigError, match=field):
            tiny(**{field: value})
