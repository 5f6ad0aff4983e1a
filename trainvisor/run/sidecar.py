"""`TailRun`: a run whose source is a training's log file, followed beside it (`trainvisor tail`).

Everything but the source is a `Run`'s: the run directory, the parser, sinks, line hooks, the
checkpoint watcher and uploads, the summary. The source is a `stream.tail.TailFollower`, driven
by the engine on the caller's thread. It ends when the followed process exits (`pid`, or the
last process named `until_exit_of`), after reading what is left, or on `stop_following()` (the
CLI's SIGINT/SIGTERM). A stop rule's `request_stop` signals the followed process instead, as a
run's signals its child; the sidecar reads on until that process has exited.

What a restart guarantees: after each batch of whole lines is parsed, the metrics file is
flushed and only then the position is recorded (`tail-position.json`, with the metrics file's
size at that moment). A sidecar killed at any point (SIGKILL included) and started again on the
same run directory cuts the metrics file back to that size (what it wrote after its last record:
those lines are read again), finds the file the position names and goes on from there: every
metric of the log is in the metrics file exactly once. Sinks on their own thread (not inline)
may lose what was queued at a kill; a machine's crash may repeat the last lines (nothing is
fsynced but the last record at a clean end).
"""
from __future__ import annotations

import dataclasses
import logging
import os
import signal
from typing import Optional

from ..config import RunConfig
from ..errors import ConfigError
from ..stream.tail import TailFollower
from ..stream.tailpos import PositionStore, TailPosition
from .run import Run
from .summary import RunSummary

__all__ = ["TailRun", "ProcessEnd", "HEAD_FILE"]

log = logging.getLogger("trainvisor")

HEAD_FILE = "tail-head.log"  # the log's first bytes, which a restart reads again (muted) for context


class ProcessEnd:
    """When the followed training has ended: the process `pid` (a pidfd wakes the follower the
    moment it exits) or, by `name`, once no process of that name runs any more (after one did)."""

    def __init__(self, pid: Optional[int] = None, name: Optional[str] = None) -> None:
        import psutil

        self.pid, self.name, self.fds = pid, name, ()
        self._psutil, self._seen = psutil, False
        if pid is not None:
            if pid <= 0 or not psutil.pid_exists(pid):
                raise ConfigError(f"--pid {pid}: no such process")
            try:
                self.fds = (os.pidfd_open(pid),)
            except (AttributeError, OSError):  # an older kernel: asked at each quiet moment instead
                pass

    def ended(self) -> bool:
        psutil = self._psutil
        if self.pid is not None:
            try:
                return psutil.Process(self.pid).status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                return True
        if self.name is not None:
            if self._running(self.name):
                self._seen = True
                return False
            return self._seen
        return False

    def _running(self, name: str) -> bool:
        me = os.getpid()
        for proc in self._psutil.process_iter(["name", "cmdline"]):
            argv = proc.info["cmdline"] or []
            names = {proc.info["name"], *(os.path.basename(a) for a in argv[:2])}
            if proc.pid != me and name in names:
                return True
        return False

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = ()


