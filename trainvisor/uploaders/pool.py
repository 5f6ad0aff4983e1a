"""A thread pool whose workers never hold the interpreter's exit.

`concurrent.futures.ThreadPoolExecutor` joins every worker at interpreter exit, so an upload
part held 20 s by a slow link keeps trainvisor alive 20 s past `--drain-timeout`. Uploads need
no such wait: the journal (SQLite, committed per change) and the resume records (replaced
atomically) are consistent at any instant, a SIGKILL included, and the next start resumes what
was in flight. Workers here are daemon threads: `shutdown(wait=True)` still joins them, so a
closed pool leaves no thread behind, but an abandoned one does not delay the exit.
"""
from __future__ import annotations

import queue
import threading
from concurrent.futures import Executor, Future
from typing import Any, Callable, NamedTuple, Optional

__all__ = ["DaemonThreadPool"]


class _Task(NamedTuple):
    future: Future
    fn: Callable[..., Any]
    args: tuple
    kwargs: dict


class DaemonThreadPool(Executor):
    """At most `workers` daemon threads, started as tasks arrive."""

    def __init__(self, workers: int, thread_name_prefix: str = "trainvisor-pool") -> None:
        self._max = max(1, workers)
        self._prefix = thread_name_prefix
        self._tasks: "queue.SimpleQueue[Optional[_Task]]" = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()
        self._shutdown = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot submit to a pool that was shut down")
            self._tasks.put(_Task(future, fn, args, kwargs))
            if self._tasks.qsize() > self._idle and len(self._threads) < self._max:
                t = threading.Thread(target=self._work, name=f"{self._prefix}_{len(self._threads)}", daemon=True)
                self._threads.append(t)
                t.start()
        return future

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            task = self._tasks.get()
            with self._lock:
                self._idle -= 1
            if task is None:
                return
            if task.future.set_running_or_notify_cancel():
                try:
                    result = task.fn(*task.args, **task.kwargs)
                except BaseException as exc:  # handed to whoever waits on the future
                    task.future.set_exception(exc)
                else:
                    task.future.set_result(result)
            del task

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            threads = list(self._threads)
        if cancel_futures:
            while True:
                try:
                    task = self._tasks.get_nowait()
                except queue.Empty:
                    break
                if task is not None:
                    task.future.cancel()
        for _ in threads:
            self._tasks.put(None)
        if wait:
            for t in threads:
                t.join()
