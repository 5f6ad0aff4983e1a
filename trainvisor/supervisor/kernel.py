"""The Linux calls the supervisor makes that Python has none for: prctl's child subreaper and
parent-death signal, and a signal's default disposition from any thread (`signal.signal` works
in the main thread only, and the child setup runs in the thread that forked).

Through the C extension (_native/_proc.c) when it is built, else libc's through ctypes, loaded
only then: importing ctypes is ~4 ms of every start (bench/startup.py). One adapter for both, so
the supervisor never spells a prctl number or a ctypes call itself. A call the kernel refuses is
said by the return value (`set_child_subreaper`) or ignored (the child starts regardless), never
raised."""
from __future__ import annotations

from typing import Any, Optional

__all__ = ["Kernel", "native_proc"]

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


def native_proc() -> Optional[Any]:
    """The C extension's calls (_native/_proc.c), or None when it is not built."""
    try:
        from .._native import _proc
    except ImportError:
        return None
    return _proc


class Kernel:
    """The calls, through `proc` (default: the C extension) or, without it, libc. Made before a
    fork when the child setup needs it: loading libc is no work for the child to do."""

    def __init__(self, proc: Optional[Any] = ...) -> None:
        self._proc = native_proc() if proc is ... else proc
        self._libc = None
        if self._proc is None:
            try:
                import ctypes

                self._libc = ctypes.CDLL(None, use_errno=True)
            except OSError:
                pass

    @property
    def usable(self) -> bool:
        return self._proc is not None or self._libc is not None

    def child_subreaper(self) -> bool:
        """Whether this process adopts its descendants' orphans (False when it cannot tell)."""
        try:
            if self._proc is not None:
                return bool(self._proc.child_subreaper())
            if self._libc is not None:
                import ctypes

                was = ctypes.c_int(0)
                return self._libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(was), 0, 0, 0) == 0 and bool(was.value)
        except (OSError, AttributeError):
            pass
        return False

    def set_child_subreaper(self, on: bool) -> bool:
        """Adopt orphans (or stop); True when the kernel took it."""
        try:
            if self._proc is not None:
                self._proc.set_child_subreaper(bool(on))
                return True
            if self._libc is not None:
                return self._libc.prctl(_PR_SET_CHILD_SUBREAPER, int(bool(on)), 0, 0, 0) == 0
        except (OSError, AttributeError):
            pass
        return False

    def default_signal(self, sig: int) -> None:
        try:
            if self._proc is not None:
                self._proc.default_signal(sig)
            elif self._libc is not None:
                self._libc.signal(sig, 0)  # 0 is SIG_DFL
        except OSError:
            pass

    def set_parent_death_signal(self, sig: int) -> None:
        try:
            if self._proc is not None:
                self._proc.set_parent_death_signal(sig)
            elif self._libc is not None:
                self._libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        except OSError:
            pass
