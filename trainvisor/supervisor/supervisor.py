"""`Supervisor`: run a training command, pass its output through, parse it live.

Threads: one reader per pipe (pass-through only), one pipeline thread (split,
parse, hooks, sinks), and the caller's thread, which waits for the child and
forwards signals. Nothing trainvisor does can block the child's writes.
"""
from __future__ import annotations

import logging
import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Optional, Sequence

from ..lines import DEFAULT_MAX_LINE, LineSplitter
from ..parsers import ParserOptions, create_parser
from ..parsers.base import Parser
from ..pipeline import LineHook, Pipeline, PipelineStats
from ..sinks.base import Sink
from .process import (
    FORWARDED_SIGNALS,
    SHUTDOWN_SIGNALS,
    ProcessTree,
    become_subreaper,
    exit_code_of,
    spawn_child,
)
from .readers import ByteBudget, Chunk, Eof, Gap, PipeReader, RunLog

__all__ = ["Supervisor", "RunResult"]

log = logging.getLogger("trainvisor.supervisor")

DEFAULT_KILL_TIMEOUT = 30.0
# How far the parser may fall behind the child before bytes are passed through
# unparsed (and counted) rather than held in memory.
DEFAULT_PARSE_BACKLOG = 256 * 1024 * 1024


@dataclass
class RunResult:
    exit_code: int
    returncode: int
    stats: PipelineStats
    faults: dict = field(default_factory=dict)
    unparsed_bytes: int = 0
    killed_processes: int = 0
    signalled_by: Optional[int] = None

    @property
    def signal(self) -> Optional[int]:
        return -self.returncode if self.returncode < 0 else None


