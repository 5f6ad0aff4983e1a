"""One source of defaults: what `RunConfig()` says and what a class built directly (without a
RunConfig) does by default are the same values, so the command, a config file and a Python
caller that leaves a setting out all get the same run."""
from __future__ import annotations

import inspect

import pytest

from trainvisor import defaults
from trainvisor.config import RunConfig
from trainvisor.parsers.select import build_parser
from trainvisor.supervisor.supervisor import Supervisor
from trainvisor.uploaders.manager import UploadManager
from trainvisor.watch import CheckpointTracker, CheckpointWatcher, UploadPolicy

# (the RunConfig key, a callable that takes it as a keyword, the keyword's name). The line
# splitter's and the stream engine's max_line belong here too once they take defaults.MAX_LINE_BYTES.
SAME = [
    ("parsing.parser", build_parser, "name"),
    ("process.kill_timeout", Supervisor, "kill_timeout"),
    ("watch.settle", CheckpointWatcher, "settle"),
    ("watch.settle", CheckpointTracker, "settle"),
    ("watch.policy", UploadPolicy, "kind"),
    ("upload.concurrency", UploadManager, "concurrency"),
]


def _default(fn, keyword):
    return inspect.signature(fn).parameters[keyword].default


@pytest.mark.parametrize("key,fn,keyword", SAME, ids=[f"{k}-{f.__name__}.{w}" for k, f, w in SAME])
def test_a_class_built_directly_defaults_to_the_run_configs_value(key, fn, keyword):
    section, name = key.split(".")
    assert _default(fn, keyword) == getattr(getattr(RunConfig(), section), name)


def test_the_run_configs_defaults_are_the_constants():
    cfg = RunConfig()
    assert (cfg.parsing.parser, cfg.parsing.ranks, cfg.parsing.max_line_bytes) == ("auto", "0", 1 << 20)
    assert (cfg.process.kill_timeout, cfg.watch.settle, cfg.watch.policy) == (30.0, 2.0, "all")
    assert (cfg.upload.concurrency, cfg.upload.drain_timeout, cfg.run.root) == (2, 600.0, "trainvisor-runs")
    assert (defaults.PARSER, defaults.RANKS, defaults.MAX_LINE_BYTES, defaults.KILL_TIMEOUT, defaults.SETTLE,
            defaults.UPLOAD_POLICY, defaults.UPLOAD_CONCURRENCY, defaults.DRAIN_TIMEOUT, defaults.RUNS_ROOT) == (
        cfg.parsing.parser, cfg.parsing.ranks, cfg.parsing.max_line_bytes, cfg.process.kill_timeout,
        cfg.watch.settle, cfg.watch.policy, cfg.upload.concurrency, cfg.upload.drain_timeout, cfg.run.root)


def test_the_watcher_and_its_tracker_wait_as_long_for_a_partial_set():
    assert _default(CheckpointWatcher, "partial_after") == _default(CheckpointTracker, "partial_after") == 120.0
