"""The checkpoint files a log announces, written where the framework would write them.

What a file holds is no framework's format (nobody loads them): each MiB starts with the file's
name and the MiB's index, so a store that reorders, drops or repeats a part of an upload stores
different bytes. What matters is the set of files a save makes and when:
- ``weights``/``solverstate`` (Caffe), ``pth`` (detectron2, mmdet), ``ckpt`` (Lightning: the
  file; TensorFlow: the prefix `model.ckpt-N`, whose save writes `.index`, `.data-00000-of-00001`
  and `.meta`), ``keras``: one save per line, written after the line (announced before).
- ``trainer`` (Hugging Face): a directory, its files written after the line.
- ``params`` (MXNet ``Saved checkpoint to``), ``stripped`` (YOLO): written before the line.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = ["WRITTEN_AFTER", "files_of", "sandboxed", "write_file"]

# Kinds whose file the framework writes after printing the line (as watch/announce.py's BEFORE_KINDS).
WRITTEN_AFTER = frozenset({"weights", "solverstate", "pth", "ckpt", "keras", "trainer"})
_TF_SUFFIXES = (".index", ".data-00000-of-00001", ".meta")
_TRAINER_FILES = ("model.safetensors", "optimizer.pt", "trainer_state.json")
_MIB = 1 << 20


def sandboxed(announced: str, root: Path) -> Path:
    """Where the fake writes the file the log names: a relative path under `root` (the child's
    working directory by default), as the framework would; an absolute path or one that climbs
    out with ``..`` is re-rooted under `root` (a fake training never writes outside it)."""
    norm = os.path.normpath(announced)
    if os.path.isabs(norm):
        norm = os.path.relpath(norm, "/")
    while norm.startswith(".." + os.sep) or norm == "..":
        norm = norm[3:] or "."
    return root / norm


def files_of(kind: str, path: Path) -> tuple[Path, ...]:
    """The files one announced save makes."""
    if kind == "trainer":
        return tuple(path / name for name in _TRAINER_FILES)
    if kind == "ckpt" and not path.name.endswith(".ckpt"):
        return tuple(path.with_name(path.name + s) for s in _TF_SUFFIXES)
    return (path,)


def write_file(path: Path, size: int, *, delay: float = 0.0) -> None:
    """`size` bytes at `path`; `delay`: seconds to pause after each MiB written (a slow writer:
    the file is there, growing, before it is complete)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    name = path.name.encode()
    fill = (name * (_MIB // max(1, len(name)) + 1))[:_MIB]
    with open(path, "wb") as fh:
        left, index = size, 0
        while left > 0:
            head = f"{path.name}:{index}\n".encode()
            block = (head + fill[len(head):])[:left]
            fh.write(block)
            left -= len(block)
            index += 1
            if delay and left > 0:
                fh.flush()
                time.sleep(delay)
