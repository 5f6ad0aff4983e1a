"""How a follower waits for its log to change: inotify on the log's directory, else polling.

inotify through the C library (ctypes) rather than watchdog: the follower waits on one thread in
one `select` for three things at once, a change in the directory (a write, a create, a rename,
a delete), the followed process's exit (a pidfd) and a stop (a pipe a signal handler writes to).
watchdog would add its observer thread and a queue between the kernel and this wait, and load a
library a sidecar otherwise does without. A directory watch reports its files' writes too, and
sees the new file a rotation creates, so one watch follows every name of the log.

Where inotify cannot be had (another system, no instances left), `PollWaiter` sleeps a
fixed interval with an injected sleep, so tests drive it without sleeping.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import time
from typing import Callable, Optional, Sequence

__all__ = ["Waiter", "InotifyWaiter", "PollWaiter", "make_waiter"]

# A write, the end of a write, a create, a rename in or out, a delete, metadata (a truncation by
# `truncate(2)` of a file not open for writing reports only IN_MODIFY; kept anyway).
_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE = 0x2, 0x4, 0x8
_IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x40, 0x80, 0x100, 0x200
_MASK = _IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
_IN_NONBLOCK, _IN_CLOEXEC = 0o4000, 0o2000000


class Waiter:
    """`wait(timeout, extra_fds)`: returns when something may have changed, a given fd is ready,
    or `timeout` passed; True unless it timed out. `close()` frees what it holds."""

    kind = "none"

    def wait(self, timeout: float, extra_fds: Sequence[int] = ()) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        pass


class InotifyWaiter(Waiter):
    kind = "inotify"

    def __init__(self, directory: str) -> None:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        if libc.inotify_add_watch(fd, os.fsencode(directory), _MASK) < 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise OSError(err, f"inotify_add_watch failed on {directory}")
        self.fd = fd

    def wait(self, timeout: float, extra_fds: Sequence[int] = ()) -> bool:
        ready, _, _ = select.select([self.fd, *extra_fds], [], [], max(0.0, timeout))
        if self.fd in ready:
            self._drain()
        return bool(ready)

    def _drain(self) -> None:
        """The events only say "look again": the follower reads the file's state itself."""
        try:
            while os.read(self.fd, 65536):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class PollWaiter(Waiter):
    """Looks again every `interval` seconds; an extra fd (a stop, the process's exit) still
    wakes it at once when `sleep` is the real one (it selects on them)."""

    kind = "poll"

    def __init__(self, interval: float = 0.05, *, sleep: Optional[Callable[[float], None]] = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._sleep = sleep
        self._clock = clock

    def wait(self, timeout: float, extra_fds: Sequence[int] = ()) -> bool:
        pause = min(self.interval, max(0.0, timeout))
        if self._sleep is not None:
            self._sleep(pause)
            return pause < timeout
        ready, _, _ = select.select(list(extra_fds), [], [], pause)
        return bool(ready) or pause < timeout


def make_waiter(directory: str, *, inotify: bool = True) -> Waiter:
    """inotify on `directory` when it can be had, else polling."""
    if inotify:
        try:
            return InotifyWaiter(directory)
        except (OSError, AttributeError):
            pass
    return PollWaiter()
