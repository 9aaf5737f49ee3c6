"""On-device, batch-level data augmentation (vectorised: no Python loop over samples).

``"crop_flip"``, the standard CIFAR recipe: with P the batch zero-padded by p, per sample i draw
offsets ``dy_i, dx_i ~ U{0, …, 2p}`` (with probability ``1 − crop_p`` the centre window
``dy_i = dx_i = p``, which is ``x_i``) and ``f_i ~ Bernoulli(flip_p)``; then

    out[i, :, r, c] = P[i, :, dy_i + r, dx_i + c]              if f_i = 0
    out[i, :, r, c] = P[i, :, dy_i + r, dx_i + (W − 1 − c)]    if f_i = 1

as one advanced-indexing gather. Padding comes **after** normalisation, as in FL-Simulator:
the border is the mean colour, not black. FL-Simulator crops with probability
0.5 (``crop_p=0.5``); the default ``crop_p=1`` always crops (Liu, Caldarola, FedACG)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

AUGMENTATIONS: tuple[str, ...] = ("crop_flip",)
"""Augmentation kinds understood by :func:`apply_augment` (plus ``None`` for no augmentation)."""


def random_crop_flip(x: Tensor, generator: torch.Generator, padding: int = 4, flip_p: float = 0.5, *,
                     crop_p: float = 1.0) -> Tensor:
    """Per-sample random crop of the zero-padded, normalised batch ``x`` and horizontal flip (module doc).

    Exactly ``4 n`` numbers are drawn from ``generator`` (on ``x``'s device) per call, whatever the
    probabilities, so streams stay aligned. Returns a new tensor like ``x``."""
    if x.ndim != 4:
        raise ValueError(f"random_crop_flip expects a batch (n, C, H, W); got shape {tuple(x.shape)}")
    if int(padding) != padding or padding < 0:
        raise ValueError(f"padding must be a non-negative integer; got {padding!r}")
    if not 0.0 <= flip_p <= 1.0:
        raise ValueError(f"flip_p must lie in [0, 1]; got {flip_p!r}")
    if not 0.0 <= crop_p <= 1.0:
        raise ValueError(f"crop_p must lie in [0, 1]; got {crop_p!r}")
    if generator.device.type != x.device.type:
        raise ValueError(
            f"generator is on {generator.device} but x is on {x.device}; "
            "create the generator on x's device (fedlab.torch_generator(..., device=x.device))"
        )
    p = int(padding)
    n, c, h, w = x.shape
    dev = x.device
    dy = torch.randint(0, 2 * p + 1, (n,), generator=generator, device=dev)
    dx = torch.randint(0, 2 * p + 1, (n,), generator=generator, device=dev)
    crop = torch.rand(n, generator=generator, device=dev) < crop_p
    flip = torch.rand(n, generator=generator, device=dev) < flip_p
    if n == 0:
        return x.clone()
    dy = torch.where(crop, dy, torch.full_like(dy, p))
    dx = torch.where(crop, dx, torch.full_like(dx, p))

    padded = F.pad(x, (p, p, p, p)) if p > 0 else x
    rows = dy[:, None] + torch.arange(h, device=dev)[None, :]  # (n, H)
    cols = dx[:, None] + torch.arange(w, device=dev)[None, :]  # (n, W)
    cols = torch.where(flip[:, None], cols.flip(1), cols)  # mirror inside the crop window
    i_idx = torch.arange(n, device=dev)[:, None, None, None]
    c_idx = torch.arange(c, device=dev)[None, :, None, None]
    return padded[i_idx, c_idx, rows[:, None, :, None], cols[:, None, None, :]]


def apply_augment(kind: str | None, x: Tensor, generator: torch.Generator, *, padding: int = 4,
                  flip_p: float = 0.5, crop_p: float = 1.0) -> Tensor:
    """Apply augmentation ``kind`` (a ``Dataset.augment`` value): ``None`` returns ``x`` (nothing drawn),
    ``"crop_flip"`` is :func:`random_crop_flip`; anything else is a ValueError."""
    if kind is None:
        return x
    if kind == "crop_flip":
        return random_crop_flip(x, generator, padding=padding, flip_p=flip_p, crop_p=crop_p)
    raise ValueError(f"unknown augmentation {kind!r}; allowed: None, {', '.join(AUGMENTATIONS)}")
