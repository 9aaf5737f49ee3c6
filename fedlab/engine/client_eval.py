"""Per-client evaluation: the global model on each client's own test split (``Config.client_eval``); for a
personalised method (``Algorithm.personal_models``, FedFSA), each client's own model on its split.

Global test accuracy averages over the pooled test set, whose classes are balanced; a client whose
data is mostly two classes meets a different distribution. Following FL-bench's per-client report
(and the "worst 10 %" of the fairness literature, e.g. Li et al., "Fair resource allocation in
federated learning", ICLR 2020), every client i holding data gets a local test split of
``client_eval_size`` = s test samples whose labels follow its *training* label proportions
p_ic = n_ic / n_i:

* per-class counts k_ic: ⌊s·p_ic⌋ plus one for the s − Σ_c⌊s·p_ic⌋ classes of largest remainder
  (ties: the smaller class id), so Σ_c k_ic = s and |k_ic − s·p_ic| < 1;
* k_ic test samples of class c drawn without replacement with the generator of purpose
  ``("client_eval", i)`` of the run's seed (:func:`fedlab._rng.numpy_generator`); clients draw
  independently, so two clients may share a test sample.

At every evaluation round the global model θ is evaluated once on the union of all splits (one
batched pass, so the cost is at most one extra pass over min(N·s, test size) samples) and each
client's accuracy acc_i and mean cross-entropy ℓ_i are read from the per-sample results; a personalised
method's client i is measured with its own model θ_i = ``Algorithm.personal_model`` (one pass per
client over its s samples). The metrics row gets, over the M clients holding data,

* ``client_acc_mean`` = (1/M) Σ_i acc_i, ``client_acc_std`` = the population standard deviation
  (ddof = 0: these are all the clients, not a sample of them), and ``client_acc_worst10`` = the
  mean of the ⌈0.1·M⌉ lowest acc_i (at least one client);
* the same three for the loss, ``client_loss_worst10`` averaging the ⌈0.1·M⌉ *highest* losses;
* every client's own values, ``client_acc/<i>`` and ``client_loss/<i>`` (one column each, NaN at a round
  without evaluation), so the distribution these statistics summarise is in the record too.

Splits of s samples are noisy: an accuracy on 100 samples has a standard error of up to 5 points,
which widens the std and lowers the worst 10 % by itself; compare methods on the same splits (same
seed and partition), where that noise is shared. The split is a function of the seed, the partition,
the test set and s, all of them in the run key; ``client_eval`` and ``client_eval_size`` enter the
key only when ``client_eval`` is on (:meth:`fedlab.config.Config.hashed_fields`), so the keys of
configs without it are unchanged. Its SHA-256 is in the run summary (``client_eval_split``).
"""
from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from fedlab._rng import numpy_generator
from fedlab.config import Config, ConfigError
from fedlab.engine.evaluate import eval_batch_size
from fedlab.models import FlatModel

STATS = ("client_acc_mean", "client_acc_worst10", "client_acc_std",
         "client_loss_mean", "client_loss_worst10", "client_loss_std")
VECTOR_PREFIXES = ("client_acc", "client_loss")  # the per-client columns: client_acc/<id>, client_loss/<id>


def class_counts(proportions: np.ndarray, size: int) -> np.ndarray:
    """Per-class counts summing to ``size`` closest to ``size · proportions`` (largest remainders)."""
    quota = size * proportions / proportions.sum()
    counts = np.floor(quota).astype(np.int64)
    order = np.argsort(-(quota - counts), kind="stable")  # ties: the smaller class id first
    counts[order[:size - int(counts.sum())]] += 1
    return counts


