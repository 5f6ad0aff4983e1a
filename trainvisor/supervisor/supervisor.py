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

from ..stream.lines import DEFAULT_MAX_LINE, LineSplitter
from ..parsers import ParserOptions, create_parser
from ..parsers.base import Parser
from ..parsers.select import DEFAULT_PARSER
from ..stream.pipeline import LineHook, Pipeline, PipelineStats
from ..sinks.base import Sink
from .process import TREE_TOKEN_ENV, ProcessTree, become_subreaper, exit_code_of, spawn_child
from .readers import ByteBudget, Chunk, Eof, Gap, PipeReader, RunLog
from .reaper import Reaper, Waker
from .signals import SHUTDOWN_SIGNALS, SignalHandlers, child_setup, death_signal_for

__all__ = ["Supervisor", "RunResult"]

log = logging.getLogger("trainvisor.supervisor")

DEFAULT_KILL_TIMEOUT = 30.0
# How far the parser may fall behind the child before bytes are passed through
# unparsed (and counted) rather than held in memory.
DEFAULT_PARSE_BACKLOG = 256 * 1024 * 1024
# After the tree has ended, the pipes are at EOF unless a process outside the
# tree holds them: the readers get this long, together, to drain what is left.
READER_GRACE = 0.5
# How often descendants are looked up while the child runs (psutil, ~ms each).
TREE_REFRESH = 0.5


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

    Signals are forwarded as `trainvisor.supervisor.signals` documents. With
    `subreaper=True` (or as PID 1), orphans of the child's tree are re-parented
    to this process and reaped as soon as they exit; processes the host program
    starts itself while supervising with a new session should be named by
    `own_pids` so their exit status is left to their owner.
    `on_supervisor_death` is what the child is sent if this process dies
    without ending it (SIGKILL): "term" (SIGTERM) or "keep" (nothing).
    With `pty=True` the child's stdout and stderr are one pseudo-terminal
    (`trainvisor.supervisor.terminal`), read and passed through as "stdout".

    >>> from trainvisor import Supervisor
    >>> Supervisor(["sh", "-c", "echo hi"]).run().exit_code  # doctest: +SKIP
    0
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        parser: Parser | str = DEFAULT_PARSER,
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
        on_supervisor_death: str = "term",
        pty: bool = False,
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
        self.death_signal = death_signal_for(on_supervisor_death)
        self.pty = pty
        self._pty_master: Optional[int] = None
        self.parse_backlog = parse_backlog
        # Marks every process of the child's tree (TREE_TOKEN_ENV) for the shutdown sweep.
        self.token = os.urandom(8).hex()  # os.urandom, not secrets: that module costs ~8 ms of start-up
        self._own_pids = own_pids
        self._popen = popen
        self._shutdown_at: Optional[float] = None
        self._signalled_by: Optional[int] = None
        self._announced = False
        self.proc: Optional[subprocess.Popen] = None
        self.pipeline: Optional[Pipeline] = None

    # -- public ------------------------------------------------------------

    def run(self) -> RunResult:
        """Run the child to completion; raises `CommandNotFound` / `CommandNotExecutable`.

        The child is forked from the calling thread, which this call blocks until
        the child is reaped: its parent-death signal fires when that thread ends.
        """
        if self.subreaper:
            become_subreaper()
        reaper = None
        if self.subreaper or os.getpid() == 1:
            # Made before the fork: the children we already have are the host's,
            # and an orphan re-parented a moment after the fork is not among them.
            reaper = Reaper(keep=lambda: (self.proc.pid if self.proc else 0, *self._own_pids()),
                            pid1=os.getpid() == 1)
        env = dict(os.environ if self.env is None else self.env)
        env.update(self.extra_env)
        env[TREE_TOKEN_ENV] = self.token
        self.pipeline = Pipeline(self.parser, sinks=self.sinks, hooks=self.hooks)
        run_log_fd = None
        if self.log_file:
            os.makedirs(os.path.dirname(os.path.abspath(self.log_file)), exist_ok=True)
            run_log_fd = os.open(self.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        slave = None
        if self.pty:
            from .terminal import open_pty  # termios and struct: only --pty needs them

            self._pty_master, slave = open_pty((self.stdout_fd or 1, self.stderr_fd or 2, 0))
        try:
            try:
                proc = self.proc = spawn_child(self.argv, shell=self.shell, cwd=self.cwd, env=env,
                                               popen=self._popen, setup=child_setup(self.death_signal),
                                               terminal=slave)
            except BaseException:
                self.pipeline.finish()
                raise
            finally:
                if slave is not None:
                    os.close(slave)  # the child has it: the master reads EOF (EIO) when the tree closes it
            return self._supervise(proc, run_log_fd, reaper)
        finally:
            for fd in (run_log_fd, self._pty_master):
                if fd is not None:
                    os.close(fd)
            self._pty_master = None

    def send_signal(self, sig: int) -> None:
        """Forward `sig` to the child's process group; shutdown signals start the kill timeout."""
        if self.proc is None:
            return
        if sig in SHUTDOWN_SIGNALS and self._shutdown_at is None:
            self._shutdown_at = time.monotonic()
            self._signalled_by = sig
        if sig == signal.SIGWINCH and self._pty_master is not None:
            from .terminal import follow_window

            follow_window(self._pty_master, (self.stdout_fd or 1, self.stderr_fd or 2, 0))
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    # -- internals ---------------------------------------------------------

    def _supervise(self, proc: subprocess.Popen, run_log_fd: Optional[int], reaper: Optional[Reaper]) -> RunResult:
        q: "queue.SimpleQueue[object]" = queue.SimpleQueue()
        budgets = {"stdout": ByteBudget(self.parse_backlog // 2), "stderr": ByteBudget(self.parse_backlog // 2)}
        run_log = RunLog(run_log_fd) if run_log_fd is not None else None
        if self._pty_master is not None:
            sources = [("stdout", self._pty_master, self.stdout_fd)]
        else:
            assert proc.stdout is not None and proc.stderr is not None
            sources = [("stdout", proc.stdout.fileno(), self.stdout_fd), ("stderr", proc.stderr.fileno(), self.stderr_fd)]
        readers = [PipeReader(stream, src, passthrough_fd=fd, put=q.put, budget=budgets[stream], run_log=run_log)
                   for stream, src, fd in sources]
        pipeline_thread = threading.Thread(
            target=self._pipeline_loop, args=(q, budgets, len(readers)), name="trainvisor-pipeline", daemon=True
        )
        # The handlers go in before the readers start: until a reader passes the child's first
        # bytes on, nobody who watches its output can have reacted to it with a signal, so none
        # is lost to a disposition we are about to replace (SIG_IGN when started with `&`).
        waker = Waker(proc.pid)
        handlers = SignalHandlers(forward=self.send_signal if self.forward_signals else None,
                                  on_child=waker.notify if reaper is not None else None)
        signals_on = handlers.install()
        try:
            for r in readers:
                r.start()
            pipeline_thread.start()
        except BaseException:
            handlers.restore()
            waker.close()
            raise
        tree = ProcessTree(proc.pid, own_pids=self._own_pids, token=self.token)
        killed = self._wait_and_end(proc, tree, reaper, waker, handlers, signals_on)
        self._join_readers(readers)
        pipeline_thread.join()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
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

    def _wait_and_end(self, proc: subprocess.Popen, tree: ProcessTree, reaper: Optional[Reaper], waker: Waker,
                      handlers: SignalHandlers, signals_on: bool) -> int:
        """Wait for the child (reaping orphans meanwhile), then end what is left
        of its tree; returns how many processes had to be killed. Restores `handlers`."""
        killed = 0
        try:
            killed += self._wait_child(proc, tree, waker, reaper, sigchld=signals_on and reaper is not None)
        finally:
            handlers.restore()
            self._announce_shutdown()
            # Descendants that outlive the child: end them, so the pipes close
            # and no process the child started survives us.
            grace = self.kill_timeout
            if self._shutdown_at is not None:
                grace = max(0.0, self._shutdown_at + self.kill_timeout - time.monotonic())
            killed += tree.terminate_all(timeout=grace)
            if reaper is not None:
                reaper.reap()
            waker.close()
        return killed

    def _wait_child(self, proc: subprocess.Popen, tree: ProcessTree, waker: Waker,
                    reaper: Optional[Reaper], *, sigchld: bool) -> int:
        """Wait for the child; once a shutdown signal arrived, SIGKILL the whole
        tree when the child outlives `kill_timeout`."""
        # Sleep long only when something wakes us: the child's pidfd, and SIGCHLD if reaping.
        nap = 0.5 if waker.sees_child_exit and (reaper is None or sigchld) else 0.05
        next_refresh = 0.0
        while proc.poll() is None:
            timeout = nap
            if self._shutdown_at is not None:
                self._announce_shutdown()
                remaining = self._shutdown_at + self.kill_timeout - time.monotonic()
                if remaining <= 0:
                    log.warning("child did not exit %.1fs after %s: SIGKILL to its process tree",
                                self.kill_timeout, signal.Signals(self._signalled_by or signal.SIGTERM).name)
                    killed = tree.kill_all()
                    proc.wait()
                    return killed
                timeout = min(timeout, remaining)
            waker.wait(timeout)
            if reaper is not None:
                reaper.reap()
            if time.monotonic() >= next_refresh:
                tree.refresh()  # remember descendants while the child lives
                next_refresh = time.monotonic() + TREE_REFRESH
        return 0

    def _announce_shutdown(self) -> None:
        """Log, once, that a shutdown signal went to the child (not from the
        signal handler: it may run while the main thread holds a logging lock)."""
        if self._shutdown_at is None or self._announced:
            return
        self._announced = True
        log.info("%s sent to the child; SIGKILL to its tree in %.1fs unless it exits",
                 signal.Signals(self._signalled_by or signal.SIGTERM).name, self.kill_timeout)

    def _join_readers(self, readers: list[PipeReader]) -> None:
        deadline = time.monotonic() + READER_GRACE
        for r in readers:
            r.join(timeout=max(0.0, deadline - time.monotonic()))
        for r in readers:
            if r.is_alive():
                log.warning("a process outside the child's tree holds its %s open; stopped reading", r.stream)
                r.stop()
                r.join()

    def _pipeline_loop(self, q: "queue.SimpleQueue[object]", budgets: dict, open_streams: int) -> None:
        pipeline = self.pipeline
        assert pipeline is not None
        splitters = {s: LineSplitter(s, max_line=self.max_line) for s in ("stdout", "stderr")}
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
