"""Per-client persistent state on disk: stateful methods with more clients than RAM holds.

SCAFFOLD, FedDyn, FedSMOO, FedGMT, … keep one or more θ-sized vectors per client, so their state is
O(N·d): the regime's MLP (d ≈ 2·10⁵ floats) with N = 10 000 clients holds 8 GB. :class:`DiskClientStates`
is a ``MutableMapping[int, State]`` — the interface :func:`fedlab.engine.round.run_round` reads and
writes — that keeps each client's state in one file and only the clients of the current round in memory.

Layout. Every client state of a run has the same keys, shapes and dtypes (its method's
``client_init(θ₀)``); a client's record is those tensors' bytes, concatenated in key order. The data
file holds **two slots per client**: client i's slot s starts at byte ``(2i + s) · record_bytes``. The
index (in memory, written atomically beside the data at every checkpoint) holds, per slot, the
*generation* of its write (a counter of writes, −1 for an empty slot) and the CRC-32 of its bytes; it
is saved as ``client_states.<generation>.idx`` before the checkpoint that names it, and the older one
deleted only after.

Why two slots. A checkpoint records the generation g the store had when it was taken. Writes after
it never touch the slot holding a client's newest record of generation ≤ g, so a run killed at any
point resumes from the checkpoint's generation: slots written later are ignored, the ones it names
are intact, and each read checks its CRC. Resuming from an interruption is therefore bit-identical to
an uninterrupted run, as with the in-memory store whose states go into ``checkpoint.pt`` itself.

Why positional reads and writes (``os.pread``/``os.pwrite``) instead of ``mmap``: pages of a mapping
that a process has touched count towards its resident memory until the kernel reclaims them, so a
mapped 8 GB file read once end to end looks like 8 GB of RSS; read and written by position, the file
goes through the page cache, which the kernel shrinks when others need the memory.
"""
from __future__ import annotations

import hashlib
import os
import zlib
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fedlab.store.atomic import atomic_write_bytes

State = dict[str, Tensor]

CLIENT_STORES = ("memory", "disk", "auto")
"""``Config.client_store``: states in RAM (and in ``checkpoint.pt``), in :class:`DiskClientStates`, or
``auto``: on disk when N × a client's state bytes exceed ``client_state_budget_mb``."""
DATA_NAME = "client_states.bin"
INDEX_NAME = "client_states.{generation}.idx"  # one per checkpoint: a crash between the two writes keeps the old
_EMPTY = -1
_INDEX_DTYPE = np.dtype([("generation", "<i8"), ("crc", "<u4")])


class ClientStateError(RuntimeError):
    """The client-state files are missing, corrupted, or do not belong to the checkpoint that names them."""


def state_bytes(state: Mapping[str, Tensor]) -> int:
    """Bytes of one client's state (the sum over its tensors of numel × element size)."""
    return sum(v.numel() * v.element_size() for v in state.values())


def use_disk(kind: str, n_clients: int, template: Mapping[str, Tensor], budget_mb: float) -> bool:
    """Whether a run keeps client states on disk: ``kind`` ``"disk"``, or ``"auto"`` and N × the bytes of
    ``template`` (the method's ``client_init(θ₀)``) above ``budget_mb`` MiB. A stateless method (an empty
    template) never does."""
    if not template or kind == "memory":
        return False
    return kind == "disk" or n_clients * state_bytes(template) > budget_mb * 2**20


