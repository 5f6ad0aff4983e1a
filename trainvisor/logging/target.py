"""What a process needs to become the writer of a log file (`LogTarget`), the note a writer
leaves beside its socket so that a client that was given only the address (`connect()`,
`attach()`) learns the file too, and can take over when that writer dies, and the address
itself: a socket path, or a file at that path naming an abstract socket."""
from __future__ import annotations

import errno
import json
import os
import socket
import stat
import struct
from dataclasses import asdict

from .._frozen import frozen

__all__ = ["LogTarget", "read_target", "write_target", "bind_listener", "connectable", "same_user",
           "MAX_SOCKET_PATH"]

MAX_SOCKET_PATH = 107  # sun_path is 108 bytes including the terminating NUL

_TARGET_NAME = "log.target"


@frozen
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


def bind_listener(listener: socket.socket, address: str) -> bool:
    """Bind `listener` at the path `address`; True when it had to go to the abstract namespace.

    The socket lives beside the log file (in the run directory), where a path may be longer
    than sun_path holds or the filesystem may hold no sockets. Then it is bound under a random
    abstract name (gone with the process: nothing to leave behind), and `address` becomes a
    private file holding that name, so every address stays a path in the private directory
    (the note beside it, the stale-directory cleanup and `connectable` work the same)."""
    if len(address.encode()) <= MAX_SOCKET_PATH:
        try:
            listener.bind(address)
            return False
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EACCES):
                raise
    # os.urandom is what secrets.token_hex reads; `secrets` would load hashlib (OpenSSL) into every run
    name = f"trainvisor-log-{os.urandom(16).hex()}"
    listener.bind("\0" + name)
    fd = os.open(address, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with open(fd, "w", encoding="ascii") as f:
        f.write(name)
    return True


def connectable(address: str) -> str:
    """What `socket.connect` takes for `address`: the path of a socket, or the abstract name a
    file there holds (see `bind_listener`). OSError when there is nothing at `address`."""
    st = os.stat(address)
    if not stat.S_ISREG(st.st_mode):
        return address
    with open(address, encoding="ascii") as f:
        return "\0" + f.read(64).strip()


def same_user(conn: socket.socket) -> bool:
    """Whether the process at the other end of `conn` runs as this user: an abstract socket has
    no file mode to keep others out, so the writer asks each connection."""
    pid_uid_gid = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", pid_uid_gid)[1] == os.getuid()
