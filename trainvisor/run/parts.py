"""What a started `Run` holds, built in the order that fails fastest: the parser, the pipeline and
its sinks, the upload manager and the checkpoint watcher; and the steps the Run takes with them
(a child supervised into the pipeline, the end, the summary). Typed: the Run reads fields, not
guesses."""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import time
from typing import TYPE_CHECKING, Optional, Sequence

from ..sinks.stats import StatsSink
from .logsetup import RunLogging
from .plugins import _Plugins
from .reporting import _Reporting
from .summary import EXIT_STOPPED, UploadTotals

if TYPE_CHECKING:
    from ..parsers.base import Parser
    from .follow import MetricFollower
    from ..sinks.base import Sink
    from ..sinks.jsonl import JsonlSink
    from ..stoprules import StopRuleSink
    from ..stream.pipeline import Pipeline
    from ..supervisor.supervisor import ProcessResult, Supervisor
    from ..timeline.runner import CallbackThread
    from ..uploaders.group import ManagerGroup
    from ..uploaders.manager import UploadManager
    from ..watch.watcher import CheckpointWatcher
    from .run import Run

__all__ = ["_Parts"]

log = logging.getLogger("trainvisor")

# After a shutdown's child exits: watched folders quiet this long = the exit checkpoint is written.
EXIT_QUIET = 0.5
# Retention's last pass waits this long for a worker's pass in flight (a store that hangs must not
# hold the exit: what is left is deleted at the next start).
LAST_PRUNE_WAIT = 30.0


