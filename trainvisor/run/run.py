"""`Run`: one supervised training, everything it owns, from its directory to its summary.

`Run(config).run()` does in Python exactly what `trainvisor run` does on the command line (the
CLI is a face over this class). The order is the contract:
  1. the run directory and trainvisor's log;
  2. the parser, the pipeline and its sinks, the upload destination (preflighted) and the
     checkpoint watcher, so every configuration error fails before the training starts;
  3. the training, supervised (its output passed through, parsed live): `run_attempt()`, once,
     or again into the same run (the pipeline and sinks outlive a child; its parser is fresh);
  4. `finish()`: the sinks closed, the watcher stopped (the sets the run ended with handed
     over), uploads drained, a `RunSummary`.
The Run is the training's control handle: `request_stop(reason)` from any thread ends it
(SIGINT, SIGTERM after a grace, then the kill timeout), and the summary says why. Python users
may pass objects the config cannot name: a parser, line hooks, extra sinks, an uploader,
callbacks of the training's timeline (trainvisor/timeline/).
Everything started is stopped on the way out, whatever raised.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from ..config import RunConfig
from ..config.convert import to_dict
from ..errors import ConfigError
from ..identity import NodeIdentity
from .logsetup import RunLogging
from .rundir import RunDirectory
from .saved import save_config
from .parts import _Parts
from .summary import RunSummary

if TYPE_CHECKING:
    from ..status import RunStatus
    from ..supervisor.supervisor import ProcessResult, StopRequest, Supervisor

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

    needs_command = True  # a sidecar (run/sidecar.py) reads a log instead of starting a command

    def __init__(self, config: RunConfig, *, parser: object = None, hooks: Sequence[Callable] = (),
                 sinks: Sequence[object] = (), uploader: object = None, stdout_fd: Optional[int] = 1,
                 stderr_fd: Optional[int] = 2, supervisor_factory: Optional[Callable[..., object]] = None,
                 callbacks: Sequence[object] = ()) -> None:
        if not config.command and self.needs_command:
            raise ConfigError("command: no command given (trainvisor run [OPTIONS] -- CMD [ARGS...])")
        self._callbacks: list = []
        if callbacks:  # checked now: a misspelled hook fails before anything starts
            from ..timeline.callbacks import register_all

            self._callbacks = register_all(callbacks)
        self.config = config
        # The id a new directory gets; a directory that exists keeps its own (known at start()).
        self.run_id = config.run.id or new_run_id()
        self.run_dir = Path(config.run.dir) if config.run.dir else Path(config.run.root) / self.run_id
        self.attempt = 0
        # Which node and rank this process is (config over launchers' variables); a bad value
        # is a one-line ConfigError now, before anything starts.
        self.identity = NodeIdentity.from_environ(os.environ, node=config.run.node,
                                                  process_rank=config.run.process_rank,
                                                  local_rank=config.run.local_rank)
        self.metrics_path = Path(config.sinks.jsonl) if config.sinks.jsonl else self.run_dir / "metrics.jsonl"
        self.summary: Optional[RunSummary] = None
        self._parser, self._hooks, self._user_sinks, self._uploader = parser, list(hooks), list(sinks), uploader
        self._stdout_fd, self._stderr_fd = stdout_fd, stderr_fd
        self._supervisor_factory = supervisor_factory
        self._stack: Optional[contextlib.ExitStack] = None
        self._parts: Optional[_Parts] = None
        self._rundir: Optional[RunDirectory] = None
        # The control handle's state: the child now running, and a stop asked for (any thread).
        self._control = threading.Lock()
        self._supervisor: Optional["Supervisor"] = None
        self._stop: Optional["StopRequest"] = None
        self._stop_asked = threading.Event()  # a restart's back-off waits on it
        self._attempts = 0
        self._last: Optional["ProcessResult"] = None
        # The grace budget of a shutdown: begun by the first SIGTERM/SIGINT/SIGHUP (run/shutdown.py).
        from .shutdown import Shutdown

        self.shutdown = Shutdown(config.process.grace)

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
        # Before any thread of the run starts, so every one has the fault signals blocked.
        from ..supervisor import syncsignals

        if syncsignals.acquire() is not None:
            stack.callback(syncsignals.release)
        try:
            # The lock first and released last: a second run on this directory touches nothing.
            rundir = self._rundir = RunDirectory.open(self.run_dir, run_id=self.config.run.id,
                                                      new_id=lambda: self.run_id)
            stack.callback(rundir.close)
            self.run_id, self.attempt = rundir.identity.run_id, rundir.identity.attempt
            logging_ = RunLogging.start(self.run_dir, quiet=self.config.logging.quiet)
            stack.callback(logging_.close)
            log.info("run %s attempt %d in %s: configuration %s", self.run_id, self.attempt, self.run_dir,
                     json.dumps(to_dict(self.config, mask_secrets=True)))
            if self.needs_command:  # what a killed trainvisor left running here, ended (and said) first
                from ..supervisor.record import RECORD_NAME

                if (self.run_dir / RECORD_NAME).exists():  # a new directory has no record to read
                    from ..supervisor.leftovers import end_leftovers

                    end_leftovers(self.run_dir / RECORD_NAME)
            # With the node and ranks found (the launcher's variables are gone when a person runs
            # `trainvisor resume` later): the same store folder then.
            ident = self.identity
            save_config(self.config if not ident.is_set and ident.local_rank is None else dataclasses.replace(
                self.config, run=dataclasses.replace(self.config.run, node=ident.node, process_rank=ident.process_rank,
                                                     local_rank=ident.local_rank)), self.run_dir)
            if self.identity.is_set:
                log.info("run %s: %s", self.run_id, self.identity.describe())
            self._parts = _Parts.build(self, logging_, stack)
            if self.config.health.port is not None:
                from .health import HealthServer

                h = self.config.health
                stack.callback(HealthServer(self.status, host=h.host, port=h.port,
                                            max_metric_age=h.max_metric_age).start().close)
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
        if self.config.restart.policy != "never" or self.config.restart.resume_from:
            from .restart import run_restarting

            return run_restarting(self)  # attempts under the restart policy, then finish()
        self.run_attempt()
        return self.finish()

    def run_attempt(self, *, command: Optional[Sequence[str]] = None) -> "ProcessResult":
        """Start the command once more in this run and wait for it: the first call is the run's
        first child; each later one is a restart into the same run (the next attempt number on
        every record, in run.json too; a fresh parser; the same sinks, watcher and uploads).
        `command`: this attempt's argv instead of the configured one (a resume's arguments added)."""
        parts = self._started()
        if self._attempts:
            self.attempt = self._rundir.next_attempt().attempt  # type: ignore[union-attr]
            parts.restart_parser(self.attempt)
        if not self._attempts:
            parts.begin_timeline()
        self._attempts += 1
        log.info("run %s attempt %d: %s (parser %s, metrics %s)", self.run_id, self.attempt,
                 " ".join(command or self.config.command), getattr(parts.parser, "name", type(parts.parser).__name__),
                 self.metrics_path)
        sup = parts.new_supervisor(command)
        with self._control:
            self._supervisor = sup
            stop = self._stop
        if stop is not None:  # asked before this child started: it is stopped as soon as it runs
            sup.stop(stop.reason, sig=stop.signal, grace=stop.grace)
        try:
            result = self._last = parts.supervise(sup)
        finally:
            with self._control:
                self._supervisor = None
        stats = parts.pipeline.stats
        log.info("run %s attempt %d ended: exit code %d, %d lines, %d events", self.run_id, self.attempt,
                 result.exit_code, stats.lines, stats.events)
        return result

    def finish(self, *, restarts: Sequence[str] = ()) -> RunSummary:
        """After the last attempt: close the sinks, stop the watcher, drain the uploads, summarise.
        `restarts`: one line per restart the policy made (run/restart.py), kept in the summary."""
        parts = self._started()
        if self._last is None:
            raise RuntimeError("Run.finish() before any attempt (call run() or run_attempt())")
        parts.tell_outcome(self._last)  # before the sinks close: an MLflow run ends with its status
        parts.finish()
        parts.end_timeline(self._last)
        summary = parts.summarise(self._last, attempts=self._attempts)
        extra = dict(self._summary_extras(summary))  # what this kind of run adds (a sidecar: its follow)
        if restarts:
            extra["restarts"] = tuple(restarts)
        if self.identity.is_set:  # which node of several the summary is of
            extra.update(self.identity.fields())
        self.summary = dataclasses.replace(summary, **extra) if extra else summary
        _keep_summary(self.summary, self.run_dir)
        return self.summary

    def _summary_extras(self, summary: RunSummary) -> dict:
        """Fields a kind of run adds to its summary before it is kept (summary.json): none here."""
        return {}

    def request_stop(self, reason: str, *, sig: int = signal.SIGINT, grace: Optional[float] = None) -> bool:
        """Stop the training, from any thread: `sig` (SIGINT: Caffe snapshots, Python frameworks
        raise KeyboardInterrupt) to its process group, SIGTERM after `grace` seconds
        (`process.stop_grace`), then the kill timeout. The summary records `reason` and the run
        exits with EXIT_STOPPED. A checkpoint written on the way out is still uploaded. Asked
        before the child starts, it stops the child as soon as it runs. False if a stop was
        already asked for (the first reason stands)."""
        from ..supervisor.supervisor import StopRequest

        if grace is None:
            grace = self.config.process.stop_grace
        with self._control:
            if self._stop is not None:
                return False
            self._stop = StopRequest(reason, sig, grace)
            sup = self._supervisor
        self._stop_asked.set()
        log.info("run %s: stop requested (%s)", self.run_id, reason)
        if sup is not None:
            sup.stop(reason, sig=sig, grace=grace)
        return True

    @property
    def stop_requested(self) -> bool:
        """Whether a stop was asked for (then no restart follows)."""
        return self._stop_asked.is_set()

    def wait_for_stop(self, seconds: float) -> bool:
        """Sleep up to `seconds`, woken by a stop request (True then): a restart's back-off."""
        return self._stop_asked.wait(seconds)

    def settle_checkpoints(self, *, uploads: bool) -> None:
        """Between attempts: what the last child announced and wrote is handed over by the
        watcher (recorded in checkpoints.jsonl); with `uploads`, the upload manager's sets in
        flight are waited for too (within upload.drain_timeout), so the store holds them."""
        parts = self._started()
        if parts.watcher is not None and parts.watcher.is_running:
            parts.watcher.sync(timeout=self.config.watch.settle + 5.0)
        if uploads and parts.group is not None:
            parts.group.drain(self.config.upload.drain_timeout)

    def own_store(self) -> Optional[str]:
        """Where this run's checkpoint sets are uploaded (upload.to's first destination, down to the
        run's folder, where its keys go), or None: a restart resumes from its own sets, never another
        run's."""
        from .resumepoint import folder_url

        manager, url = self._started().manager, next(iter(self.config.upload.destinations), None)
        return folder_url(url, manager.key_for("x")) if manager is not None and url else None

    def status(self) -> "RunStatus":
        """What the run is doing now, as one frozen snapshot; any thread may ask (a Prometheus
        scrape, a health check, a user's monitor). Cheap: nothing is counted for it between asks."""
        from ..status import CHILD_EXITED, CHILD_NOT_STARTED, CHILD_RUNNING, CHILD_STOPPING, RunStatus

        with self._control:
            sup, stop, last = self._supervisor, self._stop, self._last
        proc = getattr(sup, "proc", None)
        if sup is not None:
            child = CHILD_STOPPING if stop is not None else CHILD_RUNNING
        else:
            child = CHILD_EXITED if last is not None else CHILD_NOT_STARTED
        counts = self._parts.status_counts() if self._parts is not None else {}
        return RunStatus(run_id=self.run_id, attempt=self.attempt, child=child,
                         pid=proc.pid if proc is not None and sup is not None else None,
                         exit_code=last.exit_code if last is not None and sup is None else None,
                         stop_reason=stop.reason if stop is not None else None, **counts,
                         **self.identity.fields())

    def _started(self) -> "_Parts":
        if self._parts is None:
            raise RuntimeError("the Run is not started: use `with Run(config) as run:` or run()")
        return self._parts


def _keep_summary(summary: RunSummary, run_dir: Path) -> None:
    """RUN_DIR/summary.json (`run.summaryfile.read_summary` reads it back); a run whose disk is
    full still ends with its summary in hand, the failure logged."""
    from .summaryfile import write_summary

    try:
        write_summary(summary, run_dir)
    except OSError as exc:
        log.warning("could not keep the run's summary in %s: %s", run_dir, exc.strerror or exc)

