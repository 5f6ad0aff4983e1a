"""Which directory to watch for a checkpoint the training's log announced: a pure rule.

A run uploads what its log announces without `--watch`: the announced file's directory (a
checkpoint directory's parent, where the next ones will appear too) becomes watched. Watches are
recursive, so a directory that holds the training's working directory (the working directory
itself, an ancestor, the home directory, `/`) is never chosen: watching it would watch the
datasets and everything else the run can reach. A directory checkpoint there is watched itself;
a single file there is left alone (the log says so once; give `--watch` for it).
"""
from __future__ import annotations

import os
from typing import Optional

__all__ = ["directory_to_watch", "too_wide"]


def _holds(directory: str, path: str) -> bool:
    """`directory` is `path` or one of its ancestors."""
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def too_wide(directory: str, cwd: str, home: str) -> bool:
    """Watching `directory` with its subdirectories would watch the working directory (or `/`,
    or the home directory): the datasets and everything else the run can reach."""
    return directory in (os.sep, home) or _holds(directory, cwd)


def directory_to_watch(path: str, *, directory: bool, cwd: str, home: str) -> Optional[str]:
    """The absolute directory to watch for announced `path` (relative to `cwd`, the child's working
    directory), or None. `directory`: the announcement names a directory checkpoint
    (Hugging Face's ``checkpoint-500``). A URL (``gs://bucket/model.ckpt``) is not local: None."""
    if "://" in path:
        return None
    full = os.path.normpath(os.path.join(cwd, path))
    parent = os.path.dirname(full)
    if not too_wide(parent, cwd, home):
        return parent
    if directory and not too_wide(full, cwd, home):
        return full
    return None
