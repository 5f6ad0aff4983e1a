"""What a supervision hands back, and what a stop asks for: frozen, read on other threads and
by the run (`run.live.RunResult` wraps a `ProcessResult`)."""
from __future__ import annotations

from typing import NamedTuple, Optional

from .._frozen import frozen

__all__ = ["ProcessResult", "StopRequest"]


@frozen
class ProcessResult:
    """How the child ended, and what it took: the process's side of a run."""

    exit_code: int
    returncode: int
    unparsed_bytes: int = 0
    killed_processes: int = 0
    signalled_by: Optional[int] = None
    stop_reason: Optional[str] = None
    """Why the owner asked the training to stop (`stop()`), if it did."""

    @property
    def signal(self) -> Optional[int]:
        return -self.returncode if self.returncode < 0 else None


class StopRequest(NamedTuple):
    """A stop asked for: why, the polite signal, and its grace before SIGTERM."""

    reason: str
    signal: int
    grace: float
