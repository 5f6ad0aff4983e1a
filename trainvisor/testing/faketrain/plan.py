"""What the fake child will do with a log, worked out before it writes a byte: the log's lines
as raw bytes, its framework, and per line the checkpoint saves the log announces there.

The announcements come from trainvisor's own parser (a replay of the log), so the files the fake
writes are exactly the ones a run of it is told about; nothing here re-reads checkpoint lines."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

from ...errors import ConfigError
from .profiles import PROFILES, Profile, framework_of, profile_for

__all__ = ["Save", "Plan", "make_plan", "split_lines"]

_HEAD_LINES = 500  # what `auto` reads before it settles (parsers/chooser.py WINDOW)
_CAFFE_PREFIX = re.compile(r"^(.*)_iter_\d+\.caffemodel(?:\.h5)?$")


@dataclass(frozen=True)
class Save:
    """One announced checkpoint: `kind` as the parser named it, `path` as the log printed it."""

    kind: str
    path: str


@dataclass(frozen=True)
class Plan:
    """`lines`: the log's bytes cut after each newline (joined, they are the log). `saves`: the
    1-based line number -> the saves that line announces. `iterations`: line -> the last
    iteration a metric of the log named up to it (what Caffe snapshots on SIGINT).
    """

    lines: tuple[bytes, ...]
    profile: Profile
    saves: Mapping[int, tuple[Save, ...]]
    iterations: Mapping[int, int]


def _cut(data, nl):
    """`data` cut after each `nl` (bytes or str); the pieces join to `data`."""
    out, start = [], 0
    while (end := data.find(nl, start)) >= 0:
        out.append(data[start:end + 1])
        start = end + 1
    if start < len(data):
        out.append(data[start:])
    return out


def _codec(raw: bytes) -> str:
    """A UTF-16 log says which by its BOM; anything else is cut as bytes (UTF-8, GBK: ``\\n`` is one byte)."""
    return "utf-16-le" if raw.startswith(b"\xff\xfe") else "utf-16-be" if raw.startswith(b"\xfe\xff") else "utf-8"


def split_lines(raw: bytes) -> tuple[bytes, ...]:
    """The log cut after each newline, in its own encoding: a UTF-16 log is cut as text and each
    piece encoded back, so the pieces still join to the file's bytes."""
    codec = _codec(raw)
    if codec == "utf-8":
        return tuple(_cut(raw, b"\n"))
    try:
        pieces = tuple(s.encode(codec, "surrogatepass") for s in _cut(raw.decode(codec, "surrogatepass"), "\n"))
    except UnicodeError:
        return (raw,)
    return pieces if b"".join(pieces) == raw else (raw,)


def make_plan(log: Path, *, framework: Optional[str] = None, year: int = 2026) -> Plan:
    """Read `log` (decompressed when it is gzip, bzip2 or xz) and replay it once (ConfigError,
    one line, for a log that cannot be read)."""
    from ...calls.logs import replay
    from ...events import CheckpointEvent, Metric

    from ...stream.compressed import decompressed

    try:
        with open(log, "rb") as fh:
            raw = decompressed(fh, str(log)).read()  # a .gz log is played as the log it holds
    except OSError as exc:
        raise ConfigError(f"cannot read {log}: {exc.strerror}") from exc
    lines = split_lines(raw)
    if framework is not None and framework not in PROFILES:
        raise ConfigError(f"no framework named {framework!r} (one of: {', '.join(sorted(PROFILES))})")
    # the saves are those the parser of a framework named reads, or `auto`'s, as a run's
    parser = framework or "auto"
    if framework is None:
        head = [b.decode(_codec(raw), "replace") for b in lines[:_HEAD_LINES]]
        framework = framework_of(head)
    saves: dict[int, list[Save]] = {}
    iterations: dict[int, int] = {}
    for ev in replay(log, parser=parser, year=year).events:
        if isinstance(ev, CheckpointEvent):
            saves.setdefault(ev.line, []).append(Save(ev.kind, ev.path))
        elif type(ev) is Metric and ev.iteration is not None:
            iterations[ev.line] = ev.iteration
    return Plan(lines, profile_for(framework), {k: tuple(v) for k, v in saves.items()}, iterations)


def caffe_prefix(path: str) -> Optional[str]:
    """`snapshots/lenet` of `snapshots/lenet_iter_500.caffemodel`."""
    m = _CAFFE_PREFIX.match(path)
    return m.group(1) if m else None
