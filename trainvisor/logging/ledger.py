"""The writer's ledger: how many of each sender's records are in the file, kept where a
SIGKILL cannot lose it.

A writer killed mid-write leaves the end of a record in the file, and records it wrote but had
not yet acked; their senders re-send those to the next writer, which would write them twice
without knowing what the file already holds. So before each write the writer notes in the
ledger where the bytes go (file, offset, length) and each sender's count once they are in;
after the write it marks those counts committed. The ledger is a shared memory map of the
writer's lock file (past the address line): a store into it is in the page cache at once, so it
outlives the process without a system call per batch. The next writer reads it first: it cuts a
write the kill tore off the end of the file, takes the counts of a write that completed, and
skips every re-sent record the file already holds (`FrameDecoder` compares sequence numbers).

A clean close removes the lock file and the ledger with it: everything sent was written and
acked, and nothing needs to be recognised again.
"""
from __future__ import annotations

import mmap
import os
import struct
from collections import OrderedDict

__all__ = ["Ledger", "LEDGER_OFFSET", "Recovery"]

#: Where the ledger starts in the lock file: the address line lives before it. A page
#: boundary, as mmap requires.
LEDGER_OFFSET = mmap.ALLOCATIONGRANULARITY
SLOTS = 512  # senders remembered (12 KiB); the least recently connected gives its slot up
_MAGIC = b"TVLEDG01"
_HEADER = struct.Struct("<8sQQQQ")  # magic, state, inode, offset, length
_HEADER_BYTES = 64
_SLOT = struct.Struct("<QQQ")  # sender token (0: free), committed count, pending count
_SIZE = _HEADER_BYTES + SLOTS * _SLOT.size
_IDLE, _WRITING = 0, 1


class Recovery:
    """What the ledger found when a writer took over: for the writer's counters and tests."""

    __slots__ = ("torn_bytes", "completed_write", "senders")

    def __init__(self) -> None:
        self.torn_bytes = 0  # bytes of a write the kill cut short, removed from the file's end
        self.completed_write = False  # the dead writer's last write was whole: its counts hold
        self.senders = 0  # senders whose counts were carried over


class Ledger:
    """One writer's ledger, mapped from its (held) lock file descriptor."""

    def __init__(self, fd: int) -> None:
        """OSError when its space cannot be had (a full disk): the writer then runs without one.
        The space is allocated, not only sized: a store into a page a full disk cannot back
        would kill the process (SIGBUS) instead of raising."""
        os.posix_fallocate(fd, LEDGER_OFFSET, _SIZE)
        self._map = mmap.mmap(fd, _SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,
                              offset=LEDGER_OFFSET)
        self._slots: OrderedDict[int, int] = OrderedDict()  # token -> slot, least recently claimed first
        self._free: list[int] = []

    # -- taking over -------------------------------------------------------------------

    def recover(self, log_path: str) -> tuple[Recovery, dict[int, tuple[int, int]]]:
        """Settle what a dead writer left: return what was done and each remembered sender's
        (slot, records in the file). Always leaves the ledger idle and consistent."""
        found = Recovery()
        m = self._map
        magic, state, inode, offset, length = _HEADER.unpack_from(m, 0)
        if magic != _MAGIC:  # a fresh lock file, or one an older writer wrote
            self.reset()
            return found, {}
        promote = state == _WRITING and self._settle(log_path, inode, offset, length, found)
        senders: dict[int, tuple[int, int]] = {}
        for slot in range(SLOTS):
            token, committed, pending = _SLOT.unpack_from(m, _HEADER_BYTES + slot * _SLOT.size)
            if not token:
                self._free.append(slot)
                continue
            if promote and pending > committed:
                committed = pending
            _SLOT.pack_into(m, _HEADER_BYTES + slot * _SLOT.size, token, committed, committed)
            self._slots[token] = slot
            senders[token] = (slot, committed)
        self._free.reverse()  # pop() hands out the lowest free slot first
        _HEADER.pack_into(m, 0, _MAGIC, _IDLE, 0, 0, 0)
        found.senders = len(senders)
        return found, senders

    @staticmethod
    def _settle(log_path: str, inode: int, offset: int, length: int, found: Recovery) -> bool:
        """The dead writer was writing `length` bytes at `offset` of file `inode` (rotation
        only ever happens between writes, so that file is still the one at `log_path`).
        True when the write is whole in the file; a part of it is cut off (its senders were
        never acked, so they re-send it whole)."""
        try:
            st = os.stat(log_path)
        except OSError:
            return False
        if st.st_ino != inode:  # moved by someone else: re-sent records may repeat, none is lost
            return False
        landed = st.st_size - offset
        if landed >= length:
            found.completed_write = True
            return True
        if landed > 0:
            try:
                os.truncate(log_path, offset)
                found.torn_bytes = landed
            except OSError:
                pass
        return False

    def reset(self) -> None:
        """Forget every sender: the file was emptied, or the ledger never existed."""
        self._map[:] = bytes(_SIZE)
        _HEADER.pack_into(self._map, 0, _MAGIC, _IDLE, 0, 0, 0)
        self._slots.clear()
        self._free = list(range(SLOTS - 1, -1, -1))

    # -- senders -----------------------------------------------------------------------

    def claim(self, token: int) -> tuple[int, int | None]:
        """A slot for a newly seen sender; returns (slot, token of the sender that gave it up)."""
        evicted = None
        if self._free:
            slot = self._free.pop()
        else:
            evicted, slot = self._slots.popitem(last=False)
        self._slots[token] = slot
        _SLOT.pack_into(self._map, _HEADER_BYTES + slot * _SLOT.size, token, 0, 0)
        return slot, evicted

    # -- around each write ---------------------------------------------------------------

    def begin(self, inode: int, offset: int, length: int, counts: list[tuple[int, int]]) -> None:
        """Before writing: each (slot, count once the write is in), then the intent itself,
        last, so a kill between the two leaves an idle ledger whose counts are still true."""
        m = self._map
        for slot, count in counts:
            struct.pack_into("<Q", m, _HEADER_BYTES + slot * _SLOT.size + 16, count)
        _HEADER.pack_into(m, 0, _MAGIC, _WRITING, inode, offset, length)

    def commit(self, counts: list[tuple[int, int]]) -> None:
        """After writing (or after giving the batch up: its senders were acked either way)."""
        m = self._map
        for slot, count in counts:
            struct.pack_into("<Q", m, _HEADER_BYTES + slot * _SLOT.size + 8, count)
        struct.pack_into("<Q", m, 8, _IDLE)

    def close(self) -> None:
        try:
            self._map.close()
        except (BufferError, ValueError):
            pass
