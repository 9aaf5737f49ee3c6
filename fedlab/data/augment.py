"""On-device, batch-level data augmentation (vectorised: no Python loop over samples).

The only augmentation fedlab uses is the standard CIFAR one, ``"crop_flip"``: a random 32×32 crop of
the image zero-padded by 4 pixels, then a horizontal flip with probability 0.5, drawn independently
for every sample of the batch.

Maths.  For a batch ``x`` of shape ``(n, C, H, W)`` and padding ``p`` let ``P`` be ``x`` zero-padded by
``p`` on all four sides, shape ``(n, C, H+2p, W+2p)``.  For every sample ``i`` draw independently

* offsets ``dy_i, dx_i ~ Uniform{0, …, 2p}`` (with probability ``1 - crop_p`` the crop is skipped,
  i.e. ``dy_i = dx_i = p``, the centre window, which gives back ``x_i`` exactly);
* a flip flag ``f_i ~ Bernoulli(flip_p)``.

Then, for ``0 ≤ r < H`` and ``0 ≤ c < W``::

    out[i, :, r, c] = P[i, :, dy_i + r, dx_i + c]              if f_i = 0
    out[i, :, r, c] = P[i, :, dy_i + r, dx_i + (W - 1 - c)]    if f_i = 1

i.e. a crop of the padded image followed by a left-right mirror of the crop.  It is computed with a
single advanced-indexing gather from per-sample row/column index grids built from ``arange``.

Zero padding happens **after** normalisation, as in FL-Simulator (../shared/docs/ALGORITHMS.md §20): the padded
border is 0 in normalised units, i.e. the dataset's *mean colour*, not black.  (torchvision's
``RandomCrop(32, padding=4)`` on un-normalised images pads with black instead.)  FL-Simulator also
applies the crop only with probability 0.5; ``crop_p=0.5`` reproduces that, the default ``crop_p=1``
is the usual "always crop" recipe (Liu, Caldarola, FedACG).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

AUGMENTATIONS: tuple[str, ...] = ("crop_flip",)
"""Augmentation kinds understood by :func:`apply_augment` (plus ``None`` for no augmentation)."""


def random_crop_flip(
    x: Tensor,
    generator: torch.Generator,
    padding: int = 4,
    flip_p: float = 0.5,
    *,
    crop_p: float = 1.0,
) -> Tensor:
    """Per-sample random crop of the zero-padded image and per-sample horizontal flip.

    Args:
        x: batch of images ``(n, C, H, W)``, already normalised (padding value 0 = mean colour).
        generator: ``torch.Generator`` on the same device as ``x``; the only source of randomness.
            Exactly ``4 n`` random numbers are drawn per call (``dy``, ``dx``, crop and flip
            coins), whatever ``padding``/``flip_p``/``crop_p`` are, so streams stay aligned.
        padding: zero padding ``p`` on each side; offsets are uniform on ``{0, …, 2p}``.
        flip_p: probability of a horizontal flip, per sample.
        crop_p: probability that a sample is cropped at all (otherwise its centre window = itself).

    Returns:
        A new tensor with the shape, dtype and device of ``x``.  See the module docstring for the
        formula.
    """
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
    """Apply the augmentation named ``kind`` (a ``Dataset.augment`` value) to the batch ``x``.

    ``None`` returns ``x`` itself, unchanged (no random numbers drawn); ``"crop_flip"`` is
    :func:`random_crop_flip` with the given padding, flip and crop probabilities (defaults: the usual
    recipe, padding 4, flip 0.5, always crop; ``Config.crop_padding/flip_prob/crop_prob``); anything
    else is a ValueError.
    """
    if kind is None:
        return x
    if kind == "crop_flip":
        return random_crop_flip(x, generator, padding=padding, flip_p=flip_p, crop_p=crop_p)
    raise ValueError(f"unknown augmentation {kind!r}; allowed: None, {', '.join(AUGMENTATIONS)}")