class _Parts(_Plugins, _Reporting):
    """What a started run holds; built in the order that fails fastest."""

    def __init__(self, run: "Run", parser: "Parser", jsonl: "JsonlSink", counted: list["Sink"],
                 stats_sink: StatsSink) -> None:
        self.run = run
        self.parser = parser
        self.jsonl = jsonl  # the file itself (in `counted` behind its counter): a restart sets its attempt
        self.counted = counted  # the sinks whose records the summary counts (not the run's own helpers)
        self.stats_sink = stats_sink
        self.sinks: list["Sink"] = [*counted, stats_sink]
        self.manager: Optional["UploadManager"] = None  # the first destination's (`group.first`)
        self.group: Optional["ManagerGroup"] = None  # every destination's manager
        self.watcher: Optional["CheckpointWatcher"] = None
        self.uploads: tuple[UploadTotals, ...] = ()  # each destination's, at the end
        self.env: dict[str, str] = {}
        self.pipeline: Optional["Pipeline"] = None  # built last, once every sink is known
        self.follow: Optional["MetricFollower"] = None
        self.stop_rules: Optional["StopRuleSink"] = None
        self.callbacks: Optional["CallbackThread"] = None
        self._timeline_begun = self._timeline_ended = False
        self._watching = False
        self._told = False  # whether the sinks were told how the training ended (tell_outcome)
        self._supervised = False  # whether a child was started into the pipeline

    @classmethod
    def build(cls, run: "Run", logging_: RunLogging, stack: contextlib.ExitStack) -> "_Parts":
        from ..sinks.context import SinkContext
        from ..sinks.jsonl import JsonlSink
        from ..stream.pipeline import Pipeline
        from .build import build_sinks

        cfg = run.config
        parser = _new_parser(run)
        # Appended, never truncated: a resumed run keeps every record of its earlier attempts.
        jsonl = JsonlSink(run.metrics_path, mode="a", extra={"attempt": run.attempt, **run.identity.fields()})
        context = SinkContext(run_id=run.run_id, run_dir=str(run.run_dir), attempt=run.attempt,
                              status=run.status, config=cfg, identity=run.identity.fields())
        counted = build_sinks(cfg.sinks, jsonl=jsonl, objects=run._user_sinks, context=context,
                              host=getattr(run, "hosts_sinks", True))
        stack.callback(_close_sinks, counted)  # the pipeline closes them; this, when a run fails before
        # Always counted (a run that parsed nothing says so). Each metric's last and best value
        # (RunSummary.table, last_metrics) costs 0.25 us a record on the pipeline thread, a quarter
        # of a dense stream's parsing (bench/passthrough.py (b): 862k -> 641k lines/s): kept when a
        # summary is asked for (logging.summary, or a terminal), as the last values always were.
        keep = bool(cfg.logging.summary or (cfg.logging.summary is None and sys.stderr.isatty()))
        stats_sink = StatsSink(keep_last=keep, on_notice=_log_notice)
        parts = cls(run, parser, jsonl, counted, stats_sink)
        # Runs before _close_sinks (last in, first out): a training that started but whose run ends
        # without its result (an error in trainvisor) is told to the sinks as failed, so no MLflow
        # run says FINISHED; one that never started is not a training that failed.
        stack.callback(lambda: parts._supervised and parts._tell_once(1, False))
        parts.env = {**cfg.process.env, **logging_.env}
        parts._build_callbacks(stack)
        parts._build_checkpoints(stack)
        parts._build_stop_rules()
        parts.pipeline = Pipeline(parts.parser, sinks=parts.sinks, hooks=run._hooks)
        if cfg.watch.follow:  # --follow: metric files beside the log, as sources (the module only then)
            from .follow import follower_for

            parts.follow = follower_for(run)
        return parts

    def restart_parser(self, attempt: int) -> None:
        """The next child's records go to the same sinks with its attempt number, read by a
        fresh parser (nothing of the last child's half-read state carries over)."""
        assert self.pipeline is not None
        self.parser = _new_parser(self.run)
        self.pipeline.restart(self.parser)
        self.jsonl.set_extra({"attempt": attempt, **self.run.identity.fields()})

    def _build_checkpoints(self, stack: contextlib.ExitStack) -> None:
        from .build import build_managers, build_watcher, retention_values, watch_dirs

        run, cfg = self.run, self.run.config
        opened = _opened(run)
        if opened and not run.identity.uploads:  # a node's sets are uploaded once: by local rank 0
            log.info("local rank %s: checkpoints are uploaded by local rank 0 of this node, not here",
                     run.identity.local_rank)
            opened = []
        if opened:
            values = retention_values(cfg.upload, str(run.metrics_path))  # --best-by, from the log
            if values is not None:
                self.sinks.append(values)
            from ..watch.policy import parse_policy

            last = parse_policy(cfg.watch.policy).skips_superseded
            self.group = build_managers(cfg.upload, opened, run_dir=str(run.run_dir), run_id=run.run_id,
                                        identity=run.identity, values=values, skip_superseded=last,
                                        defer_unreachable=True)  # an outage never holds the training
            self.manager = self.group.first
            stack.callback(self.group.close, 0.25)  # drain had its time; an upload in flight resumes next start
        cwd = os.path.abspath(cfg.process.cwd or os.getcwd())
        dirs = watch_dirs(cfg.watch, argv=cfg.command, cwd=cwd)
        if not dirs and self.manager is None:
            if cfg.watch.checkpoint_patterns:
                from ..watch.recognizers import default_recognizers

                default_recognizers(cfg.watch.checkpoint_patterns)  # a bad pattern is still an error
            return
        if not dirs and not cfg.watch.announced:
            log.warning("upload.to %s: no --watch directory and announced directories are not watched "
                        "(--no-announced-watch): nothing will be uploaded", _named(cfg))
            return
        shallow: tuple[str, ...] = ()
        if not dirs and cfg.watch.defaults:
            from ..watch.defaults import default_locations

            found = default_locations(cfg.command, cwd=cwd, home=os.path.expanduser("~"), shell=cfg.process.shell)
            dirs, shallow = list(found.recursive), found.shallow
            log.info("upload.to %s: no --watch directory; watching the default checkpoint locations %s, and the "
                     "directories the training's log announces checkpoints in", _named(cfg), found.describe())
        elif not dirs:
            log.info("upload.to %s: no --watch directory; the directories the training's log announces "
                     "checkpoints in are watched", _named(cfg))
        from ..watch.record import CheckpointRecord, FanOut

        # Each destination's manager is handed every set (its submit only journals and queues).
        uploads = list(self.group.managers) if self.group is not None else []
        if self.callbacks is not None:  # the sets, then their (first destination's) upload outcomes, as events
            from ..timeline.runner import CheckpointForward

            uploads[:1] = [CheckpointForward(self.callbacks.put, self.manager)]
        consumers = [CheckpointRecord(run.run_dir / "checkpoints.jsonl")] + uploads
        self.watcher = build_watcher(cfg.watch, dirs, cwd=cwd, consumer=FanOut(consumers),
                                     iters_per_epoch=cfg.parsing.iters_per_epoch, shallow=shallow)
        self.sinks.append(self.watcher.announcement_sink())
        if self.watcher.roots and not shallow:
            log.info("watching %s for checkpoints", ", ".join(self.watcher.roots))

    def new_supervisor(self, command: "Optional[Sequence[str]]" = None) -> "Supervisor":
        from ..stream.source import Channel
        from ..supervisor import Supervisor
        from ..supervisor.record import RECORD_NAME, ProcessRecord
        from .live import DEFAULT_PARSE_BACKLOG

        run, cfg = self.run, self.run.config
        factory = run._supervisor_factory or Supervisor
        return factory(
            list(command or cfg.command), channel=Channel(DEFAULT_PARSE_BACKLOG), shell=cfg.process.shell,
            cwd=cfg.process.cwd, log_file=cfg.process.output_log,
            kill_timeout=run.shutdown.child_kill_timeout(cfg.process.kill_timeout),
            subreaper=True, extra_env=self.env or None, on_supervisor_death=cfg.process.on_supervisor_death,
            pty=cfg.process.pty, stdout_fd=run._stdout_fd, stderr_fd=run._stderr_fd,
            term_signal=signal.Signals[cfg.process.term_signal], on_shutdown=run.shutdown.begin,
            record=ProcessRecord(run.run_dir / RECORD_NAME, attempt=run.attempt),
        )

    def supervise(self, sup: "Supervisor") -> "ProcessResult":
        """One child, its output through the pipeline; the watcher runs from the first child on."""
        from .live import drive_child

        assert self.pipeline is not None
        if self.watcher is not None and not self._watching:
            self.watcher.start()
            self._watching = True
        self._supervised = True
        return drive_child(sup, self.pipeline, max_line=self.run.config.parsing.max_line_bytes,
                           side=(self.follow,) if self.follow is not None else ())

    def tell_outcome(self, result: "ProcessResult") -> None:
        """How the training ended, to each sink that asks (`set_outcome(exit_code, stopped)`: the
        MLflow run's status), before the sinks are closed; a failing one is logged, never fatal.
        `stopped`: stopped on request, or by a signal trainvisor forwarded (a Ctrl-C)."""
        stopped = result.stop_reason is not None or result.signalled_by is not None
        self._tell_once(EXIT_STOPPED if result.stop_reason is not None else result.exit_code, stopped)

    def _tell_once(self, exit_code: int, stopped: bool) -> None:
        if self._told:
            return
        self._told = True
        for counted in self.counted:
            sink = getattr(counted, "sink", counted)  # the sink behind its counting wrapper
            hook = getattr(sink, "set_outcome", None)
            if callable(hook):
                try:
                    hook(exit_code, stopped)
                except Exception as exc:
                    log.error("sink %s: set_outcome failed: %s: %s", counted.name, type(exc).__name__, exc)
    def drive(self, items) -> None:
        """A source other than a child (a followed log) through the pipeline, on this thread; the
        watcher runs from here on, as from a first child."""
        from ..stream.engine import StreamEngine

        assert self.pipeline is not None
        if self.watcher is not None and not self._watching:
            self.watcher.start()
            self._watching = True
        if self.follow is not None:
            from .follow import with_records

            items = with_records(items, self.follow, ready=lambda: bool(self.pipeline.sinks))
        StreamEngine(self.pipeline, max_line=self.run.config.parsing.max_line_bytes).drive(items)

    def finish(self) -> None:
        """The sinks closed (the parser's last records written), the watcher's last sweep, the
        uploads drained within `upload.drain_timeout` of the training's end; after a shutdown
        signal, each within its share of the grace (run/shutdown.py), a SIGTERM or Ctrl-C meanwhile
        heard (FinishSignals) instead of ending trainvisor mid-upload."""
        from .shutdown import FinishSignals

        shutdown, last = self.run.shutdown, self.run._last
        if shutdown.begun and last is not None and last.returncode == -signal.SIGKILL:
            shutdown.abandon(f"the child's wait: it was killed (SIGKILL) "
                             f"{'on a second signal' if shutdown.skipped else 'at the end of its share of the grace'}")
        with FinishSignals(shutdown):
            self._finish()
        if shutdown.begun:
            log.info("%s", shutdown.describe())

    def _finish(self) -> None:
        assert self.pipeline is not None
        ended = time.monotonic()  # upload.drain_timeout counts from here, the watcher's last sweep included
        shutdown = self.run.shutdown
        try:
            if shutdown.begun:
                self._within_shares(shutdown)
            self.pipeline.finish()
            for c in (s.counts() for s in self.counted) if shutdown.begun else ():
                if c.abandoned:
                    shutdown.abandon(f"sink {c.name}: still writing at the end of its share of the grace "
                                     f"({c.dropped} record(s) dropped)")
        finally:
            if self.watcher is not None and self._watching:
                self.watcher.stop(drain=True)
            if self.group is not None:
                timeout = self.run.config.upload.drain_timeout - (time.monotonic() - ended)
                self.uploads = self._drain(max(0.0, timeout))

    def _within_shares(self, shutdown) -> None:
        """A shutdown's steps before the sinks close: the exit checkpoint's wait, by its share;
        the threaded sinks' close_timeout capped by theirs."""
        from .shutdown import CHECKPOINT_SHARE, SINKS_SHARE

        if self.watcher is not None and self._watching:
            self._wait_exit_checkpoint(min(self.run.config.process.exit_checkpoint_wait,
                                           shutdown.left(CHECKPOINT_SHARE)))
        for sink in self.counted:
            deadline = getattr(sink, "deadline", None)
            if deadline is not None:
                deadline.cap(shutdown.left(SINKS_SHARE))

    def _wait_exit_checkpoint(self, limit: float) -> None:
        """A checkpoint the child wrote on its way out: until the watched folders have been quiet
        for a moment (their files' last events arrived), at most `limit` seconds."""
        assert self.watcher is not None
        if not self.watcher.wait_quiet(quiet=EXIT_QUIET, timeout=limit):
            self.run.shutdown.abandon(f"waiting for an exit checkpoint: files still changing after {limit:.1f}s")

    def _drain(self, timeout: float) -> tuple[UploadTotals, ...]:
        """Wait at most upload.drain_timeout for the uploads of every destination (one deadline
        for all: they upload side by side); on a terminal, show what is being waited for. A
        Ctrl-C here stops waiting (what is left resumes on the next start)."""
        from .progress import drain_showing_progress, log_outcome

        cfg, group = self.run.config.upload, self.group
        pending = group.report().pending
        show = pending and not self.run.config.logging.quiet and sys.stderr.isatty()
        if pending:
            log.info("waiting up to %.1fs for %d upload(s)", timeout, len(pending))
        shutdown = self.run.shutdown
        try:
            drain_showing_progress(group, timeout, sys.stderr if show else None,
                                   prefix="trainvisor: uploading (Ctrl-C stops waiting; the rest resumes next start) ",
                                   until=shutdown.deadline)
            if not shutdown.begun:  # the log has ended: every set's value is known (retention's last pass)
                group.prune(wait=LAST_PRUNE_WAIT)
        except KeyboardInterrupt:  # the training has ended: a Ctrl-C now means "stop waiting"
            log.warning("stopped waiting for uploads (Ctrl-C); they resume on the next start on %s", self.run.run_dir)
        reports = group.reports()
        within = f"drain timeout {cfg.drain_timeout:g}s" if not shutdown.begun else f"the {shutdown.grace:g}s grace"
        for url, report in zip(group.urls, reports):
            log_outcome(report, within=within, destination=url)
        left = [r for r in reports if r.pending]
        if shutdown.begun and left:
            shutdown.abandon(f"{sum(len(r.sets.pending) for r in left)} checkpoint set(s) not uploaded within the "
                             f"grace ({'skipped: a second signal' if shutdown.skipped else 'out of time'}; "
                             f"{sum(len(r.pending) for r in left)} file(s) pending); they resume on the next start")
        return tuple(UploadTotals.from_report(url, r) for url, r in zip(group.urls, reports))


