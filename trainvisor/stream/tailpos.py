"""Where a followed log was read to: the position record a restarted sidecar resumes from.

A file is named by what cannot lie about it together: its device and inode (which name the
file while it exists, whatever it is renamed to) and a fingerprint of its first bytes (which
tells a new file that got a freed inode number, or a file truncated and written anew, from the
one that was read). The offset is always the end of a whole line that was handed on; the
`anchor` is the start of a line up to `WARM_LINES` lines before it, in the same file, from
where a restart re-reads with its sinks muted so the parser knows the context of the next line
(a Caffe test output names the iteration of a line before it).

The record is written atomically (a temporary file, then rename): a reader sees the old record
or the new one, never half of one. It is not fsynced on every commit: a killed process loses
nothing the kernel was given, and only a machine's crash could lose the last commits (then the
lines after the surviving record are reported again: at least once, never skipped).
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from typing import Optional

__all__ = ["TailPosition", "FINGERPRINT_BYTES", "fingerprint", "load_position", "save_position"]

# Enough to tell two logs apart by their first lines (a Caffe log's first line has the time it
# was created to the second; a logger's first record its time stamp), small enough to read on
# every wake-up.
FINGERPRINT_BYTES = 1024
POSITION_FILE = "tail-position.json"


@dataclass(frozen=True)
class TailPosition:
    """What was handed on, in which file. `fp_len` bytes were fingerprinted (fewer than
    FINGERPRINT_BYTES while the file was shorter). `lines`: the stream's line count at `offset`
    (so a restart numbers lines as one uninterrupted read would); `sink_bytes`: the size of the
    run's metrics file once the lines up to `offset` were written to it (a restart cuts what a
    killed sidecar wrote after its last commit, since those lines are read again); `head_bytes`:
    how much of the stream's head (its first bytes, re-read for context) was kept, `head_open`:
    whether it is still being kept (all that was read so far)."""

    path: str
    dev: int
    ino: int
    fp: str
    fp_len: int
    offset: int
    lines: int
    anchor: int
    anchor_lines: int
    sink_bytes: Optional[int] = None
    rotations: int = 0
    truncations: int = 0
    head_bytes: int = 0
    head_open: bool = True


def fingerprint(fd: int, length: int = FINGERPRINT_BYTES) -> tuple[str, int]:
    """The digest of an open file's first `length` bytes (fewer if it is shorter), and how many."""
    head = os.pread(fd, length, 0)
    return hashlib.sha256(head).hexdigest(), len(head)


def same_start(fd: int, fp: str, fp_len: int) -> bool:
    """Whether the open file still starts with the fingerprinted bytes."""
    head = os.pread(fd, fp_len, 0)
    return len(head) == fp_len and hashlib.sha256(head).hexdigest() == fp


def load_position(run_dir: str | os.PathLike) -> Optional[TailPosition]:
    """The stored record, or None when there is none. A record that cannot be read is an error
    with its path: guessing a position would re-report or skip lines."""
    path = os.path.join(run_dir, POSITION_FILE)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        return TailPosition(**data)
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as exc:
        from ..errors import ConfigError

        raise ConfigError(f"{path}: not a tail position record ({exc}); remove it to read the log from its start")


def save_position(run_dir: str | os.PathLike, position: TailPosition, *, sync: bool = False) -> None:
    """Replace the record atomically; `sync`: fsync it (at a clean end, not on every commit)."""
    path = os.path.join(run_dir, POSITION_FILE)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, json.dumps(asdict(position)).encode())
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