class TailRun(Run):
    """A Run that follows `path` instead of starting a command:

        summary = TailRun(config, "train.log", pid=1234).tail()
    """

    hosts_sinks = False  # its metrics file is cut back at a restart: no reader of it may run ahead (sinks/host)

    needs_command = False

    def __init__(self, config: RunConfig, path: str | os.PathLike, *, pid: Optional[int] = None,
                 until_exit_of: Optional[str] = None, inotify: bool = True, **kwargs: object) -> None:
        super().__init__(config, **kwargs)  # type: ignore[arg-type]
        self.path = os.fspath(path)
        self._pid, self._name, self._inotify = pid, until_exit_of, inotify
        self._follower: Optional[TailFollower] = None
        self._muted: Optional[tuple[list, list]] = None
        self._store: Optional[PositionStore] = None
        self._reread = 0  # lines a restart read again, muted: not counted as parsed twice
        self._followed: Optional[object] = None  # the follow's TailStats, for the summary
        self._record: Optional[TailPosition] = None  # the last position recorded
        self._follow_end_asked = False  # stop_following() came (a signal), maybe before the follower

    def tail(self) -> RunSummary:
        """Follow the log to its end (see the class) and return the summary."""
        if self._stack is None:
            with self:
                return self.tail()
        from ..supervisor.supervisor import ProcessResult

        parts = self._started()
        ends = ProcessEnd(self._pid, self._name)
        try:
            self._store = PositionStore(self.run_dir)
            position = self._store.load()
            self._cut_metrics(position)
            follower = TailFollower(self.path, start=position, on_commit=self._commit, on_warm=self._mute,
                                    head=self._head(position), on_head=self._keep_head,
                                    should_end=ends.ended, wake_fds=ends.fds, inotify=self._inotify,
                                    idle=parts.pipeline.flush_interval)
            with self._control:
                self._follower, stop = follower, self._stop
            if self._follow_end_asked or (stop is not None and self._pid is None):
                follower.stop()  # asked before the follower was there
            log.info("run %s attempt %d: following %s (parser %s, metrics %s)%s", self.run_id, self.attempt,
                     self.path, getattr(parts.parser, "name", type(parts.parser).__name__), self.metrics_path,
                     f" from byte {position.offset} of {position.path}" if position else "")
            self._attempts = 1
            parts.begin_timeline()  # callbacks: train_begin when the follow starts, as before a first child
            parts.drive(follower.items())
            if self._record is not None:
                # The last record as it was, synced: what came after it (a partial last line, what
                # the parser releases at the end) is cut and read again if a sidecar goes on later.
                self._store.save(self._record, sync=True)
        finally:
            follower_ = self._follower
            if follower_ is not None:
                follower_.close()  # a follow that failed before its first item holds its fds still
            ends.close()
            if self._store is not None:
                self._store.close()
        stats = follower.stats
        log.info("run %s: followed %s: %d rotation(s), %d truncation(s), %d bytes read", self.run_id, self.path,
                 stats.rotations, stats.truncations, stats.bytes_read)
        self._last = ProcessResult(0, 0, stop_reason=self._stop.reason if self._stop else None)
        self._followed = stats
        return self.finish()  # a Run's end, as after a child: sinks closed, watcher stopped, uploads drained

    def _summary_extras(self, summary: RunSummary) -> dict:
        """The follow's counts, and the lines parsed without those a restart read again for context."""
        return {"followed": self._followed, "lines": summary.lines - self._reread}

    def stop_following(self) -> None:
        """End the follow after what the log holds now (SIGINT/SIGTERM to the sidecar); safe in a
        signal handler."""
        self._follow_end_asked = True
        follower = self._follower
        if follower is not None:
            follower.stop()

    def request_stop(self, reason: str, *, sig: int = signal.SIGINT, grace: Optional[float] = None) -> bool:
        """A stop rule's stop: `sig` to the followed process (the sidecar reads on until it
        exits); with no process to signal, the follow ends."""
        if not super().request_stop(reason, sig=sig, grace=grace):
            return False
        if self._pid is None:
            self.stop_following()
            return True
        try:
            os.kill(self._pid, sig)
        except ProcessLookupError:
            pass
        return True

    # -- the engine's callbacks (the caller's thread) ----------------------------------------------
    def _commit(self, position: TailPosition) -> None:
        """The lines up to `position` are parsed: the metrics file flushed, then the record."""
        parts = self._started()
        parts.jsonl.flush()
        try:
            size: Optional[int] = os.path.getsize(self.metrics_path)
        except OSError:  # metrics to stdout: nothing to cut at a restart
            size = None
        self._record = dataclasses.replace(position, sink_bytes=size)
        self._store.save(self._record)

    def _head(self, position: Optional[TailPosition]) -> Optional[bytes]:
        """The head kept by the last start, as far as its record says (bytes appended after it
        are cut: they are read again); a fresh follow starts a new one."""
        path = self.run_dir / HEAD_FILE
        if position is None:
            path.write_bytes(b"")
            return None
        try:
            with open(path, "r+b") as fh:
                fh.truncate(position.head_bytes)
                return fh.read()
        except FileNotFoundError:
            return None

    def _keep_head(self, data: bytes) -> None:
        with open(self.run_dir / HEAD_FILE, "ab") as fh:
            fh.write(data)

    def _mute(self, muted: bool) -> None:
        """A restart re-reads the lines before its position for their context: what the parser
        makes of them was written by the sidecar before, so sinks and hooks do not see it."""
        pipeline = self._started().pipeline
        if muted and self._muted is None:
            self._muted = (pipeline.sinks, pipeline.hooks)
            pipeline.sinks, pipeline.hooks = [], []
            self._reread -= pipeline.stats.lines
        elif not muted and self._muted is not None:
            pipeline.sinks, pipeline.hooks = self._muted
            self._muted = None
            self._reread += pipeline.stats.lines

    def _cut_metrics(self, position: Optional[TailPosition]) -> None:
        """Records a killed sidecar wrote after its last position record are cut: their lines
        are read again."""
        if position is None or position.sink_bytes is None:
            return
        try:
            size = os.path.getsize(self.metrics_path)
        except OSError:
            return
        if size > position.sink_bytes:
            log.info("%s: cutting %d bytes written after the last recorded position (their lines are read again)",
                     self.metrics_path, size - position.sink_bytes)
            os.truncate(self.metrics_path, position.sink_bytes)