class Supervisor:
    """Run `argv` under supervision.

    >>> from trainvisor import Supervisor
    >>> Supervisor(["sh", "-c", "echo hi"], parser="caffe").run().exit_code  # doctest: +SKIP
    0
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        parser: Parser | str = "caffe",
        parser_options: Optional[ParserOptions] = None,
        sinks: Sequence[Sink] = (),
        hooks: Sequence[LineHook] = (),
        shell: bool = False,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        extra_env: Optional[Mapping[str, str]] = None,
        log_file: Optional[str] = None,
        kill_timeout: float = DEFAULT_KILL_TIMEOUT,
        max_line: int = DEFAULT_MAX_LINE,
        stdout_fd: Optional[int] = 1,
        stderr_fd: Optional[int] = 2,
        forward_signals: bool = True,
        subreaper: bool = False,
        parse_backlog: int = DEFAULT_PARSE_BACKLOG,
        own_pids: Callable[[], Iterable[int]] = lambda: (),
        popen: Callable[..., subprocess.Popen] = subprocess.Popen,
    ) -> None:
        if not argv:
            from ..errors import ConfigError

            raise ConfigError("no command given to supervise")
        self.argv = list(argv)
        if isinstance(parser, str):
            opts = parser_options or ParserOptions(year=time.localtime().tm_year, argv=tuple(argv))
            parser = create_parser(parser, opts)
        self.parser = parser
        self.sinks = list(sinks)
        self.hooks = list(hooks)
        self.shell = shell
        self.cwd = cwd
        self.env = env
        self.extra_env = dict(extra_env or {})
        self.log_file = log_file
        self.kill_timeout = kill_timeout
        self.max_line = max_line
        self.stdout_fd = stdout_fd
        self.stderr_fd = stderr_fd
        self.forward_signals = forward_signals
        self.subreaper = subreaper
        self.parse_backlog = parse_backlog
        self._own_pids = own_pids
        self._popen = popen
        self._shutdown_at: Optional[float] = None
        self._signalled_by: Optional[int] = None
        self.proc: Optional[subprocess.Popen] = None
        self.pipeline: Optional[Pipeline] = None

    # -- public ------------------------------------------------------------

    def run(self) -> RunResult:
        """Run the child to completion; raises `CommandNotFound` / `CommandNotExecutable`."""
        if self.subreaper:
            become_subreaper()
        env = None
        if self.env is not None or self.extra_env:
            env = dict(os.environ if self.env is None else self.env)
            env.update(self.extra_env)
        self.pipeline = Pipeline(self.parser, sinks=self.sinks, hooks=self.hooks)
        run_log_fd = None
        if self.log_file:
            os.makedirs(os.path.dirname(os.path.abspath(self.log_file)), exist_ok=True)
            run_log_fd = os.open(self.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            try:
                proc = self.proc = spawn_child(self.argv, shell=self.shell, cwd=self.cwd, env=env, popen=self._popen)
            except BaseException:
                self.pipeline.finish()
                raise
            return self._supervise(proc, run_log_fd)
        finally:
            if run_log_fd is not None:
                os.close(run_log_fd)

    def send_signal(self, sig: int) -> None:
        """Forward `sig` to the child's process group; shutdown signals start the kill timeout."""
        if self.proc is None:
            return
        if sig in SHUTDOWN_SIGNALS and self._shutdown_at is None:
            self._shutdown_at = time.monotonic()
            self._signalled_by = sig
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    # -- internals ---------------------------------------------------------

    def _supervise(self, proc: subprocess.Popen, run_log_fd: Optional[int]) -> RunResult:
        assert proc.stdout is not None and proc.stderr is not None
        q: "queue.SimpleQueue[object]" = queue.SimpleQueue()
        budget_out = ByteBudget(self.parse_backlog // 2)
        budget_err = ByteBudget(self.parse_backlog // 2)
        run_log = RunLog(run_log_fd) if run_log_fd is not None else None
        readers = [
            PipeReader("stdout", proc.stdout.fileno(), passthrough_fd=self.stdout_fd, put=q.put,
                       budget=budget_out, run_log=run_log),
            PipeReader("stderr", proc.stderr.fileno(), passthrough_fd=self.stderr_fd, put=q.put,
                       budget=budget_err, run_log=run_log),
        ]
        budgets = {"stdout": budget_out, "stderr": budget_err}
        pipeline_thread = threading.Thread(
            target=self._pipeline_loop, args=(q, budgets), name="trainvisor-pipeline", daemon=True
        )
        for r in readers:
            r.start()
        pipeline_thread.start()
        tree = ProcessTree(proc.pid, own_pids=self._own_pids)
        previous = self._install_signal_handlers()
        killed = 0
        try:
            killed += self._wait_child(proc, tree)
        finally:
            self._restore_signal_handlers(previous)
            # Descendants that outlive the child: end them, so the pipes close
            # and no process the child started survives us.
            grace = self.kill_timeout
            if self._shutdown_at is not None:
                grace = max(0.0, self._shutdown_at + self.kill_timeout - time.monotonic())
            killed += tree.terminate_all(timeout=grace)
            for r in readers:
                r.join(timeout=2.0)
                if r.is_alive():
                    log.warning("a process outside the child's tree holds its %s open; stopped reading", r.stream)
                    r.stop()
                    r.join()
            pipeline_thread.join()
            proc.stdout.close()
            proc.stderr.close()
        stats = self.pipeline.stats if self.pipeline else PipelineStats()
        return RunResult(
            exit_code=exit_code_of(proc.returncode),
            returncode=proc.returncode,
            stats=stats,
            faults=dict(self.pipeline.faults.counts) if self.pipeline else {},
            unparsed_bytes=sum(r.dropped_bytes for r in readers),
            killed_processes=killed,
            signalled_by=self._signalled_by,
        )

    def _wait_child(self, proc: subprocess.Popen, tree: ProcessTree) -> int:
        """Wait for the child; once a shutdown signal arrived, SIGKILL the whole
        tree when the child outlives `kill_timeout`."""
        while True:
            timeout = 0.5
            if self._shutdown_at is not None:
                remaining = self._shutdown_at + self.kill_timeout - time.monotonic()
                if remaining <= 0:
                    log.warning("child did not exit %.1fs after %s: killing its process tree",
                                self.kill_timeout, signal.Signals(self._signalled_by or signal.SIGTERM).name)
                    killed = tree.kill_all()
                    proc.wait()
                    return killed
                timeout = min(timeout, remaining)
            try:
                proc.wait(timeout=timeout)
                return 0
            except subprocess.TimeoutExpired:
                tree.refresh()  # remember descendants while the child lives

    def _pipeline_loop(self, q: "queue.SimpleQueue[object]", budgets: dict) -> None:
        pipeline = self.pipeline
        assert pipeline is not None
        splitters = {s: LineSplitter(s, max_line=self.max_line) for s in ("stdout", "stderr")}
        open_streams = 2
        get = q.get
        feed = pipeline.feed
        while open_streams:
            try:
                item = get(timeout=pipeline.flush_interval)
            except queue.Empty:
                pipeline.tick()
                continue
            if type(item) is Chunk:
                budgets[item.stream].consumed += len(item.data)
                block = splitters[item.stream].feed(item.data, item.time, item.wall_time)
                if block is not None:
                    feed(block)
            elif type(item) is Gap:
                splitters[item.stream].skip(item.newlines, item.ends_with_newline)
            elif type(item) is Eof:
                open_streams -= 1
                block = splitters[item.stream].finish(time.monotonic(), time.time())
                if block is not None:
                    feed(block)
        pipeline.finish()

    def _install_signal_handlers(self) -> dict:
        if not self.forward_signals or threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}

        def forward(signum, frame):
            self.send_signal(signum)

        for sig in FORWARDED_SIGNALS:
            try:
                previous[sig] = signal.signal(sig, forward)
            except (OSError, ValueError):
                pass
        return previous

    @staticmethod
    def _restore_signal_handlers(previous: dict) -> None:
        for sig, handler in previous.items():
            try:
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
            except (OSError, ValueError):
                pass