def client_test_split(y_test: np.ndarray, label_counts: np.ndarray, size: int,
                      seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids of the clients holding data, their test-sample indices as a clients × ``size`` array).

    ``label_counts``: clients × classes training label counts. ConfigError naming ``client_eval_size``
    when a client needs more samples of a class than the test set holds.
    """
    pools = [np.flatnonzero(y_test == c) for c in range(label_counts.shape[1])]
    ids = np.flatnonzero(label_counts.sum(axis=1) > 0)
    split = np.empty((ids.size, size), dtype=np.int64)
    for row, i in enumerate(ids):
        rng = numpy_generator(seed, "client_eval", int(i))
        k = class_counts(label_counts[i].astype(np.float64), size)
        parts = []
        for c in np.flatnonzero(k):
            if k[c] > pools[c].size:
                raise ConfigError(f"client_eval_size={size}: client {i} needs {k[c]} test samples of class {c} "
                                  f"(its label proportions), the test set holds {pools[c].size}; "
                                  "lower client_eval_size")
            parts.append(rng.choice(pools[c], size=int(k[c]), replace=False))
        split[row] = np.concatenate(parts)
    return ids, split


def spread(values: Tensor, worst_low: bool) -> tuple[float, float, float]:
    """(mean, mean of the worst ⌈10 %⌉, population std) of per-client values; worst = lowest or highest."""
    k = max(1, math.ceil(0.1 * values.numel()))
    worst = torch.topk(values, k, largest=not worst_low).values
    return float(values.mean()), float(worst.mean()), float(values.std(correction=0))


def _per_sample(model: FlatModel, theta: Tensor, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """(correct, cross-entropy) of θ on each sample of (x, y), in float64, in batches."""
    step = eval_batch_size(x.device)
    correct, loss = [], []
    for start in range(0, x.shape[0], step):
        logits = model.forward(theta, x[start:start + step]).float()
        target = y[start:start + step]
        correct.append((logits.argmax(dim=1) == target).double())
        loss.append(F.cross_entropy(logits, target, reduction="none").double())
    return torch.cat(correct), torch.cat(loss)


@dataclass
class ClientEval:
    """The splits of a run (built once) and their evaluation at a given θ."""

    clients: np.ndarray  # ids of the clients holding data
    split: np.ndarray  # clients × size test indices
    x: Tensor  # the union of the splits' samples, on the run's device
    y: Tensor
    where: Tensor  # clients × size positions into x

    @classmethod
    def build(cls, config: Config, x_test: Tensor, y_test: Tensor, label_counts: np.ndarray) -> "ClientEval | None":
        """The run's splits (``None`` unless ``config.client_eval``)."""
        if not config.client_eval:
            return None
        clients, split = client_test_split(y_test.cpu().numpy(), label_counts, config.client_eval_size, config.seed)
        union, where = np.unique(split, return_inverse=True)
        keep = torch.as_tensor(union, device=x_test.device)
        return cls(clients, split, x_test[keep], y_test[keep],
                   torch.as_tensor(where.reshape(split.shape), device=x_test.device))

    @property
    def digest(self) -> str:
        """SHA-256 of the client ids and their splits: which test samples each client is measured on."""
        return hashlib.sha256(self.clients.tobytes() + self.split.tobytes()).hexdigest()

    @torch.no_grad()
    def row(self, model: FlatModel, theta: Tensor | None,
            personal: Callable[[int], Tensor] | None = None) -> dict[str, float]:
        """The :data:`STATS` columns at θ (all NaN when ``theta`` is None: a round without evaluation);
        with ``personal`` (client id → its own model, a personalised method's), each client's split is
        measured with its own model instead."""
        if theta is None:
            return dict.fromkeys((*STATS, *self.vector_columns), float("nan"))
        if personal is None:
            correct, nll = _per_sample(model, theta, self.x, self.y)
            acc, nll = correct[self.where].mean(dim=1), nll[self.where].mean(dim=1)
        else:
            per_client = [_per_sample(model, personal(int(i)), self.x[w], self.y[w])
                          for i, w in zip(self.clients, self.where)]
            acc = torch.stack([c.mean() for c, _ in per_client])
            nll = torch.stack([n.mean() for _, n in per_client])
        row = dict(zip(STATS, spread(acc, worst_low=True) + spread(nll, worst_low=False)))
        # every client's own values too: the STATS summarise a distribution a reader may want to plot
        row.update(zip(self.vector_columns, acc.tolist() + nll.tolist()))
        return row

    @property
    def vector_columns(self) -> tuple[str, ...]:
        """``client_acc/<id>`` then ``client_loss/<id>`` for each client with a split, in :attr:`clients` order."""
        return tuple(f"{kind}/{int(i)}" for kind in VECTOR_PREFIXES for i in self.clients)

    def summary(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """The run summary's entries: the last evaluated round's statistics and the split's digest."""
        last = next((r for r in reversed(rows) if not math.isnan(r.get("client_acc_mean", math.nan))), None)
        final = {f"final_{k}": (last[k] if last is not None else None) for k in STATS}
        return {**final, "client_eval_split": self.digest, "client_eval_clients": int(self.clients.size)}
