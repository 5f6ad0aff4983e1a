"""What a started `Run` holds, built in the order that fails fastest: the parser, the pipeline and
its sinks, the upload manager and the checkpoint watcher; and the steps the Run takes with them
(a child supervised into the pipeline, the end, the summary). Typed: the Run reads fields, not
guesses."""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from typing import TYPE_CHECKING, Optional, Sequence

from ..sinks.stats import StatsSink
from .logsetup import RunLogging
from .summary import EXIT_STOPPED, FaultCount, RunSummary, UploadTotals

if TYPE_CHECKING:
    from ..parsers.base import Parser
    from ..sinks.base import Sink
    from ..sinks.jsonl import JsonlSink
    from ..stoprules import Firing, StopRuleSink
    from ..stream.pipeline import Pipeline
    from ..supervisor.supervisor import ProcessResult, Supervisor
    from ..timeline.runner import CallbackThread
    from ..uploaders.manager import UploadManager
    from ..watch.watcher import CheckpointWatcher
    from .run import Run

__all__ = ["_Parts"]

log = logging.getLogger("trainvisor")


class _Parts:
    """What a started run holds; built in the order that fails fastest."""

    def __init__(self, run: "Run", parser: "Parser", jsonl: "JsonlSink", counted: list["Sink"],
                 stats_sink: StatsSink) -> None:
        self.run = run
        self.parser = parser
        self.jsonl = jsonl  # the file itself (in `counted` behind its counter): a restart sets its attempt
        self.counted = counted  # the sinks whose records the summary counts (not the run's own helpers)
        self.stats_sink = stats_sink
        self.sinks: list["Sink"] = [*counted, stats_sink]
        self.manager: Optional["UploadManager"] = None
        self.watcher: Optional["CheckpointWatcher"] = None
        self.uploads: Optional[UploadTotals] = None
        self.env: dict[str, str] = {}
        self.pipeline: Optional["Pipeline"] = None  # built last, once every sink is known
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
        counted = build_sinks(cfg.sinks, jsonl=jsonl, objects=run._user_sinks, context=context)
        stack.callback(_close_sinks, counted)  # the pipeline closes them; this, when a run fails before
        # Always counted (a run that parsed nothing says so), with each metric's last and best
        # value: RunSummary.table has them whether a summary is printed or not.
        stats_sink = StatsSink(keep_last=True, on_notice=_log_notice)
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
        return parts

    def restart_parser(self, attempt: int) -> None:
        """The next child's records go to the same sinks with its attempt number, read by a
        fresh parser (nothing of the last child's half-read state carries over)."""
        assert self.pipeline is not None
        self.parser = _new_parser(self.run)
        self.pipeline.restart(self.parser)
        self.jsonl.set_extra({"attempt": attempt, **self.run.identity.fields()})

    def _build_checkpoints(self, stack: contextlib.ExitStack) -> None:
        from .build import build_manager, build_watcher, open_destination, watch_dirs

        run, cfg = self.run, self.run.config
        uploader = run._uploader or open_destination(cfg.upload, run_dir=str(run.run_dir))
        if uploader is not None and not run.identity.uploads:  # a node's sets are uploaded once: by local rank 0
            log.info("local rank %s: checkpoints are uploaded by local rank 0 of this node, not here",
                     run.identity.local_rank)
            uploader = None
        if uploader is not None:
            self.manager = build_manager(cfg.upload, uploader, run_dir=str(run.run_dir), run_id=run.run_id,
                                         identity=run.identity)
            stack.callback(self.manager.close, 0.25)  # drain had its time; an upload in flight resumes next start
        cwd = os.path.abspath(cfg.process.cwd or os.getcwd())
        dirs = watch_dirs(cfg.watch, argv=cfg.command, cwd=cwd)
        if not dirs and self.manager is None:
            if cfg.watch.checkpoint_patterns:
                from ..watch.recognizers import default_recognizers

                default_recognizers(cfg.watch.checkpoint_patterns)  # a bad pattern is still an error
            return
        if not dirs and not cfg.watch.announced:
            log.warning("upload.to %s: no --watch directory and announced directories are not watched "
                        "(--no-announced-watch): nothing will be uploaded", cfg.upload.to)
            return
        shallow: tuple[str, ...] = ()
        if not dirs and cfg.watch.defaults:
            from ..watch.defaults import default_locations

            found = default_locations(cfg.command, cwd=cwd, home=os.path.expanduser("~"), shell=cfg.process.shell)
            dirs, shallow = list(found.recursive), found.shallow
            log.info("upload.to %s: no --watch directory; watching the default checkpoint locations %s, and the "
                     "directories the training's log announces checkpoints in", cfg.upload.to, found.describe())
        elif not dirs:
            log.info("upload.to %s: no --watch directory; the directories the training's log announces "
                     "checkpoints in are watched", cfg.upload.to)
        from ..watch.record import CheckpointRecord, FanOut

        uploads = [self.manager] if self.manager else []
        if self.callbacks is not None:  # the sets, then their upload outcomes, as checkpoint events
            from ..timeline.runner import CheckpointForward

            uploads = [CheckpointForward(self.callbacks.put, self.manager)]
        consumers = [CheckpointRecord(run.run_dir / "checkpoints.jsonl")] + uploads
        self.watcher = build_watcher(cfg.watch, dirs, cwd=cwd, consumer=FanOut(consumers),
                                     iters_per_epoch=cfg.parsing.iters_per_epoch, shallow=shallow)
        self.sinks.append(self.watcher.announcement_sink())
        if self.watcher.roots and not shallow:
            log.info("watching %s for checkpoints", ", ".join(self.watcher.roots))

    def _build_stop_rules(self) -> None:
        """The stop rules, last among the sinks (a metric is written before it stops the run)."""
        from .build import build_stop_rules

        run = self.run

        def fire(firing: "Firing") -> None:  # the pipeline thread; request_stop only records and wakes
            reason = firing.describe()
            log.warning("%s: stopping the training", reason)
            run.request_stop(reason)

        self.stop_rules = build_stop_rules(run.config.stop, fire)
        if self.stop_rules is not None:
            self.sinks.append(self.stop_rules)
    def _build_callbacks(self, stack: contextlib.ExitStack) -> None:
        """The callbacks `callbacks.use` names (imported, made, checked) and the caller's, on their own
        thread, fed by the timeline of the metric stream (an inline sink: it sees every record)."""
        run, cfg = self.run, self.run.config.callbacks
        if not (cfg.use or cfg.options or run._callbacks):
            return
        from ..errors import ConfigError
        from ..timeline.callbacks import load_callback
        from ..timeline.dispatch import Dispatcher
        from ..timeline.runner import CallbackThread, TimelineSink

        for spec in cfg.options:
            if spec not in cfg.use:
                raise ConfigError(f"callbacks.options.{spec}: no callback {spec!r} in callbacks.use "
                                  f"(--callback {spec})")
        registered = [load_callback(spec, cfg.options.get(spec, {})) for spec in cfg.use] + run._callbacks
        self.callbacks = CallbackThread(Dispatcher(registered, request_stop=run.request_stop), capacity=cfg.queue)
        stack.callback(self._close_timeline)  # also when the run fails before its end
        self.sinks.append(TimelineSink(self.callbacks.put))

    def begin_timeline(self) -> None:
        if self.callbacks is not None:
            from ..timeline.events import TrainBegin

            self.callbacks.put([TrainBegin(self.run.run_id, tuple(self.run.config.command), time.time())])
            self._timeline_begun = True

    def end_timeline(self, result: "ProcessResult") -> None:
        """train_end (after the pipeline's last events and the uploads' outcomes), then the callbacks
        get `callbacks.close_timeout` to finish."""
        if self.callbacks is None:
            return
        from ..timeline.events import TrainEnd

        stopped = result.stop_reason is not None
        reason = result.stop_reason if stopped else (
            f"killed by signal {-result.returncode}" if result.returncode < 0 else f"exit code {result.exit_code}")
        self.callbacks.put([TrainEnd(result.exit_code, reason, stopped, time.time())])
        self._timeline_ended = True
        self.callbacks.close(self.run.config.callbacks.close_timeout)

    def _close_timeline(self) -> None:
        """A run that raised after train_begin (the command could not be started) still ends its
        callbacks' timeline, with no exit code."""
        if self._timeline_begun and not self._timeline_ended:
            from ..timeline.events import TrainEnd

            self._timeline_ended = True
            self.callbacks.put([TrainEnd(None, "the run failed before the training ended", False, time.time())])
        self.callbacks.close(self.run.config.callbacks.close_timeout)

    def new_supervisor(self, command: "Optional[Sequence[str]]" = None) -> "Supervisor":
        from ..stream.source import Channel
        from ..supervisor import Supervisor
        from .live import DEFAULT_PARSE_BACKLOG

        run, cfg = self.run, self.run.config
        factory = run._supervisor_factory or Supervisor
        return factory(
            list(command or cfg.command), channel=Channel(DEFAULT_PARSE_BACKLOG), shell=cfg.process.shell,
            cwd=cfg.process.cwd, log_file=cfg.process.output_log, kill_timeout=cfg.process.kill_timeout,
            subreaper=True, extra_env=self.env or None, on_supervisor_death=cfg.process.on_supervisor_death,
            pty=cfg.process.pty, stdout_fd=run._stdout_fd, stderr_fd=run._stderr_fd,
        )

    def supervise(self, sup: "Supervisor") -> "ProcessResult":
        """One child, its output through the pipeline; the watcher runs from the first child on."""
        from .live import drive_child

        assert self.pipeline is not None
        if self.watcher is not None and not self._watching:
            self.watcher.start()
            self._watching = True
        self._supervised = True
        return drive_child(sup, self.pipeline, max_line=self.run.config.parsing.max_line_bytes)

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
        StreamEngine(self.pipeline, max_line=self.run.config.parsing.max_line_bytes).drive(items)

    def finish(self) -> None:
        """The sinks closed (the parser's last records written), the watcher's last sweep, the
        uploads drained within `upload.drain_timeout` of the training's end."""
        assert self.pipeline is not None
        ended = time.monotonic()  # upload.drain_timeout counts from here, the watcher's last sweep included
        try:
            self.pipeline.finish()
        finally:
            if self.watcher is not None and self._watching:
                self.watcher.stop(drain=True)
            if self.manager is not None:
                timeout = self.run.config.upload.drain_timeout - (time.monotonic() - ended)
                self.uploads = self._drain(max(0.0, timeout))

    def _drain(self, timeout: float) -> UploadTotals:
        """Wait at most upload.drain_timeout for the uploads; on a terminal, show what is being
        waited for. A Ctrl-C here stops waiting (what is left resumes on the next start)."""
        from .progress import drain_showing_progress, log_outcome

        cfg = self.run.config.upload
        pending = self.manager.report().pending
        show = pending and not self.run.config.logging.quiet and sys.stderr.isatty()
        if pending:
            log.info("waiting up to %.1fs for %d upload(s)", timeout, len(pending))
        try:
            report = drain_showing_progress(
                self.manager, timeout, sys.stderr if show else None,
                prefix="trainvisor: uploading (Ctrl-C stops waiting; the rest resumes next start) ")
        except KeyboardInterrupt:  # the training has ended: a Ctrl-C now means "stop waiting"
            log.warning("stopped waiting for uploads (Ctrl-C); they resume on the next start on %s", self.run.run_dir)
            report = self.manager.report()
        log_outcome(report, within=f"drain timeout {cfg.drain_timeout:g}s")
        return UploadTotals.from_report(cfg.to or getattr(self.run._uploader, "url", "") or "", report)

    def status_counts(self) -> dict:
        """The counts of a `RunStatus`, read from the parts without a lock: each is one int
        written by one thread (the pipeline's, the watcher's) or a snapshot taken under its own
        lock (the upload manager's progress)."""
        stats = self.pipeline.stats if self.pipeline is not None else None
        last = self.stats_sink.last_time
        counts = dict(lines=stats.lines if stats else 0, records=stats.events if stats else 0,
                      metrics=self.stats_sink.metrics,
                      faults=self.pipeline.faults.total if self.pipeline is not None else 0,
                      checkpoints_complete=self.watcher.stats.handed_over if self.watcher is not None else 0,
                      seconds_since_metric=None if last is None else max(0.0, time.time() - last))
        if self.manager is not None:
            p = self.manager.progress()
            counts.update(uploads_verified=p.sets_verified, uploads_failed=p.sets_failed, upload_bytes=p.bytes_sent)
        return counts

    def summarise(self, result: "ProcessResult", *, attempts: int) -> RunSummary:
        from .endwarnings import end_warnings

        assert self.pipeline is not None
        stats_sink, watcher, cfg = self.stats_sink, self.watcher, self.run.config
        stats = self.pipeline.stats
        found = watcher.stats.handed_over if watcher is not None else 0
        destination = None if self.manager is None else (
            cfg.upload.to or getattr(self.run._uploader, "url", "") or type(self.run._uploader).__name__)
        warnings = end_warnings(destination=destination, checkpoints_found=found,
                                watched=sorted(watcher.roots) if watcher is not None else (),
                                lines=stats.lines, metrics=stats_sink.metrics,
                                parser=getattr(self.parser, "name", type(self.parser).__name__))
        warnings += self._unapplied_rules()
        for w in warnings:
            log.warning("%s", w)
        sinks = tuple(s.counts() for s in self.counted)
        for c in sinks:  # the run log keeps them when no summary is printed
            log.info("sink %s: %d records written, %d dropped, %d failed%s", c.name, c.written, c.dropped, c.failed,
                     " (abandoned at the end)" if c.abandoned else "")
        if result.stop_reason is not None:
            log.warning("the training was stopped on request (%s); exit code %d (the child's %d)",
                        result.stop_reason, EXIT_STOPPED, result.exit_code)
        return RunSummary(
            run_id=self.run.run_id, attempt=self.run.attempt, run_dir=str(self.run.run_dir),
            command=self.run.config.command,
            exit_code=EXIT_STOPPED if result.stop_reason is not None else result.exit_code,
            returncode=result.returncode, lines=stats.lines, events=stats.events,
            metrics_path=str(self.run.metrics_path), truncated_lines=stats.truncated_lines,
            unparsed_bytes=result.unparsed_bytes, binary_bytes=stats.binary_bytes,
            killed_processes=result.killed_processes,
            signalled_by=result.signalled_by,
            faults=tuple(FaultCount(c, n) for c, n in sorted({**self.pipeline.faults.counts, **(
                self.callbacks.dispatcher.faults.counts if self.callbacks is not None else {})}.items())),
            metrics=stats_sink.metrics, checkpoints_announced=stats_sink.checkpoints, checkpoints_complete=found,
            uploads=self.uploads, last_metrics=tuple(stats_sink.last.values()), table=stats_sink.table.rows(),
            notices=tuple(stats_sink.notices.values()), warnings=warnings,
            stop_reason=result.stop_reason, attempts=attempts, sinks=sinks,
            stop_rule=self.stop_rules.rules.fired if self.stop_rules is not None else None,
        )

    def _unapplied_rules(self) -> tuple[str, ...]:
        """A rule whose metric the run never produced did nothing: said, never a silent nothing."""
        if self.stop_rules is None:
            return ()
        rules = self.stop_rules.rules
        seen = ", ".join(sorted(rules.names_seen)[:12]) or "none"
        return tuple(f"stop rule {r!r} never applied: no metric it names was parsed (metrics seen: {seen})"
                     for r in rules.unmatched())


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


def _log_notice(notice) -> None:
    """A parser's Notice, once per code (the stats sink's call): the run log, and stderr unless quiet."""
    log.warning("%s (%s line %d)", notice.message, notice.stream, notice.line)
