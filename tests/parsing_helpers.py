"""Run a log file through the real replay path (encoding sniff, splitter, parser, pipeline)."""
from __future__ import annotations

import math
from pathlib import Path

from trainvisor.events import CheckpointEvent, Metric
from trainvisor.lines import LineSplitter
from trainvisor.parsers import ParserOptions, create_parser
from trainvisor.parsers.encoding import open_log_bytes
from trainvisor.pipeline import Pipeline
from trainvisor.replay import replay_stream

from .caffe_helpers import Collect

REPO = Path(__file__).resolve().parents[1]
REAL_LOGS = REPO.parent / "shared" / "real-logs"
FIXTURES = REPO / "fixtures" / "logs"


def parse_file(path, parser_name: str = "auto", *, argv=(), parser=None):
    """(parser, events) for a file, as `trainvisor replay` would parse it."""
    parser = parser or create_parser(parser_name, ParserOptions(year=2026, argv=tuple(argv)))
    sink = Collect()
    with open(path, "rb") as fh:
        replay_stream(open_log_bytes(fh), Pipeline(parser, sinks=[sink]))
    return parser, sink.events


def parse_text(text: str, parser_name: str):
    """Events for `text` fed in one block."""
    parser = create_parser(parser_name, ParserOptions(year=2026))
    sp = LineSplitter("t")
    out = []
    for block in (sp.feed(text.encode("utf-8", "surrogatepass"), 0.0, 0.0), sp.finish(0.0, 0.0)):
        if block is not None:
            out.extend(parser.feed(block))
    out.extend(parser.finish())
    return out


def series(events, name: str, phase: str = "train") -> list[Metric]:
    return [e for e in events if type(e) is Metric and e.name == name and e.phase == phase]


def checkpoints(events) -> list[CheckpointEvent]:
    return [e for e in events if isinstance(e, CheckpointEvent)]


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b
