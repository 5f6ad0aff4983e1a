"""`Supervisor`: run a training command, pass its output through, hand its bytes on.

A source of bytes and a process manager, nothing more: it spawns the child, reads its pipes
(one reader thread each: pass-through, the run log, and the bytes put on a `Channel` for
whoever parses them), forwards signals, reaps orphans, ends the process tree and reports the
exit. It parses nothing: the owner of the channel (a `Run`, `run.live.supervise`) drives the
stream engine on a thread of its own. The caller's thread waits for the child; `stop()` and
`send_signal()` may be called from any thread. Nothing trainvisor does can block the child's writes.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Optional, Sequence

from .. import defaults
from ..stream.source import Channel
from .deathwatch import DeathWatch
from .process import (TREE_TOKEN_ENV, ProcessTree, become_subreaper, exit_code_of, spawn_child, stop_group,
                      stop_subreaper)
from .readers import PipeReader, open_run_log
from .reaper import Reaper, Waker
from .result import ProcessResult, StopRequest
from .signals import SHUTDOWN_SIGNALS, SignalHandlers, child_setup, death_signal_for

if TYPE_CHECKING:
    from .record import ProcessRecord

__all__ = ["Supervisor", "ProcessResult", "StopRequest", "DEFAULT_STOP_GRACE"]

log = logging.getLogger("trainvisor.supervisor")

DEFAULT_KILL_TIMEOUT = defaults.KILL_TIMEOUT
# `stop()`: how long the child has after the polite signal (SIGINT: Caffe snapshots, Python raises
# KeyboardInterrupt) before SIGTERM; the kill timeout then runs as for any SIGTERM.
DEFAULT_STOP_GRACE = defaults.STOP_GRACE
# After the tree has ended, the pipes are at EOF unless a process outside it holds them.
READER_GRACE = 0.5
# How often descendants are looked up while the child runs (psutil, ~ms each).
TREE_REFRESH = 0.5


class Supervisor:
    """Run `argv` under supervision.

    Signals are forwarded as `trainvisor.supervisor.signals` documents. With
    `subreaper=True` (or as PID 1), orphans of the child's tree are re-parented
    to this process and reaped as soon as they exit; processes the host program
    starts itself while supervising with a new session should be named by
    `own_pids` so their exit status is left to their owner.
    `on_supervisor_death` is what the child's group is sent, once, if this process
    dies without ending it (SIGKILL; deathwatch.py): "term" (SIGTERM) or "keep" (nothing).
    With `pty=True` the child's stdout and stderr are one pseudo-terminal
    (`trainvisor.supervisor.terminal`), read and passed through as "stdout".
    The bytes read go on `channel` (None: passed through only, parsed by nobody).
    `record` (a `ProcessRecord`) is told the tree's processes as they are seen.

    >>> from trainvisor import Supervisor
    >>> Supervisor(["sh", "-c", "echo hi"]).run().exit_code  # doctest: +SKIP
    0
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        channel: Optional[Channel] = None,
        shell: bool = False,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        extra_env: Optional[Mapping[str, str]] = None,
        log_file: Optional[str] = None,
        kill_timeout: float = DEFAULT_KILL_TIMEOUT,
        stdout_fd: Optional[int] = 1,
        stderr_fd: Optional[int] = 2,
        forward_signals: bool = True,
        subreaper: bool = False,
        on_supervisor_death: str = "term",
        pty: bool = False,
        own_pids: Callable[[], Iterable[int]] = lambda: (),
        popen: Callable[..., subprocess.Popen] = subprocess.Popen,
        term_signal: int = signal.SIGTERM,
        on_shutdown: Optional[Callable[[int], None]] = None,
        record: Optional["ProcessRecord"] = None,
    ) -> None:
        if not argv:
            from ..errors import ConfigError

            raise ConfigError("no command given to supervise")
        self.argv = list(argv)
        self.channel = channel
        self.shell = shell
        self.cwd = cwd
        self.env = env
        self.extra_env = dict(extra_env or {})
        self.log_file = log_file
        self.kill_timeout = kill_timeout
        self.stdout_fd, self.stderr_fd = stdout_fd, stderr_fd
        self.forward_signals = forward_signals
        self.subreaper = subreaper
        self.death_signal = death_signal_for(on_supervisor_death)
        self.pty = pty
        # What a SIGTERM received is forwarded as (SIGINT for Caffe); `on_shutdown` hears every
        # shutdown signal received (the owner's grace budget starts at the first).
        self.term_signal = term_signal
        self._on_shutdown = on_shutdown
        self._hurry = False  # a second SIGTERM/SIGINT: the kill timeout is over now
        self._seen: set[int] = set()  # the shutdown signals received (handler context: no lock)
        self._pty_master: Optional[int] = None
        # Marks every process of the child's tree (TREE_TOKEN_ENV) for the shutdown sweep.
        self.token = os.urandom(8).hex()  # os.urandom, not secrets: that module costs ~8 ms of start-up
        self._own_pids, self._popen = own_pids, popen
        self._record = record  # the run's process record: what a later start ends if we are killed
        # What other threads change (send_signal, stop) and the waiting thread reads: under _lock.
        self._lock = threading.Lock()
        self._shutdown_at: Optional[float] = None
        self._signalled_by: Optional[int] = None
        self._stop: Optional[StopRequest] = None
        self._stop_escalate_at: Optional[float] = None  # when the polite signal was sent + its grace
        self._waker: Optional[Waker] = None
        self._announced = False
        self._watch: Optional[DeathWatch] = None  # sends the death signal if we are SIGKILLed
        self.proc: Optional[subprocess.Popen] = None

    # -- public ------------------------------------------------------------

    def run(self) -> ProcessResult:
        """Run the child to completion; raises `CommandNotFound` / `CommandNotExecutable`.

        The child is forked from the calling thread, which this call blocks until the child
        is reaped: its parent-death signal, where no death watcher runs, fires when that thread ends.
        """
        made_subreaper = self.subreaper and become_subreaper()
        reaper = None
        if self.subreaper or os.getpid() == 1:
            # Made before the fork: the children we already have are the host's,
            # and an orphan re-parented a moment after the fork is not among them.
            reaper = Reaper(keep=lambda: (self.proc.pid if self.proc else 0, *self._spared()),
                            pid1=os.getpid() == 1)
        env = dict(os.environ if self.env is None else self.env)
        env.update(self.extra_env)
        env[TREE_TOKEN_ENV] = self.token
        run_log_fd = None
        if self.log_file:
            os.makedirs(os.path.dirname(os.path.abspath(self.log_file)), exist_ok=True)
            run_log_fd = os.open(self.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        slave = None
        if self.pty:
            from .terminal import open_pty  # termios and struct: only --pty needs them

            self._pty_master, slave = open_pty((self.stdout_fd or 1, self.stderr_fd or 2, 0))
        try:
            self._watch = DeathWatch.start(self.death_signal)
            try:
                proc = self.proc = spawn_child(self.argv, shell=self.shell, cwd=self.cwd, env=env,
                                               popen=self._popen, terminal=slave,
                                               setup=child_setup(self.death_signal, self._watch))
            finally:
                if slave is not None:
                    os.close(slave)  # the child has it: the master reads EOF (EIO) when the tree closes it
            return self._supervise(proc, run_log_fd, reaper)
        finally:
            for fd in (run_log_fd, self._pty_master):
                if fd is not None:
                    os.close(fd)
            self._pty_master = None
            if self._watch is not None:
                self._watch.close()  # the child is reaped (or never ran): no signal, no watcher left
            if made_subreaper:
                stop_subreaper()  # the child's tree is ended and reaped: adopt no more orphans

    def send_signal(self, sig: int) -> None:
        """Forward `sig` to the child's process group; shutdown signals start the kill timeout.
        Any thread (the signal forwarding runs on the waiting thread; an owner may call it too)."""
        with self._lock:
            if self.proc is None:
                return
            if sig in SHUTDOWN_SIGNALS and self._shutdown_at is None:
                self._shutdown_at = time.monotonic()
                self._signalled_by = sig
            pid = self.proc.pid
        if sig == signal.SIGWINCH and self._pty_master is not None:
            from .terminal import follow_window

            follow_window(self._pty_master, (self.stdout_fd or 1, self.stderr_fd or 2, 0))
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _received(self, sig: int) -> None:
        """A signal trainvisor received (the handlers' forward): SIGTERM goes on as `term_signal`;
        a second SIGTERM, or a second SIGINT (Ctrl-C twice), skips the rest of the kill timeout:
        the tree is killed now. One of each is forwarded like any signal (an init's test sends both)."""
        if sig in SHUTDOWN_SIGNALS:
            if sig in self._seen & {signal.SIGTERM, signal.SIGINT}:
                self._hurry = True
                waker = self._waker
                if waker is not None:
                    waker.notify()
            self._seen.add(sig)
            if self._on_shutdown is not None:
                self._on_shutdown(sig)
        self.send_signal(self.term_signal if sig == signal.SIGTERM else sig)

    def _suspend(self, sig: int) -> None:
        """Job control (TSTP, TTIN, TTOU): the child's group stopped before trainvisor stops itself."""
        if self.proc is not None:
            stop_group(self.proc.pid, sig)

    def stop(self, reason: str, *, sig: int = signal.SIGINT, grace: float = DEFAULT_STOP_GRACE) -> bool:
        """Ask the training to stop, from any thread: `sig` to the child's process group now,
        SIGTERM after `grace` seconds if it is still running, then the kill timeout as for any
        SIGTERM. The reason is reported in the result. Asked before `run()`, the child is stopped
        as soon as it runs. False when the child has ended or a stop was already asked for (the
        first reason stands)."""
        with self._lock:
            if self._stop is not None or (self.proc is not None and self.proc.returncode is not None):
                return False
            self._stop = StopRequest(reason, sig, max(0.0, grace))
            waker = self._waker
            if waker is not None:
                waker.notify()  # the waiting thread carries it out (signals, log lines, deadlines)
        return True

    # -- internals ---------------------------------------------------------

    def _supervise(self, proc: subprocess.Popen, run_log_fd: Optional[int], reaper: Optional[Reaper]) -> ProcessResult:
        run_log = open_run_log(run_log_fd) if run_log_fd is not None else None
        if self._pty_master is not None:
            sources = [("stdout", self._pty_master, self.stdout_fd)]
        else:
            assert proc.stdout is not None and proc.stderr is not None
            sources = [("stdout", proc.stdout.fileno(), self.stdout_fd), ("stderr", proc.stderr.fileno(), self.stderr_fd)]
        channel = self.channel
        readers = [PipeReader(stream, src, passthrough_fd=fd, put=channel.put if channel else None,
                              budget=channel.budgets[stream] if channel else None, run_log=run_log)
                   for stream, src, fd in sources]
        # The handlers go in before the readers start: until a reader passes the child's first
        # bytes on, nobody who watches its output can have reacted to it with a signal, so none
        # is lost to a disposition we are about to replace (SIG_IGN when started with `&`).
        waker = Waker(proc.pid)
        handlers = SignalHandlers(forward=self._received if self.forward_signals else None,
                                  on_child=waker.notify if reaper is not None else None,
                                  suspend=self._suspend if self.forward_signals else None)
        signals_on = handlers.install()
        with self._lock:
            self._waker = waker
            if self._stop is not None:
                waker.notify()
        try:
            for r in readers:
                r.start()
        except BaseException:
            handlers.restore()
            self._close_waker()
            raise
        record = self._record
        if record is not None:
            record.begin(proc.pid)
        tree = ProcessTree(proc.pid, own_pids=self._spared, token=self.token, adopts=reaper is not None,
                           before=reaper.before if reaper is not None else (),
                           on_new=record.seen if record is not None else None)
        killed = self._wait_and_end(proc, tree, reaper, waker, handlers, signals_on)
        self._join_readers(readers)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        return ProcessResult(
            exit_code=exit_code_of(proc.returncode),
            returncode=proc.returncode,
            unparsed_bytes=sum(r.dropped_bytes for r in readers),
            killed_processes=killed,
            signalled_by=self._signalled_by,
            stop_reason=self._stop.reason if self._stop is not None else None,
        )

    def _spared(self) -> tuple[int, ...]:
        """Our own children that are not the tree's: the host's, and the death watcher."""
        watch = self._watch
        return (*self._own_pids(), *((watch.pid,) if watch is not None else ()))

    def _close_waker(self) -> None:
        with self._lock:
            waker, self._waker = self._waker, None
        if waker is not None:
            waker.close()

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
            if self._record is not None:
                self._record.end()
            self._close_waker()
        return killed

    def _wait_child(self, proc: subprocess.Popen, tree: ProcessTree, waker: Waker,
                    reaper: Optional[Reaper], *, sigchld: bool) -> int:
        """Wait for the child; once a shutdown signal arrived, SIGKILL the whole
        tree when the child outlives `kill_timeout`."""
        # Sleep long only when something wakes us: the child's pidfd, and SIGCHLD if reaping.
        nap = 0.5 if waker.sees_child_exit and (reaper is None or sigchld) else 0.05
        next_refresh = 0.0
        while proc.poll() is None:
            timeout = min(nap, self._carry_out_stop(proc))
            if self._shutdown_at is not None:
                self._announce_shutdown()
                remaining = self._shutdown_at + self.kill_timeout - time.monotonic()
                if self._hurry:  # a second SIGTERM/SIGINT
                    remaining = 0.0
                if remaining <= 0:
                    log.warning("child did not exit %s after %s: SIGKILL to its process tree",
                                "(a second SIGTERM/SIGINT)" if self._hurry else f"{self.kill_timeout:.1f}s",
                                signal.Signals(self._signalled_by or signal.SIGTERM).name)
                    killed = tree.kill_all()
                    proc.wait()
                    return killed
                timeout = min(timeout, remaining)
            waker.wait(timeout)
            if reaper is not None:
                reaper.reap()
            if time.monotonic() >= next_refresh:
                tree.refresh()  # remember descendants while the child lives
                if self._watch is not None:
                    self._watch.rearm(proc.pid)  # a watcher killed by hand is replaced
                if self._record is not None:
                    self._record.alive()
                next_refresh = time.monotonic() + TREE_REFRESH
        return 0

    def _carry_out_stop(self, proc: subprocess.Popen) -> float:
        """The owner's stop request, on the waiting thread: the polite signal once, SIGTERM when
        its grace is over. Returns how long the wait may sleep before the next step."""
        with self._lock:
            request, escalate_at = self._stop, self._stop_escalate_at
        if request is None:
            return float("inf")
        now = time.monotonic()
        if escalate_at is None:
            log.warning("stopping the training (%s): %s to its process group, SIGTERM in %.1fs unless it exits",
                        request.reason, signal.Signals(request.signal).name, request.grace)
            with self._lock:
                escalate_at = self._stop_escalate_at = now + request.grace
            if request.signal in SHUTDOWN_SIGNALS and request.signal != signal.SIGINT:
                self.send_signal(request.signal)  # SIGTERM/SIGHUP: the kill timeout starts now
            else:
                try:
                    os.killpg(proc.pid, request.signal)
                except (ProcessLookupError, PermissionError):
                    pass
        if now >= escalate_at:
            if self._shutdown_at is None:
                log.warning("the training did not stop %.1fs after %s: SIGTERM", request.grace,
                            signal.Signals(request.signal).name)
                self.send_signal(signal.SIGTERM)
            return float("inf")
        return escalate_at - now

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
