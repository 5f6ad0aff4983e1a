"""Click options of `trainvisor run` for checkpoint watching, and the function that
builds a watcher from their values, the child's argv and its working directory.

`--iters-per-epoch` already belongs to `run` (the parser uses it too); pass its
value to `build_watcher`."""
from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import click

from ..errors import ConfigError
from .caffe_solver import snapshot_target
from .policy import POLICY_CHOICES, parse_policy
from .recognizers import default_recognizers
if TYPE_CHECKING:  # the watcher (and watchdog) load only when a watcher is built
    from .watcher import CheckpointConsumer, CheckpointWatcher

__all__ = ["WatchOptions", "watch_options", "build_watcher", "watch_dirs"]

log = logging.getLogger("trainvisor.watch")


@dataclass(frozen=True)
class WatchOptions:
    watch: tuple[str, ...] = ()
    poll: bool = False
    settle: float = 2.0
    checkpoint_pattern: tuple[str, ...] = ()
    upload_policy: str = "all"
    solver_watch: bool = True


def _nonneg(ctx, param, value):
    if value is not None and value < 0:
        raise click.BadParameter("must not be negative")
    return value


def watch_options(f: Callable) -> Callable:
    """Adds the options and passes them as one `watch_opts: WatchOptions` argument."""
    opts = [
        click.option("--watch", "watch", multiple=True, metavar="DIR",
                     help="Watch DIR (recursively; may not exist yet) for checkpoints. Repeatable."),
        click.option("--poll", is_flag=True,
                     help="Poll instead of inotify (network filesystems): a file is complete when "
                          "unchanged for --settle seconds."),
        click.option("--settle", type=float, default=2.0, show_default=True, callback=_nonneg,
                     help="Seconds a polled file must stay unchanged to count as complete."),
        click.option("--checkpoint-pattern", "checkpoint_pattern", multiple=True, metavar="GLOB|re:REGEX",
                     help="Also treat matching file names as checkpoints (regex groups iter/epoch). Repeatable."),
        click.option("--upload-policy", default="all", show_default=True, metavar=POLICY_CHOICES,
                     help="Which checkpoints to upload: all, epoch-end (needs --iters-per-epoch for Caffe), "
                          "every-N (every N-th checkpoint), last (the newest, at the end)."),
        click.option("--solver-watch/--no-solver-watch", "solver_watch", default=True, show_default=True,
                     help="With `caffe train -solver FILE`, watch the solver's snapshot_prefix directory."),
    ]

    @functools.wraps(f)  # keeps click's __click_params__ of decorators applied before this one
    def wrapper(**kw):
        wo = WatchOptions(tuple(kw.pop("watch")), kw.pop("poll"), kw.pop("settle"),
                          tuple(kw.pop("checkpoint_pattern")), kw.pop("upload_policy"), kw.pop("solver_watch"))
        return f(watch_opts=wo, **kw)

    for o in reversed(opts):
        wrapper = o(wrapper)
    return wrapper


def watch_dirs(opts: WatchOptions, *, argv: Sequence[str], cwd: str) -> list[str]:
    """--watch dirs plus the Caffe solver's snapshot directory."""
    dirs = list(opts.watch)
    if opts.solver_watch:
        target = snapshot_target(argv, cwd=cwd)
        if target is not None:
            log.info("caffe solver snapshots go to %s/%s_iter_N.*: watching it", target.directory, target.prefix)
            dirs.append(target.directory)
    return dirs


def build_watcher(opts: WatchOptions, *, argv: Sequence[str], cwd: str, consumer: CheckpointConsumer,
                  iters_per_epoch: Optional[int] = None) -> Optional[CheckpointWatcher]:
    """None when there is nothing to watch. Raises ConfigError for a bad pattern,
    policy or unreadable solver file (before the training starts)."""
    policy = parse_policy(opts.upload_policy, iters_per_epoch=iters_per_epoch)
    recognizers = default_recognizers(opts.checkpoint_pattern)
    dirs = watch_dirs(opts, argv=argv, cwd=cwd)
    if not dirs:
        return None
    for d in dirs:
        full = os.path.join(cwd, d)
        if os.path.exists(full) and not os.path.isdir(full):
            raise ConfigError(f"--watch {d}: not a directory")
    from .watcher import CheckpointWatcher

    return CheckpointWatcher(dirs, consumer=consumer, recognizers=recognizers, poll=opts.poll,
                             settle=opts.settle, policy=policy, cwd=cwd)
