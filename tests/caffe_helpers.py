"""Reading Caffe reference CSVs and trainvisor's outputs for comparison."""
from __future__ import annotations

import csv
import math
from pathlib import Path

from trainvisor.events import Metric
from trainvisor.parsers import ParserOptions, create_parser
from trainvisor.stream.replay import replay


def read_table(path: Path) -> tuple[list[str], list[dict[str, float]]]:
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        rows = [{k: float(v) if v != "" else math.nan for k, v in row.items()} for row in reader]
        return list(reader.fieldnames or []), rows


class Collect:
    """A sink that keeps every event (tests only)."""

    name = "collect"

    def __init__(self) -> None:
        self.events: list = []

    def write(self, events) -> None:
        self.events.extend(events)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    @property
    def metrics(self) -> list[Metric]:
        return [e for e in self.events if type(e) is Metric]


def replay_events(path: Path, *, parser: str = "caffe", year: int = 2026) -> Collect:
    sink = Collect()
    replay(path, create_parser(parser, ParserOptions(year=year)), sinks=[sink])
    return sink
