"""What a process needs to become the writer of a log file (`LogTarget`), and the note a
writer leaves beside its socket so that a client that was given only the address (`connect()`,
`attach()`) learns the file too, and can take over when that writer dies."""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

__all__ = ["LogTarget", "read_target", "write_target"]

_TARGET_NAME = "log.target"


@dataclass(frozen=True)
class LogTarget:
    """What any handler of a file needs to become its writer; travels with pickled handlers.
    `path` is the real path, so two spellings of one file elect one writer."""

    path: str
    max_bytes: int
    backup_count: int
    socket_dir: str | None = None

    @classmethod
    def of(cls, filename: str | os.PathLike[str], max_bytes: int, backup_count: int,
           socket_dir: str | os.PathLike[str] | None = None) -> "LogTarget":
        return cls(os.path.realpath(os.fspath(filename)), max_bytes, backup_count,
                   None if socket_dir is None else os.fspath(socket_dir))


def write_target(directory: str, target: LogTarget) -> None:
    """Written before the writer publishes its address, so whoever finds the address finds it."""
    path = os.path.join(directory, _TARGET_NAME)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(asdict(target), f)


def read_target(address: str) -> LogTarget | None:
    """The target the writer at `address` left beside its socket; None when there is none
    (a writer of another version, or a socket that is not a trainvisor writer's)."""
    try:
        with open(os.path.join(os.path.dirname(address), _TARGET_NAME), encoding="utf-8") as f:
            fields = json.load(f)
        target = LogTarget(str(fields["path"]), int(fields["max_bytes"]), int(fields["backup_count"]),
                           None if fields["socket_dir"] is None else str(fields["socket_dir"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return target
