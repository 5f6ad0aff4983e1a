"""JSON Lines sink: one JSON object per metric or checkpoint event, the default."""
from __future__ import annotations

import json
import os
from typing import IO, Sequence

from ..events import Event, Metric

__all__ = ["JsonlSink"]


class JsonlSink:
    """Appends as events arrive; the pipeline flushes it at least once a second
    and at exit, so a crash loses at most a second of records."""

    name = "jsonl"

    def __init__(self, target: str | os.PathLike | IO[str], *, mode: str = "w") -> None:
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

    def write(self, events: Sequence[Event]) -> None:
        fh = self._fh
        if fh is None:
            return
        dumps = json.dumps
        fh.write("".join(dumps(ev.to_json_dict(), allow_nan=False) + "\n" for ev in events))

    def flush(self) -> None:
        if self._fh is not None:
            self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            if self._owns:
                self._fh.close()
            else:
                self._fh.flush()
            self._fh = None


def read_jsonl(path: str | os.PathLike) -> list[Metric]:
    """Metric records of a JSONL file written by `JsonlSink` (checkpoint lines skipped)."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            if "event" not in d:
                out.append(Metric.from_json_dict(d))
    return out
