"""`--pty`: the child writes to a pseudo-terminal, so frameworks print what they print for a person
(live tqdm and rich bars, colours) instead of their pipe mode.

The terminal is set so the bytes the child writes are the bytes trainvisor reads: output
post-processing (the `\\n` -> `\\r\\n` a terminal does) is off, and trainvisor's own terminal, if
it has one, does that for the user as it does for any program. Both of the child's streams go to
the one terminal, as on a real one: trainvisor reads them as `stdout`. The window size follows
trainvisor's terminal (and its SIGWINCH), or is a fixed default when it has none.
"""
from __future__ import annotations

import fcntl
import os
import struct
import termios
from typing import Optional, Sequence

__all__ = ["DEFAULT_WINDOW", "open_pty", "window_size", "follow_window"]

DEFAULT_WINDOW = (50, 200)
"""Rows and columns when trainvisor itself has no terminal: wide enough that bars keep their metrics."""


def window_size(fds: Sequence[int]) -> Optional[tuple[int, int]]:
    """(rows, columns) of the first of `fds` that is a terminal."""
    for fd in fds:
        try:
            rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
        except OSError:
            continue
        if rows and cols:
            return rows, cols
    return None


def _set_window(fd: int, size: tuple[int, int]) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))


def open_pty(size_from: Sequence[int] = (1, 2, 0)) -> tuple[int, int]:
    """(master, slave): the slave for the child's stdout and stderr, the master for trainvisor."""
    master, slave = os.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.OPOST  # oflag: no \n -> \r\n, so the bytes are the child's own
    attrs[3] &= ~(termios.ECHO | termios.ICANON)  # lflag: nothing typed is echoed into the output
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    _set_window(slave, window_size(size_from) or DEFAULT_WINDOW)
    os.set_inheritable(slave, False)
    return master, slave


def follow_window(master: int, size_from: Sequence[int] = (1, 2, 0)) -> None:
    """Copy trainvisor's window size to the child's terminal (on SIGWINCH)."""
    size = window_size(size_from)
    if size is not None:
        try:
            _set_window(master, size)
        except OSError:
            pass
