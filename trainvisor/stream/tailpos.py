"""Where a followed log was read to: the position record a restarted sidecar resumes from.

A file is named by what cannot lie about it together: its device and inode (which name the
file while it exists, whatever it is renamed to) and a fingerprint of its first bytes (which
tells a new file that got a freed inode number, or a file truncated and written anew, from the
one that was read). The offset is always the end of a whole line that was handed on; the
`anchor` is the start of a line up to `WARM_LINES` lines before it, in the same file, from
where a restart re-reads with its sinks muted so the parser knows the context of the next line
(a Caffe test output names the iteration of a line before it).

The record is written so that a reader finds the old record or the new one, never half of one
(`PositionStore`: two checksummed slots written in turn). It is not fsynced on every commit: a
killed process loses nothing the kernel was given, and only a machine's crash could lose the
last commits (then the lines after the surviving record are reported again: at least once,
never skipped).
"""
from __future__ import annotations

import hashlib
import json
import os
import zlib
from dataclasses import asdict, dataclass
from typing import Optional

__all__ = ["TailPosition", "PositionStore", "FINGERPRINT_BYTES", "fingerprint"]

# Enough to tell two logs apart by their first lines (a Caffe log's first line has the time it
# was created to the second; a logger's first record its time stamp), small enough to read on
# every wake-up.
FINGERPRINT_BYTES = 1024
POSITION_FILE = "tail-position.json"
SLOT_BYTES = 4096  # one page: a record (a path included) fits, and a slot is written in one go


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


class PositionStore:
    """The record in the run directory, rewritten after every batch of lines: two slots, each
    holding a whole record with its sequence number and checksum, written in turn with one
    `pwrite` each (a rename per batch cost a millisecond on a busy disk, a third of the sidecar's
    time at full speed). A write cut short (a crash in the middle of it) spoils only the slot being
    written; the reader takes the valid slot with the higher sequence number."""

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.path = os.path.join(run_dir, POSITION_FILE)
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            # Born whole (both slots "no position yet", then renamed into place): from then on one
            # slot is always valid, whenever a write into the other is cut short.
            tmp = self.path + ".tmp"
            with open(tmp, "wb") as fh:
                fh.write(_slot(0, None) * 2)
            os.replace(tmp, self.path)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        self._seq = 0

    def load(self) -> Optional[TailPosition]:
        """The newest whole record, or None when there is none. A file with no valid slot is an
        error naming it: guessing a position would re-report or skip lines."""
        best: Optional[tuple[int, dict]] = None
        for slot in (0, 1):
            record = _parse_slot(os.pread(self._fd, SLOT_BYTES, slot * SLOT_BYTES))
            if record is not None and (best is None or record[0] > best[0]):
                best = record
        if best is None:
            from ..errors import ConfigError

            raise ConfigError(f"{self.path}: not a tail position record; remove it to read the log from its start")
        self._seq = best[0]
        if best[1] is None:
            return None
        try:
            return TailPosition(**best[1])
        except TypeError as exc:
            from ..errors import ConfigError

            raise ConfigError(f"{self.path}: not a tail position record ({exc})")

    def save(self, position: TailPosition, *, sync: bool = False) -> None:
        """Write the record into the slot not holding the newest one; `sync`: fsync it."""
        self._seq += 1
        os.pwrite(self._fd, _slot(self._seq, asdict(position)), (self._seq % 2) * SLOT_BYTES)
        if sync:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _slot(seq: int, position: Optional[dict]) -> bytes:
    """One slot's bytes: the record as a JSON line padded with spaces to SLOT_BYTES."""
    body = json.dumps(position, sort_keys=True)
    data = json.dumps({"seq": seq, "crc": zlib.crc32(body.encode()), "position": position}).encode()
    if len(data) >= SLOT_BYTES:
        raise ValueError(f"tail position record of {len(data)} bytes (path too long?)")
    return data.ljust(SLOT_BYTES - 1) + b"\n"


def _parse_slot(raw: bytes) -> Optional[tuple[int, dict]]:
    try:
        record = json.loads(raw)
        body = json.dumps(record["position"], sort_keys=True)
        if zlib.crc32(body.encode()) != record["crc"]:
            return None
        return int(record["seq"]), record["position"]
    except (ValueError, KeyError, TypeError):
        return None
