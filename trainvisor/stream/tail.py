"""A followed log file as a source for the stream engine: `TailFollower.items()`.

It yields what `StreamEngine.drive` reads: a `Chunk` of whole lines as they are written, None
when the file is quiet (so the pipeline ticks), and at the end the partial last line, `Eof` and
`End`. The engine drives it on one thread, so when the follower resumes after a chunk, that
chunk's lines have been parsed and written to the sinks: that is when it commits the position
(`on_commit`), and a position is always the end of a whole line already handed on.

Files are followed the way a training's log is rotated:
- not there yet: it is opened when it appears;
- rename + create (logrotate's default, Python's RotatingFileHandler): the path now names
  another inode; the old one (still open) is read to its end first, then the new one from 0;
- copytruncate, or any truncation: the open file is shorter than what was read, or no longer
  starts with the fingerprinted bytes; what was copied away before it was read is read from the
  copy (a sibling whose first bytes have the same fingerprint), then the file from 0;
- a partial last line is held until its newline comes (across a rotation too: the files are
  one stream, as if concatenated), and handed on at the end.

A restart resumes from a `TailPosition`: the file it names is found at the path or, renamed or
copied, among the path's siblings (by device and inode and by its fingerprint, so a new file
that got the freed inode number is not taken for it). Lines from its `anchor` to its offset are
read again with the owner's sinks muted (`on_warm`), so the parser has their context.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence

from .source import READ_SIZE, Chunk, End, Eof, Gap, Item
from .tailfind import OpenFile, find_sibling, newer_rotations
from .tailpos import FINGERPRINT_BYTES, TailPosition, fingerprint
from .tailwait import PollWaiter, Waiter, make_waiter

__all__ = ["TailFollower", "TailStats", "WARM_LINES", "HEAD_BYTES", "MAX_PENDING"]

log = logging.getLogger("trainvisor.stream.tail")

WARM_LINES = 64  # lines before a restart's position read again, muted, for the parser's context
# The stream's first bytes (whole lines), kept (`on_head`) and read again muted at a restart: where
# logs state their setup and their start (Caffe's seconds count from its "Solving" line, after
# the nets' description: 21 KB into an MNIST log).
HEAD_BYTES = 256 * 1024
MAX_PENDING = 16 * READ_SIZE  # a line longer than this is handed on before its newline (not committed)


@dataclass(frozen=True)
class TailStats:
    """What the follower followed: rotations by rename, truncations (copytruncate included),
    bytes read, and how it waited (inotify or poll)."""

    rotations: int = 0
    truncations: int = 0
    bytes_read: int = 0
    waiter: str = "none"


class TailFollower:
    """Follows `path` as the engine's source; see the module's docstring. `should_end` is asked
    when the file is quiet (the followed process has exited: read what is left, then end);
    `wake_fds` wake the wait (a pidfd); `stop()` ends it from any thread or a signal handler."""

    def __init__(self, path: str | os.PathLike, *, stream: str = "log", start: Optional[TailPosition] = None,
                 on_commit: Callable[[TailPosition], None] = lambda p: None,
                 on_warm: Callable[[bool], None] = lambda muted: None,
                 head: Optional[bytes] = None, on_head: Callable[[bytes], None] = lambda head: None,
                 should_end: Callable[[], bool] = lambda: False, wake_fds: Sequence[int] = (),
                 idle: float = 0.5, waiter: Optional[Waiter] = None, inotify: bool = True,
                 clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time) -> None:
        self.path = os.fspath(path)
        self.stream = stream
        self._start = start
        self._on_commit, self._on_warm, self._should_end = on_commit, on_warm, should_end
        self._wake_fds = tuple(wake_fds)
        self._idle = idle
        self._clock, self._wall = clock, wall_clock
        self._dir = os.path.dirname(os.path.abspath(self.path))
        # the log's directory may not exist yet either: polled until it does (`_wait`)
        self._inotify = inotify and waiter is None
        self._waiter = waiter or (make_waiter(self._dir, inotify=inotify) if os.path.isdir(self._dir)
                                  else PollWaiter())
        self._stop_r, self._stop_w = os.pipe()
        self._stopped = threading.Event()
        self._cur: Optional[OpenFile] = None
        self._pending = b""
        self._lines = start.lines if start else 0
        self._starts: deque[tuple[int, int]] = deque(maxlen=WARM_LINES + 1)  # (offset, lines) of recent line starts
        self._rotations = start.rotations if start else 0
        self._truncations = start.truncations if start else 0
        self._bytes = 0
        self.position: Optional[TailPosition] = start  # the last one committed
        self._head, self._on_head = head or b"", on_head
        # bytes of the head kept so far; None once it is complete (a restart goes on keeping it
        # only if its record says the head was still the whole stream read)
        self._head_bytes: Optional[int] = (0 if start is None else start.head_bytes if start.head_open else None)

    @property
    def stats(self) -> TailStats:
        return TailStats(self._rotations, self._truncations, self._bytes, self._waiter.kind)

    def stop(self) -> None:
        """End the follow: what is in the file now is still read. Safe in a signal handler."""
        self._stopped.set()
        try:
            os.write(self._stop_w, b"x")
        except OSError:
            pass

    def items(self) -> Iterator[Optional[Item]]:
        try:
            if self._start is not None:
                yield from self._resume(self._start)
            else:
                self._on_warm(False)
            ending = False
            while True:
                if self._cur is None:
                    self._cur = OpenFile.at(self.path)
                    if self._cur is not None and not self._pending:
                        self._starts.append((0, self._lines))
                if self._cur is not None:
                    # a truncation is looked for before reading (else the new content would be read
                    # from the old offset), a rename after (the old file is read to its end first)
                    if (yield from self._follow_truncation()):
                        continue
                    yield from self._read_available()
                    if (yield from self._follow_rename()):
                        continue
                if ending:
                    break
                if self._stopped.is_set() or self._should_end():
                    ending = True  # one more pass: what was written before the end is read
                    continue
                if not self._wait():
                    yield None
            if self._pending:  # the last line, complete at the end (never committed: it may grow)
                yield self._chunk(self._pending)
                self._pending = b""
            yield Eof(self.stream)
            yield End()
        finally:
            self.close()

    def close(self) -> None:
        """Free the open file, the wait and the stop pipe (the end of `items()` does; again is harmless)."""
        if self._cur is not None:
            self._cur.close()
            self._cur = None
        self._waiter.close()
        for fd in (self._stop_r, self._stop_w):
            if fd >= 0:
                os.close(fd)
        self._stop_r = self._stop_w = -1

    def _wait(self) -> bool:
        if self._inotify and self._waiter.kind == "poll" and os.path.isdir(self._dir):
            self._waiter.close()
            self._waiter = make_waiter(self._dir)
        return self._waiter.wait(self._idle, (self._stop_r, *self._wake_fds))

    # -- reading ---------------------------------------------------------------------------------
    def _chunk(self, data: bytes) -> Chunk:
        return Chunk(self.stream, data, self._clock(), self._wall())

    def _read_available(self) -> Iterator[Optional[Item]]:
        """The current file from where it was read to its end: whole lines handed on, each batch
        committed once the engine has taken it."""
        cur = self._cur
        while True:
            data = os.pread(cur.fd, READ_SIZE, cur.offset)
            if not data:
                return
            cur.offset += len(data)
            self._bytes += len(data)
            if cur.fp_len < FINGERPRINT_BYTES:
                cur.fp, cur.fp_len = fingerprint(cur.fd)
            buf = self._pending + data if self._pending else data
            nl = buf.rfind(b"\n")
            if nl < 0:
                self._pending = buf
                if len(buf) > MAX_PENDING:  # bounded memory: a huge line goes on in parts
                    self._pending = b""
                    self._head_bytes = None  # the head stays whole lines, the stream's first ones
                    yield self._chunk(buf)
                continue
            whole, self._pending = buf[: nl + 1], buf[nl + 1 :]
            end = cur.offset - len(self._pending)
            self._note_starts(whole, end)
            self._lines += whole.count(b"\n")
            yield self._chunk(whole)
            if self._head_bytes is not None:
                self._keep_head(whole)
            self._commit(end)

    def _note_starts(self, whole: bytes, end: int) -> None:
        """Remember the last WARM_LINES + 1 line starts (offset, lines before it) in `whole`, which
        ends at file offset `end`: a restart's anchor is the oldest of them."""
        base, lines, count = end - len(whole), self._lines, whole.count(b"\n")
        found: list[tuple[int, int]] = []
        pos = len(whole)
        while len(found) <= WARM_LINES:
            nl = whole.rfind(b"\n", 0, pos)
            if nl < 0:
                break
            found.append((base + nl + 1, lines + count - len(found)))
            pos = nl
        self._starts.extend(reversed(found))

    def _keep_head(self, whole: bytes) -> None:
        """The stream's first HEAD_BYTES (whole lines), handed to the owner as they are read,
        before the commit that covers them: context a restart re-reads."""
        room = HEAD_BYTES - self._head_bytes
        take = whole if len(whole) <= room else whole[: whole.rfind(b"\n", 0, room) + 1]
        if take:
            self._on_head(take)
            self._head_bytes += len(take)
        if len(take) < len(whole):
            self._head_bytes = None

    def _commit(self, end: int) -> None:
        cur = self._cur
        anchor, anchor_lines = self._starts[0] if self._starts else (end, self._lines)
        head_open = self._head_bytes is not None
        head = self._head_bytes if head_open else (self.position.head_bytes if self.position else 0)
        self.position = TailPosition(cur.name, cur.dev, cur.ino, cur.fp, cur.fp_len, end, self._lines,
                                     anchor, anchor_lines, None, self._rotations, self._truncations,
                                     head, head_open)
        self._on_commit(self.position)

    def _switch(self, new: Optional[OpenFile], *, rotated: bool) -> None:
        if self._cur is not None and self._cur is not new:
            self._cur.close()
        self._cur = new
        self._starts.clear()
        if not self._pending:  # the new file starts with a line (not the rest of the old file's last)
            self._starts.append((0, self._lines))
        if rotated:
            self._rotations += 1
        else:
            self._truncations += 1

    def _follow_truncation(self) -> Iterator[Optional[Item]]:
        """Was the file truncated (copytruncate included) since it was read? Then what was copied
        away unread is read from the copy, and the file from 0. True when that happened."""
        cur = self._cur
        if not cur.rewritten():
            return False
        log.info("%s was truncated at %d bytes read; reading it from its start", self.path, cur.offset)
        yield from self._rest_from_copy(cur)
        cur.offset = 0
        cur.fp, cur.fp_len = fingerprint(cur.fd)
        self._switch(cur, rotated=False)
        return True

    def _follow_rename(self) -> Iterator[Optional[Item]]:
        """After reading to the end: does the path name another file now (a rename rotation)?
        Then the old one is read to its end and the new one followed. True when that happened."""
        cur = self._cur
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False  # renamed or deleted, the new one not created yet: the old one is still read
        if (st.st_dev, st.st_ino) == (cur.dev, cur.ino):
            return False
        new = OpenFile.at(self.path)
        if new is None:
            return False
        yield from self._read_available()  # what the writer wrote before it rotated
        yield from self._rotated_since(cur)
        log.info("%s was rotated; reading the new file from its start", self.path)
        self._switch(new, rotated=True)
        return True

    def _rotated_since(self, old: OpenFile) -> Iterator[Optional[Item]]:
        """The files rotated after `old` and before the path's file now (more than one rotation
        since it was looked at: `old` is now NAME.K, and NAME.K-1 ... NAME.1 came after it), each
        read whole, in order."""
        for name in newer_rotations(self.path, old.dev, old.ino):
            between = OpenFile.at(name)
            if between is not None:
                self._switch(between, rotated=True)
                yield from self._read_available()

    def _rest_from_copy(self, cur: OpenFile) -> Iterator[Optional[Item]]:
        """A truncated file's bytes after `cur.offset` that were copied away before they were
        read (copytruncate): from the sibling that starts as the file did, if there is one."""
        copy = find_sibling(self.path, cur.fp, cur.fp_len, cur.offset, exclude=(cur.dev, cur.ino))
        if copy is None:
            return
        copy.offset = cur.offset
        self._cur = copy
        try:
            yield from self._read_available()
        finally:
            self._cur = cur
            copy.close()

    # -- a restart ---------------------------------------------------------------------------------
    def _number_from(self, lines: int) -> Iterator[Optional[Item]]:
        """The engine's splitter numbers the next line `lines` + 1, as one uninterrupted read
        would: a Gap of no bytes and `lines` newlines (what a Gap says: lines that went by)."""
        if lines:
            yield Gap(self.stream, 0, lines, True)

    def _head_lines(self, before: int) -> Iterator[Optional[Item]]:
        """Before a re-read that starts after line `before`: the stream's first lines (what the
        parser learns once, such as the log's start time), then the splitter moved on to there."""
        head = b""
        if self._head and before:
            cut = 0
            for _ in range(min(self._head.count(b"\n"), before)):
                cut = self._head.index(b"\n", cut) + 1
            head = self._head[:cut]
            yield self._chunk(head)
        yield from self._number_from(before - head.count(b"\n"))

    def _resume(self, pos: TailPosition) -> Iterator[Optional[Item]]:
        """Find the file `pos` names, re-read its last lines muted, then go on from its offset."""
        ident = (pos.dev, pos.ino)
        old = (find_sibling(self.path, pos.fp, pos.fp_len, pos.offset, ino=ident)
               or find_sibling(self.path, pos.fp, pos.fp_len, pos.offset))
        if old is None:
            log.warning("%s: the file read up to byte %d is gone (rotated away or rewritten); reading %s from its "
                        "start", self.path, pos.offset, self.path)
            yield from self._number_from(pos.lines)
            self._on_warm(False)
            return
        self._starts.append((pos.anchor, pos.anchor_lines))
        if pos.anchor < pos.offset:
            self._on_warm(True)
            warm = os.pread(old.fd, pos.offset - pos.anchor, pos.anchor)
            yield from self._head_lines(pos.anchor_lines)
            yield self._chunk(warm)
            self._lines = pos.anchor_lines  # the re-read lines' starts: the next record's anchor
            self._note_starts(warm, pos.offset)
            self._lines = pos.lines
        else:
            yield from self._number_from(pos.lines)
        self._on_warm(False)
        old.offset = pos.offset
        self._cur = old
        at_path = OpenFile.at(self.path)
        if at_path is None:
            return
        same = (at_path.dev, at_path.ino) == (old.dev, old.ino)
        at_path.close()
        if same:
            return  # the file is where it was: the main loop reads on (and sees a truncation after)
        yield from self._read_available()  # renamed (or copied) while no one read it: its rest first
        renamed = (old.dev, old.ino) == ident
        if renamed:
            yield from self._rotated_since(old)
        self._switch(OpenFile.at(self.path), rotated=renamed)
