"""Metric files as sources (`--follow GLOB`, `watch.follow`): the files a training writes beside
its log (Lightning's metrics.csv, detectron2's metrics.json, mmdetection's *.log.json, a Trainer's
trainer_state.json, Ultralytics' results.csv), followed while it runs, their records handed to the
pipeline thread through the run's channel (`stream.source.Records`), after the console's.

Each record says its file in `Metric.stream`: ``file:`` and the path relative to the run's working
directory (``file:lightning_logs/version_0/metrics.csv``), so it never mixes with the console's
records; `Metric.line` is its line in that file (a trainer_state.json: its log_history entry).

A follower thread looks at the globs every `interval` seconds: files may appear late, under
directories that appear late (Lightning makes `lightning_logs/version_N/` when `fit` starts); the
run's own directory is never followed. When a child ends, one last sweep reads what it wrote last,
before the engine's end. One `MetricFiles` lives as long as its run, so a restarted child's records
continue its files' counts: each line of a file is reported once within a run. A Trainer writes
its whole log history so far into each checkpoint-N/trainer_state.json: an entry is reported from
the first of them read that has it, never again from a later one. A run started again
on its run directory (`trainvisor resume`, a restarted sidecar) reads, from the metrics file
written before, how many lines of each file were reported, and goes on after them.
"""
from __future__ import annotations

import glob
import json
import logging
import os
import threading
import time
from typing import Callable, Iterable, Iterator, Mapping, Optional

from ..parsers.metricfiles import KIND_DOCUMENT, file_kind
from ..stream.source import End, Records
from .followfile import FollowedFile

__all__ = ["MetricFiles", "MetricFollower", "follower_for", "FOLLOW_INTERVAL", "SOURCE_PREFIX", "reported_lines",
           "with_records"]

log = logging.getLogger("trainvisor")

FOLLOW_INTERVAL = 0.5  # seconds between two looks at the followed globs
SOURCE_PREFIX = "file:"


