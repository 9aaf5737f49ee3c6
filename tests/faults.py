"""Kills at the write points of a run's store, injected by the tests: the library carries no fault hook.

Per checkpoint a run writes ``checkpoint.pt`` (:meth:`fedlab.results.RunStore.write_checkpoint`), then its
views ``metrics.csv`` and ``summary.json`` (:meth:`~fedlab.results.RunStore.write_views`). The four points
between those writes are :data:`POINTS`; ``act(point, rounds_done)`` runs at each while :func:`injected` is
entered (in this process: ``act`` raises), or for the rest of the process after :func:`exit_at` (in a
subprocess: ``os._exit``, nothing unwinds, exactly as a ``kill -9``).
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from fedlab import results

POINTS = ("before_checkpoint", "after_checkpoint", "after_metrics", "after_summary")
EXIT_CODE = 86
Act = Callable[[str, int], None]


def _arm(act: Act) -> list[tuple[object, str, object]]:
    """Wrap the store's writes so that ``act`` runs at every point; what was replaced, to restore it."""
    store = results.RunStore
    write_checkpoint, write_views, write_text = store.write_checkpoint, store.write_views, results.atomic_write_text
    views: dict[Path, int] = {}  # run folder -> rows of the views being written

    def checkpoint(self, ckpt):
        act("before_checkpoint", len(ckpt.rows))
        write_checkpoint(self, ckpt)
        act("after_checkpoint", len(ckpt.rows))

    def both_views(self, rows, summary):
        views[self.dir] = len(rows)
        try:
            write_views(self, rows, summary)
        finally:
            del views[self.dir]

    def text(path, body):
        write_text(path, body)
        path = Path(path)
        if path.parent in views and path.name in ("metrics.csv", "summary.json"):
            act(f"after_{path.stem}", views[path.parent])

    patches = [(store, "write_checkpoint", checkpoint), (store, "write_views", both_views),
               (results, "atomic_write_text", text)]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    for owner, name, value in patches:
        setattr(owner, name, value)
    return saved


@contextmanager
def injected(act: Act) -> Iterator[None]:
    """``act(point, rounds_done)`` at every write point of every run inside the block."""
    saved = _arm(act)
    try:
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)


def exit_at(spec: str) -> None:
    """From now on, ``os._exit(EXIT_CODE)`` at ``<point>[:<rounds done>]``."""
    point, _, at = spec.partition(":")
    assert point in POINTS, spec

    def act(where: str, rounds_done: int) -> None:
        if where == point and (not at or int(at) == rounds_done):
            os._exit(EXIT_CODE)

    _arm(act)