@dataclass(frozen=True)
class Layout:
    """The keys, shapes and dtypes every client state of a run has; ``record_bytes`` per client and slot."""

    keys: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]  # torch dtype names, e.g. "float32"

    @classmethod
    def of(cls, state: Mapping[str, Tensor]) -> "Layout":
        keys = tuple(sorted(state))
        return cls(keys, tuple(tuple(state[k].shape) for k in keys),
                   tuple(str(state[k].dtype).removeprefix("torch.") for k in keys))

    @property
    def sizes(self) -> list[int]:
        return [int(np.prod(s, dtype=np.int64)) * torch.empty((), dtype=getattr(torch, d)).element_size()
                for s, d in zip(self.shapes, self.dtypes)]

    @property
    def record_bytes(self) -> int:
        return sum(self.sizes)

    def to_dict(self) -> dict[str, Any]:
        return {"keys": list(self.keys), "shapes": [list(s) for s in self.shapes], "dtypes": list(self.dtypes)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Layout":
        return cls(tuple(d["keys"]), tuple(tuple(s) for s in d["shapes"]), tuple(d["dtypes"]))


class DiskClientStates(MutableMapping[int, State]):
    """Client states in ``folder/client_states.bin`` (two slots per client, see the module docstring).

    ``store[i]`` reads client i's newest record (checking its CRC) onto ``device``; ``store[i] = state``
    writes it into the slot a crash may lose. :meth:`checkpoint` makes everything written so far durable
    and returns the record a checkpoint keeps; :meth:`committed` is told once that checkpoint is on disk.
    Open an existing store with :meth:`resume` and that record.
    """

    def __init__(self, folder: Path, n_clients: int, layout: Layout, index: np.ndarray, generation: int,
                 device: torch.device | str = "cpu") -> None:
        self.folder, self.n_clients, self.layout = Path(folder), n_clients, layout
        self.data_path = self.folder / DATA_NAME
        self.index, self.generation, self._committed = index, generation, generation
        self.device = torch.device(device)
        self._fd = -1
        self._fd = os.open(self.data_path, os.O_RDWR)

    @classmethod
    def create(cls, folder: Path, n_clients: int, template: Mapping[str, Tensor],
               device: torch.device | str = "cpu") -> "DiskClientStates":
        """A new, empty store for ``n_clients`` states shaped like ``template`` (any old files replaced)."""
        layout = Layout.of(template)
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / DATA_NAME, "wb") as fh:  # sparse: only written slots take disk space
            fh.truncate(2 * n_clients * layout.record_bytes)
        index = np.zeros((n_clients, 2), dtype=_INDEX_DTYPE)
        index["generation"] = _EMPTY
        return cls(folder, n_clients, layout, index, 0, device)

    @classmethod
    def resume(cls, folder: Path, record: Mapping[str, Any], device: torch.device | str = "cpu") -> "DiskClientStates":
        """The store as the checkpoint ``record`` (from :meth:`checkpoint`) left it; ClientStateError, naming
        the file, when its files are missing, changed or from another checkpoint."""
        folder = Path(folder)
        layout, n = Layout.from_dict(record["layout"]), int(record["n_clients"])
        index_path, data_path = folder / record["index"], folder / DATA_NAME
        hint = "Restore the run folder's files, or move the run folder away to restart the run from round 0."
        try:
            raw = index_path.read_bytes()
            size = data_path.stat().st_size
        except OSError as err:
            raise ClientStateError(f"client states of checkpoint in {folder}: cannot read {err.filename} "
                                   f"({err.strerror}). {hint}") from None
        if hashlib.sha256(raw).hexdigest() != record["index_sha256"]:
            raise ClientStateError(f"client-state index {index_path} does not match the SHA-256 its checkpoint "
                                   f"recorded (corrupted, or written by another run). {hint}")
        if size != 2 * n * layout.record_bytes:
            raise ClientStateError(f"client-state file {data_path} has {size} bytes, its checkpoint's layout "
                                   f"needs {2 * n * layout.record_bytes}. {hint}")
        index = np.frombuffer(raw, dtype=_INDEX_DTYPE).reshape(n, 2).copy()
        generation = int(record["generation"])
        later = index["generation"] > generation  # written after the checkpoint: not part of it
        index["generation"][later] = _EMPTY
        store = cls(folder, n, layout, index, generation, device)
        store.committed(record)
        return store

    # --- the mapping ---------------------------------------------------------------------------------
    def _newest(self, i: int) -> int | None:
        g = self.index["generation"][i]
        s = int(np.argmax(g))
        return None if g[s] == _EMPTY else s

    def __getitem__(self, i: int) -> State:
        if not 0 <= i < self.n_clients or (s := self._newest(i)) is None:
            raise KeyError(i)
        size = self.layout.record_bytes
        raw = os.pread(self._fd, size, (2 * i + s) * size)
        if len(raw) != size or zlib.crc32(raw) != int(self.index["crc"][i, s]):
            raise ClientStateError(f"client-state file {self.data_path}: client {i}'s record (slot {s}) does not "
                                   "match its CRC-32 (the file was changed or damaged)")
        out, at = {}, 0
        for k, shape, dtype, n in zip(self.layout.keys, self.layout.shapes, self.layout.dtypes, self.layout.sizes):
            t = torch.frombuffer(bytearray(raw[at:at + n]), dtype=getattr(torch, dtype)).reshape(shape)
            out[k] = t.to(self.device)
            at += n
        return out

    def __setitem__(self, i: int, state: State) -> None:
        if not 0 <= i < self.n_clients:
            raise KeyError(f"client {i}: this store holds clients 0..{self.n_clients - 1}")
        if Layout.of(state) != self.layout:
            raise ValueError(f"client {i}'s state {Layout.of(state).to_dict()} differs from the run's client-state "
                             f"layout {self.layout.to_dict()}")
        raw = b"".join(state[k].detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
                       for k in self.layout.keys)
        g = self.index["generation"][i]
        # the slot to overwrite: one written since the last checkpoint, else the older one, so the newest
        # record of generation ≤ the checkpoint's survives
        s = int(np.argmax(g)) if g.max() > self._committed else int(np.argmin(g))
        size = self.layout.record_bytes
        if os.pwrite(self._fd, raw, (2 * i + s) * size) != size:
            raise OSError(f"short write to {self.data_path}")
        self.generation += 1
        self.index[i, s] = (self.generation, zlib.crc32(raw))

    def __delitem__(self, i: int) -> None:
        raise TypeError("client states are never deleted")

    def __iter__(self) -> Iterator[int]:
        return iter(np.flatnonzero(self.index["generation"].max(axis=1) != _EMPTY).tolist())

    def __len__(self) -> int:
        return int((self.index["generation"].max(axis=1) != _EMPTY).sum())

    # --- checkpoints ---------------------------------------------------------------------------------
    def checkpoint(self) -> dict[str, Any]:
        """Make every write so far durable (data fsync-ed, then the index written atomically) and return
        what a checkpoint records to :meth:`resume` this state: layout, N, generation, the index's SHA-256."""
        os.fsync(self._fd)
        raw = self.index.tobytes()
        name = INDEX_NAME.format(generation=self.generation)
        atomic_write_bytes(self.folder / name, raw)
        return {"kind": "disk", "layout": self.layout.to_dict(), "n_clients": self.n_clients,
                "generation": self.generation, "index": name, "index_sha256": hashlib.sha256(raw).hexdigest()}

    def committed(self, record: Mapping[str, Any]) -> None:
        """The checkpoint holding ``record`` is on disk: the slots it names may be overwritten from now on
        once a newer record of their client exists, and the other index files are stale."""
        self._committed = int(record["generation"])
        for p in self.folder.glob(INDEX_NAME.format(generation="*")):
            if p.name != record["index"]:
                p.unlink(missing_ok=True)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self.close()
