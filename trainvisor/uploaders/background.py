"""A value computed on another thread while the caller does something else."""
from __future__ import annotations

import threading
from typing import Callable, Optional

__all__ = ["Background"]


class Background:
    """Runs one function on its own thread; `result()` joins and re-raises.

    Uploaders hash the local file this way while the upload runs: the file is complete when
    the upload starts, hashlib releases the GIL on large buffers, and verification then costs
    no extra pass over the file after the upload."""

    def __init__(self, fn: Callable[[], str]) -> None:
        self._value: Optional[str] = None
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, args=(fn,), name="trainvisor-hash", daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], str]) -> None:
        try:
            self._value = fn()
        except BaseException as exc:  # handed to the caller of result()
            self._error = exc

    def result(self) -> str:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value
