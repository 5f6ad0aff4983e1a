"""JSON Lines sink: one JSON object per metric or checkpoint event, the default."""
from __future__ import annotations

import json
import os
from typing import IO, Mapping, Optional, Sequence

from ..events import Event, Metric

__all__ = ["JsonlSink"]


class JsonlSink:
    """Appends as events arrive; the pipeline flushes it at least once a second
    and at exit, so a crash loses at most a second of records."""

    name = "jsonl"
    reader_gone = False

    def __init__(self, target: str | os.PathLike | IO[str], *, mode: str = "w",
                 extra: Optional[Mapping[str, object]] = None) -> None:
        """`extra`: constant fields added to every record (a run adds its `attempt`), so the
        records of a resumed run say which start wrote them."""
        self.set_extra(extra)
        self._owns = not hasattr(target, "write")
        if self._owns:
            self.path = os.fspath(target)  # type: ignore[arg-type]
            parent = os.path.dirname(self.path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            self._fh: IO[str] | None = open(self.path, mode, encoding="utf-8")
        else:
            self.path = getattr(target, "name", "-")
            self._fh = target  # type: ignore[assignment]

    def set_extra(self, extra: Optional[Mapping[str, object]]) -> None:
        """The constant fields from now on (a child restarted into the same run: its `attempt`)."""
        self._suffix = "".join(f", {json.dumps(k)}: {json.dumps(v)}" for k, v in (extra or {}).items())

    def write(self, events: Sequence[Event]) -> None:
        fh = self._fh
        if fh is None:
            return
        try:
            if _c_format is not None and _FAST:
                text = _c_format(events, Metric, _NAMES, _format_event, self._suffix)
            else:
                text = "".join(map(_format_event, events))
                if self._suffix:  # every record is one line ending in "}"
                    text = text.replace("}\n", self._suffix + "}\n")
            fh.write(text)
        except BrokenPipeError:
            self._reader_gone()

    def flush(self) -> None:
        if self._fh is not None:
            try:
                self._fh.flush()
            except BrokenPipeError:
                self._reader_gone()

    def _reader_gone(self) -> None:
        """`trainvisor replay LOG | head`: the reader left; that is not an error.
        Stop writing, and point fd 1 at /dev/null so the interpreter's own
        flush at exit does not complain either."""
        self.reader_gone = True
        fh, self._fh = self._fh, None
        if not self._owns and fh is not None:
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, fh.fileno())
                os.close(devnull)
            except (OSError, ValueError):
                pass

    def close(self) -> None:
        if self._fh is not None:
            if self._owns:
                self._fh.close()
            else:
                self._fh.flush()
            self._fh = None


_NAMES: dict[str, str] = {}


def _json_number(v) -> str:
    if v is None:
        return "null"
    r = repr(v)
    # nan / inf / -inf are not JSON numbers: write them as strings.
    return r if r[-1] not in "nf" else '"' + r + '"'


def _format_metric(m: Metric) -> str:
    """`json.dumps(m.to_json_dict())`, 4x faster (this runs once per metric)."""
    name, value, iteration, phase, test_net, seconds, epoch, wall, line, stream, rank, running = m
    qn = _NAMES.get(name)
    if qn is None:
        if len(_NAMES) > 10000:  # bounded, whatever names a log invents
            _NAMES.clear()
        qn = _NAMES[name] = json.dumps(name)
    qp = _NAMES.get(phase)
    if qp is None:
        qp = _NAMES[phase] = json.dumps(phase)
    qs = _NAMES.get(stream)
    if qs is None:
        qs = _NAMES[stream] = json.dumps(stream)
    tail = "" if rank is None else f', "rank": {rank}'
    if running:
        tail += ', "running": true'
    return (
        f'{{"name": {qn}, "value": {_json_number(value)}, "iteration": {"null" if iteration is None else iteration}, '
        f'"phase": {qp}, "test_net": {"null" if test_net is None else test_net}, '
        f'"seconds": {_json_number(seconds)}, "epoch": {_json_number(epoch)}, "wall_time": {wall!r}, "line": {line}, '
        f'"stream": {qs}{tail}}}\n'
    )


def _format_event(ev: Event) -> str:
    if type(ev) is Metric:
        return _format_metric(ev)
    return json.dumps(ev.to_json_dict(), allow_nan=False) + "\n"


try:  # the same formatting in C, built at install time when a compiler is there (setup.py)
    from ._format import format_metrics as _c_format
except ImportError:  # pragma: no cover - depends on the build
    _c_format = None
_FAST = not os.environ.get("TRAINVISOR_PURE_PYTHON")


def read_jsonl(path: str | os.PathLike) -> list[Metric]:
    """Metric records of a JSONL file written by `JsonlSink` (checkpoint lines skipped)."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            if "event" not in d:
                out.append(Metric.from_json_dict(d))
    return out