class MetricFiles:
    """The files `patterns` match under `cwd` (absolute patterns as they are; ``**`` recursive),
    each followed (`FollowedFile`); nothing under `exclude` (the run's own directory)."""

    def __init__(self, patterns: Iterable[str], *, cwd: str, exclude: Iterable[str] = (),
                 done: Mapping[str, int] | Callable[[], Mapping[str, int]] = {},
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.patterns = tuple(patterns)
        self.cwd = os.path.abspath(cwd)
        self._exclude = tuple(os.path.abspath(p).rstrip(os.sep) + os.sep for p in exclude)
        # read at the first sweep (a sidecar cuts its metrics file back first)
        self._done_of = done if callable(done) else (lambda: done)
        self._done: Optional[dict[str, int]] = None
        self._wall = wall_clock
        self._files: dict[str, FollowedFile] = {}
        self._history = 0  # log_history entries reported, over every trainer_state.json

    @property
    def files(self) -> tuple[FollowedFile, ...]:
        return tuple(self._files.values())

    def sweep(self, *, final: bool = False) -> list[Records]:
        """The records each followed file gained since the last sweep, a `Records` per file."""
        if self._done is None:
            self._done = dict(self._done_of())
            self._history = max((n for src, n in self._done.items() if file_kind(src) == KIND_DOCUMENT), default=0)
        for path in self._matches():
            if path not in self._files:
                source = self.source_of(path)
                self._files[path] = FollowedFile(path, source, file_kind(path), done=self._done.get(source, 0))
                log.info("following %s (%s)", path, source)
        out = []
        now = self._wall()
        for followed in self._files.values():
            document = followed.kind == KIND_DOCUMENT
            if document:  # each checkpoint-N/ holds the whole history so far: a later one goes on after
                followed.done = max(followed.done, self._history)
            metrics = followed.read(now, final=final)
            if document:
                self._history = max(self._history, followed.done)
            if final:  # at the end, what was more than one read's worth
                more = metrics
                while more:
                    more = followed.read(now, final=True)
                    metrics += more
            if metrics:
                out.append(Records(followed.source, tuple(metrics)))
        return out

    def source_of(self, path: str) -> str:
        """``file:`` and the path relative to the working directory (absolute when outside it)."""
        rel = os.path.relpath(path, self.cwd)
        return SOURCE_PREFIX + (path if rel.startswith(os.pardir + os.sep) else rel)

    def _matches(self) -> list[str]:
        found = set()
        for pattern in self.patterns:
            full = pattern if os.path.isabs(pattern) else os.path.join(self.cwd, pattern)
            for path in glob.glob(full, recursive=True):
                path = os.path.abspath(path)
                if not path.startswith(self._exclude) and os.path.isfile(path):
                    found.add(path)
        return sorted(found)


class MetricFollower:
    """`files` swept on a thread of its own every `interval` seconds while a source runs
    (`start(put)` ... `stop()`: a last sweep, on the caller's thread, after the thread ended).
    A failing sweep is logged, never raised: the training goes on."""

    def __init__(self, files: MetricFiles, *, interval: float = FOLLOW_INTERVAL) -> None:
        self.files = files
        self.interval = interval
        self._put: Callable[[Records], None] = lambda r: None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._warned = self._failed = False

    def start(self, put: Callable[[Records], None]) -> None:
        self._put = put
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="trainvisor-follow", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """The thread ended, then everything the files hold now read and put."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._sweep(final=True)
        if not self.files.files and not self._warned:  # said, never a silent nothing
            self._warned = True
            log.warning("--follow %s: no file matched (under %s)", " ".join(self.files.patterns), self.files.cwd)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sweep(final=False)

    def _sweep(self, *, final: bool) -> None:
        try:
            for records in self.files.sweep(final=final):
                self._put(records)
        except Exception:  # trainvisor's own bug: the console's records still flow
            # told once with its traceback; a sweep every 0.5 s must not fill the run log
            (log.debug if self._failed else log.exception)("following metric files failed")
            self._failed = True


def follower_for(run) -> Optional[MetricFollower]:
    """The follower of `run`'s `watch.follow` globs (None without any), under the training's
    working directory; a run started again on its directory goes on after what it reported."""
    patterns = run.config.watch.follow
    if not patterns:
        return None
    cwd = run.config.process.cwd or os.getcwd()
    metrics_path = run.metrics_path
    return MetricFollower(MetricFiles(patterns, cwd=cwd, exclude=(str(run.run_dir),),
                                      done=lambda: reported_lines(metrics_path)))


def reported_lines(metrics_path: str | os.PathLike) -> dict[str, int]:
    """Per followed file (its source), the last line a metrics file written before holds a record
    of: where a run started again on its run directory goes on."""
    done: dict[str, int] = {}
    marker = f'"stream": "{SOURCE_PREFIX}'
    try:
        fh = open(metrics_path, encoding="utf-8", errors="replace")
    except OSError:
        return done
    with fh:
        for text in fh:
            if marker not in text:  # a cheap test before decoding: most records are the console's
                continue
            try:
                record = json.loads(text)
                stream, line = record["stream"], int(record["line"])
            except (ValueError, KeyError, TypeError):
                continue
            if isinstance(stream, str) and stream.startswith(SOURCE_PREFIX):
                done[stream] = max(done.get(stream, 0), line)
    return done


def with_records(items: Iterable, follower: MetricFollower, *, ready: Callable[[], bool] = lambda: True) -> Iterator:
    """A source driven on the caller's thread (a followed log) with the metric files' records
    between its items: put on a queue by the follower's thread, taken here whenever `ready` (not
    while a restart's warm-up is muted), and all of them before the source's end."""
    import queue

    waiting: "queue.SimpleQueue[Records]" = queue.SimpleQueue()
    follower.start(waiting.put)
    running = True
    try:
        for item in items:
            if type(item) is End:
                follower.stop()  # its last sweep, before the end
                running = False
            if not running or ready():
                while not waiting.empty():
                    yield waiting.get_nowait()
            yield item
    finally:
        if running:
            follower.stop()
    while not waiting.empty():  # a source that ended without its End
        yield waiting.get_nowait()
