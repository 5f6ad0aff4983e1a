"""Every log writer live in this process, and what a fork and the interpreter's exit do to them.

A fork is taken while no writer is swapping descriptors (each writer's lock is held across
it); the child closes its copies of every writer's descriptors, so a dead writer's clients see
EOF, and keeps none of them. At exit, writers a handler does not own are closed; the ones a
handler owns are closed by `logging.shutdown()`, which runs later, so records logged by other
exit hooks still reach the file.
"""
from __future__ import annotations

import weakref
from typing import Any

__all__ = ["LIVE", "before", "after_in_parent", "after_in_child", "close_all_at_exit"]

LIVE: "weakref.WeakSet[Any]" = weakref.WeakSet()  # LogWriterServer instances
_held: list[Any] = []


def before() -> None:
    _held[:] = list(LIVE)
    for server in _held:
        server._lock.acquire()


def after_in_parent() -> None:
    for server in _held:
        server._lock.release()
    _held.clear()


def after_in_child() -> None:
    for server in _held:
        server._forget_in_child()
    _held.clear()
    LIVE.clear()


def close_all_at_exit() -> None:
    for server in list(LIVE):
        if server.close_at_exit:
            server.close()