def _opened(run: "Run") -> list:
    """Each destination with its uploader: the caller's uploader, else `upload.to`'s, opened. With
    none (most runs), neither the uploaders nor the journal (sqlite3) are loaded."""
    given, cfg = run._uploader, run.config.upload
    if given is not None:
        return [((cfg.destinations or (getattr(given, "url", "") or "",))[0], given)]
    if not cfg.destinations:
        return []
    from .build import open_destinations

    return open_destinations(cfg, run_dir=str(run.run_dir))


def _new_parser(run: "Run") -> "Parser":
    """The parser a child's output is read with: the caller's (an object, or a factory called
    for each child so a restart reads with a fresh one), else the configured one."""
    given = run._parser
    if given is not None:
        return given() if callable(given) and not hasattr(given, "feed") else given
    from .build import build_parser

    cfg = run.config
    return build_parser(cfg.parsing, argv=cfg.command, year=time.localtime().tm_year)


def _close_sinks(sinks: list) -> None:
    """Close what the pipeline has not (each wrapper closes its sink once), failures logged."""
    for sink in sinks:
        try:
            sink.close()
        except Exception as exc:
            log.error("sink %s failed to close: %s: %s", sink.name, type(exc).__name__, exc)


def _named(cfg) -> str:
    """The destinations of `upload.to`, as a message names them."""
    return ", ".join(cfg.upload.destinations)


def _log_notice(notice) -> None:
    """A parser's Notice, once per code (the stats sink's call): the run log, and stderr unless quiet."""
    log.warning("%s (%s line %d)", notice.message, notice.stream, notice.line)
