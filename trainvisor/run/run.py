"""`Run`: one supervised training, everything it owns, from its directory to its summary.

`Run(config).run()` does in Python exactly what `trainvisor run` does on the command line (the
CLI is a face over this class). The order is the contract:
  1. the run directory and trainvisor's log;
  2. the parser, the sinks, the upload destination (preflighted) and the checkpoint watcher,
     so every configuration error fails before the training starts;
  3. the training, supervised (its output passed through, parsed live);
  4. the watcher stopped (the sets the run ended with handed over), uploads drained;
  5. a `RunSummary`.
Python users may pass objects the config cannot name: a parser, line hooks, extra sinks, an
uploader. Everything started is stopped on the way out, whatever raised.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..config import RunConfig
from ..config.convert import to_dict
from ..errors import ConfigError
from ..sinks.stats import StatsSink
from .logsetup import RunLogging
from .rundir import RunDirectory
from .saved import save_config
from .summary import FaultCount, RunSummary, UploadTotals

__all__ = ["Run", "new_run_id"]

log = logging.getLogger("trainvisor")


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + os.urandom(3).hex()


class Run:
    """One run of `config.command`. Use `Run(config).run()`, or as a context manager when the
    caller wants the parts set up (and checked) before deciding to start:

        with Run(config) as run:      # run directory, log, preflight, watcher: ready
            summary = run.run()
    """

    def __init__(self, config: RunConfig, *, parser: object = None, hooks: Sequence[Callable] = (),
                 sinks: Sequence[object] = (), uploader: object = None, stdout_fd: Optional[int] = 1,
                 stderr_fd: Optional[int] = 2, supervisor_factory: Optional[Callable[..., object]] = None) -> None:
        if not config.command:
            raise ConfigError("command: no command given (trainvisor run [OPTIONS] -- CMD [ARGS...])")
        self.config = config
        # The id a new directory gets; a directory that exists keeps its own (known at start()).
        self.run_id = config.run.id or new_run_id()
        self.run_dir = Path(config.run.dir) if config.run.dir else Path(config.run.root) / self.run_id
        self.attempt = 0
        self.metrics_path = Path(config.sinks.jsonl) if config.sinks.jsonl else self.run_dir / "metrics.jsonl"
        self.summary: Optional[RunSummary] = None
        self._parser, self._hooks, self._user_sinks, self._uploader = parser, list(hooks), list(sinks), uploader
        self._stdout_fd, self._stderr_fd = stdout_fd, stderr_fd
        self._supervisor_factory = supervisor_factory
        self._stack: Optional[contextlib.ExitStack] = None
        self._parts: Optional[_Parts] = None

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> "Run":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> "Run":
        """Set up everything but the training; raises ConfigError / UploadError (preflight)."""
        if self._stack is not None:
            return self
        stack = contextlib.ExitStack()
        try:
            # The lock first and released last: a second run on this directory touches nothing.
            rundir = RunDirectory.open(self.run_dir, run_id=self.config.run.id, new_id=lambda: self.run_id)
            stack.callback(rundir.close)
            self.run_id, self.attempt = rundir.identity.run_id, rundir.identity.attempt
            logging_ = RunLogging.start(self.run_dir, quiet=self.config.logging.quiet)
            stack.callback(logging_.close)
            log.info("run %s attempt %d in %s: configuration %s", self.run_id, self.attempt, self.run_dir,
                     json.dumps(to_dict(self.config, mask_secrets=True)))
            save_config(self.config, self.run_dir)
            self._parts = _Parts.build(self, logging_, stack)
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        return self

    def close(self) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()

    def run(self) -> RunSummary:
        """Run the training to its end and return the summary (also kept as `self.summary`)."""
        if self._stack is None:
            with self:
                return self.run()
        parts = self._parts
        assert parts is not None
        log.info("run %s: %s (parser %s, metrics %s)", self.run_id, " ".join(self.config.command),
                 getattr(parts.parser, "name", type(parts.parser).__name__), self.metrics_path)
        result = parts.supervise()
        self.summary = parts.summarise(result)
        log.info("run %s ended: exit code %d, %d lines, %d events", self.run_id, result.exit_code,
                 result.stats.lines, result.stats.events)
        return self.summary


class _Parts:
    """What a started run holds; built in the order that fails fastest."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.parser: object = None
        self.sinks: list = []
        self.counted: list = []  # the sinks whose records the summary counts (not the run's own helpers)
        self.stats_sink = StatsSink(keep_last=False)  # build's replaces it: every run counts
        self.manager: object = None
        self.watcher: object = None
        self.uploads: Optional[UploadTotals] = None
        self.env: dict[str, str] = {}

    @classmethod
    def build(cls, run: Run, logging_: RunLogging, stack: contextlib.ExitStack) -> "_Parts":
        from ..sinks.jsonl import JsonlSink
        from .build import build_parser, build_sinks

        cfg = run.config
        parts = cls(run)
        parts.parser = run._parser or build_parser(cfg.parsing, argv=cfg.command, year=time.localtime().tm_year)
        # Appended, never truncated: a resumed run keeps every record of its earlier attempts.
        parts.sinks = build_sinks(cfg.sinks, jsonl=JsonlSink(run.metrics_path, mode="a", extra={"attempt": run.attempt}),
                                  objects=run._user_sinks)
        parts.counted = list(parts.sinks)
        stack.callback(_close_sinks, parts.counted)  # the pipeline closes them; this, when a run fails before
        # Always counted (a run that parsed nothing says so); the last values only for a summary.
        parts.stats_sink = StatsSink(keep_last=bool(cfg.logging.summary or (cfg.logging.summary is None
                                                                           and sys.stderr.isatty())),
                                     on_notice=_log_notice)
        parts.sinks.append(parts.stats_sink)
        parts.env = {**cfg.process.env, **logging_.env}
        parts._build_checkpoints(stack)
        return parts

    def _build_checkpoints(self, stack: contextlib.ExitStack) -> None:
        from .build import build_manager, build_watcher, open_destination, watch_dirs

        run, cfg = self.run, self.run.config
        uploader = run._uploader or open_destination(cfg.upload, run_dir=str(run.run_dir))
        if uploader is not None:
            self.manager = build_manager(cfg.upload, uploader, run_dir=str(run.run_dir), run_id=run.run_id)
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

        consumers = [CheckpointRecord(run.run_dir / "checkpoints.jsonl")] + ([self.manager] if self.manager else [])
        self.watcher = build_watcher(cfg.watch, dirs, cwd=cwd, consumer=FanOut(consumers),
                                     iters_per_epoch=cfg.parsing.iters_per_epoch, shallow=shallow)
        self.sinks.append(self.watcher.announcement_sink())
        if self.watcher.roots and not shallow:
            log.info("watching %s for checkpoints", ", ".join(self.watcher.roots))

    def supervise(self):
        from ..supervisor import Supervisor

        run, cfg = self.run, self.run.config
        factory = run._supervisor_factory or Supervisor
        sup = factory(
            list(cfg.command), parser=self.parser, sinks=self.sinks, hooks=run._hooks, shell=cfg.process.shell,
            cwd=cfg.process.cwd, log_file=cfg.process.output_log, kill_timeout=cfg.process.kill_timeout,
            max_line=cfg.parsing.max_line_bytes, subreaper=True, extra_env=self.env or None,
            on_supervisor_death=cfg.process.on_supervisor_death, pty=cfg.process.pty,
            stdout_fd=run._stdout_fd, stderr_fd=run._stderr_fd,
        )
        if self.watcher is not None:
            self.watcher.start()
        try:
            return sup.run()
        finally:
            ended = time.monotonic()  # upload.drain_timeout counts from here, the watcher's last sweep included
            if self.watcher is not None:
                self.watcher.stop(drain=True)
            if self.manager is not None:
                self.uploads = self._drain(max(0.0, cfg.upload.drain_timeout - (time.monotonic() - ended)))

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

    def summarise(self, result) -> RunSummary:
        from .endwarnings import end_warnings

        stats_sink, watcher, cfg = self.stats_sink, self.watcher, self.run.config
        stats = result.stats
        found = watcher.stats.handed_over if watcher is not None else 0
        destination = None if self.manager is None else (
            cfg.upload.to or getattr(self.run._uploader, "url", "") or type(self.run._uploader).__name__)
        warnings = end_warnings(destination=destination, checkpoints_found=found,
                                watched=sorted(watcher.roots) if watcher is not None else (),
                                lines=stats.lines, metrics=stats_sink.metrics,
                                parser=getattr(self.parser, "name", type(self.parser).__name__))
        for w in warnings:
            log.warning("%s", w)
        sinks = tuple(s.counts() for s in self.counted)
        for c in sinks:  # the run log keeps them when no summary is printed
            log.info("sink %s: %d records written, %d dropped, %d failed%s", c.name, c.written, c.dropped, c.failed,
                     " (abandoned at the end)" if c.abandoned else "")
        return RunSummary(
            run_id=self.run.run_id, attempt=self.run.attempt, run_dir=str(self.run.run_dir),
            command=self.run.config.command,
            exit_code=result.exit_code, returncode=result.returncode, lines=stats.lines, events=stats.events,
            metrics_path=str(self.run.metrics_path), truncated_lines=stats.truncated_lines,
            unparsed_bytes=result.unparsed_bytes, killed_processes=result.killed_processes,
            signalled_by=result.signalled_by,
            faults=tuple(FaultCount(c, n) for c, n in sorted(result.faults.items())),
            metrics=stats_sink.metrics, checkpoints_announced=stats_sink.checkpoints, checkpoints_complete=found,
            uploads=self.uploads, last_metrics=tuple(stats_sink.last.values()),
            notices=tuple(stats_sink.notices.values()), warnings=warnings,
            sinks=sinks,
        )


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
