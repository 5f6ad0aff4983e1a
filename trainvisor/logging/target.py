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
    fd = os.open(os.path.join(directory, _TARGET_NAME), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                 0o600)  # private whatever the umask: read_target trusts nothing else
    with open(fd, "w", encoding="utf-8") as f:
        json.dump(asdict(target), f)


def read_target(address: str) -> LogTarget | None:
    """The target the writer at `address` left beside its socket; None when there is none
    (a writer of another version, or a socket that is not a trainvisor writer's). Only a
    note in a directory of ours that nobody else can write counts: a file planted beside a
    socket in a shared directory must not choose which file this process would write."""
    directory = os.path.dirname(address)
    try:
        fd = os.open(os.path.join(directory, _TARGET_NAME), os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        with open(fd, encoding="utf-8") as f:
            if not (_private(os.fstat(fd)) and _private(os.stat(directory))):
                return None
            fields = json.load(f)
        target = LogTarget(str(fields["path"]), int(fields["max_bytes"]), int(fields["backup_count"]),
                           None if fields["socket_dir"] is None else str(fields["socket_dir"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return target


def _private(st: os.stat_result) -> bool:
    return st.st_uid == os.getuid() and not st.st_mode & 0o022
