"""The run's side of the sink host: the process started, told, waited for; each hosted sink as
the summary sees it.

`SinkHost.spawn` starts `python -m trainvisor.sinks.host` and goes on (the host's imports
happen in the host); its stderr is relayed to the run log as it comes (a sink's failure reads
as in the run). `HostedSink` stands where the sink stood in the run's list of sinks, under the
same label: its `write` is nothing (the host reads the file), its `set_outcome` is passed on,
and its `close` (after the JSONL file's, which comes first in that list) sends the file's final
length and waits for the host's counts within the threaded sinks' shared `CloseDeadline`. A host
that died, or did not report in time (then it is killed: no process outlives the run), is said
in one WARNING line, and its sinks count every record the run wrote as failed."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from typing import Callable, Optional

from ..threaded import CloseDeadline, SinkCounts
from .wire import HostStart, end_line, outcome_line, read_counts, read_log, start_line

__all__ = ["SinkHost", "HostedSink"]

log = logging.getLogger("trainvisor.sinks")



class SinkHost:
    """One host process for the run's hostable sinks. `records()`: how many records the run
    wrote to the file (the JSONL sink's count): what a host that never reported failed."""

    def __init__(self, proc: subprocess.Popen, start: HostStart, deadline: CloseDeadline,
                 records: Callable[[], int]) -> None:
        self.proc, self.start, self.deadline, self._records = proc, start, deadline, records
        self.names = start.labels or tuple(n for n, _ in start.sinks)
        self.report: Optional[dict[str, SinkCounts]] = None
        self.failed_reason = ""
        self._out_done = threading.Event()  # its stdout ended: reported, or died
        self._lock = threading.Lock()
        self._ended = self._told = False
        threading.Thread(target=self._read_report, name="trainvisor-sinkhost-out", daemon=True).start()
        threading.Thread(target=self._relay, name="trainvisor-sinkhost-err", daemon=True).start()
        self._send(start_line(start))

    @classmethod
    def spawn(cls, start: HostStart, deadline: CloseDeadline, records: Callable[[], int]) -> "SinkHost":
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        env = dict(os.environ)  # the host imports this trainvisor, wherever it was imported from
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        proc = subprocess.Popen([sys.executable, "-m", "trainvisor.sinks.host"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, close_fds=True)
        log.info("sink host started (pid %d): %s", proc.pid, ", ".join(n for n, _ in start.sinks))
        return cls(proc, start, deadline, records)

    def tell(self, exit_code: int, stopped: bool) -> None:
        """How the training ended (MLflow's status), once."""
        with self._lock:
            if self._told:
                return
            self._told = True
        self._send(outcome_line(exit_code, stopped))

    def end(self) -> None:
        """The file is closed: send its length, wait for the counts (the shared deadline), and
        make sure the host is gone. Idempotent: the first hosted sink's close does it."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
        try:
            length = os.path.getsize(self.start.path)
        except OSError:
            length = self.start.offset
        self._send(end_line(length, self.deadline.remaining()))
        self._close_stdin()
        self._out_done.wait(self.deadline.remaining())
        if self.report is None:
            self._give_up()
        try:
            self.proc.wait(self.deadline.remaining() + 1.0)
        except subprocess.TimeoutExpired:
            self._kill()

    def counts(self, name: str) -> SinkCounts:
        if self.report is not None and name in self.report:
            return self.report[name]
        abandoned = bool(self.failed_reason) and "did not finish" in self.failed_reason
        return SinkCounts(name, 0, 0, self._records() if self._ended else 0, abandoned=abandoned)

    # -- internals ------------------------------------------------------------------------------
    def _send(self, data: bytes) -> None:
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (OSError, ValueError):  # the host is gone: said once, at the end
            pass

    def _close_stdin(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    def _give_up(self) -> None:
        code = self.proc.poll()
        if code is None and self._out_done.is_set():  # its output ended: it is exiting
            try:
                code = self.proc.wait(2.0)
            except subprocess.TimeoutExpired:
                pass
        if code is None:
            self.failed_reason = (f"did not finish within sinks.close_timeout ({self.deadline.timeout:g}s): "
                                  f"killed")
            self._kill()
        else:
            self.failed_reason = f"exited with code {code} before it reported"
        log.warning("sink host (pid %d) %s; its sinks (%s) count every record as failed",
                    self.proc.pid, self.failed_reason, ", ".join(self.names))

    def _kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(5.0)
        except (OSError, subprocess.TimeoutExpired):
            pass

    def _read_report(self) -> None:
        try:
            for line in self.proc.stdout:
                counts = read_counts(line)
                if counts is not None:
                    self.report = {c.name: c for c in counts}
            self.proc.stdout.close()
        finally:
            self._out_done.set()

    def _relay(self) -> None:
        """The host's log records into the run's log as the run's own (a hosted sink's message
        reads as it would in the run; a traceback goes to the run log, the console says where).
        A line that is not a record (a library's print, a crashing interpreter's traceback) goes
        to the run log only, named as the host's."""
        for raw in self.proc.stderr:
            got = read_log(raw)
            if got is None:
                log.info("sink host: %s", raw.decode("utf-8", "replace").rstrip("\n"))
            elif log.isEnabledFor(got.level):
                record = log.makeRecord(log.name, got.level, __file__, 0, "%s", (got.message,), None)
                record.exc_text = got.traceback  # written by the run log's formatter after the message
                log.handle(record)
        self.proc.stderr.close()

class HostedSink:
    """A hosted sink in the run's list, under its label: counted by the host. Made before the
    host is started (`host` None until then: a run whose later sink fails its check starts none)."""

    hosted = True
    threaded = True

    def __init__(self, name: str, *, sink_name: Optional[str] = None) -> None:
        self.name = name  # its label in the run's counts (`csv#3`: a second csv)
        self.sink_name = sink_name or name  # the registered sink the host makes
        self.host: Optional[SinkHost] = None

    @property
    def deadline(self) -> Optional[CloseDeadline]:
        return self.host.deadline if self.host is not None else None  # a shutdown caps it with the others'

    def write(self, events) -> None:
        pass

    def flush(self) -> None:
        pass

    def set_outcome(self, exit_code: int, stopped: bool) -> None:
        if self.host is not None:
            self.host.tell(exit_code, stopped)

    def close(self) -> None:
        if self.host is not None:
            self.host.end()

    def counts(self) -> SinkCounts:
        return self.host.counts(self.name) if self.host is not None else SinkCounts(self.name, threaded=True)


def start_host(cfg, sinks: list, *, jsonl, context, deadline: CloseDeadline) -> SinkHost:
    """The host for the `HostedSink`s among `sinks` (build_sinks' list: its first, the JSONL
    file's counter, counts what the run wrote), started from the file's length now."""
    from ...config.convert import to_dict
    from ..registry import _plain

    views = [s for s in sinks if getattr(s, "hosted", False)]
    path = os.path.abspath(jsonl.path)
    try:
        offset = os.path.getsize(path)
    except OSError:
        offset = 0
    start = HostStart(path=path, offset=offset,
                      sinks=tuple((v.sink_name, _plain(cfg.options.get(v.sink_name, {}))) for v in views),
                      labels=tuple(v.name for v in views),
                      run_id=context.run_id, run_dir=context.run_dir, attempt=context.attempt,
                      identity=dict(context.identity),
                      config=to_dict(context.config, mask_secrets=True) if context.config is not None else None,
                      queue=cfg.queue, cpu_share=cfg.cpu_share, backlog=cfg.backlog)
    counter = sinks[0]
    host = SinkHost.spawn(start, deadline, lambda: getattr(counter, "written", 0))
    for v in views:
        v.host = host
    return host
