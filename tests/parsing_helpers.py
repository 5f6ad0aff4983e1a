"""Run a log file through the real replay path (encoding sniff, splitter, parser, pipeline)."""
from __future__ import annotations

import math
from pathlib import Path

from trainvisor.events import CheckpointEvent, Metric
from trainvisor.stream.lines import LineSplitter
from trainvisor.parsers import ParserOptions, create_parser
from trainvisor.stream.encoding import open_log_bytes
from trainvisor.stream.pipeline import Pipeline
from trainvisor.stream.replay import replay_stream

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



def feed_pieces(parser, pieces, *, stream: str = "log", wall_time: float = 0.0, finish: bool = True) -> list:
    """Events of `parser` for the bytes `pieces`, each one read as it would arrive (and, with
    `finish`, what it holds at the end)."""
    sp = LineSplitter(stream)
    blocks = [sp.feed(piece, 0.0, wall_time) for piece in pieces] + [sp.finish(0.0, wall_time)]
    out = [e for b in blocks if b is not None for e in parser.feed(b)]
    return out + parser.finish() if finish else out


def chunks(data: bytes, size: int) -> list[bytes]:
    """`data` in pieces of `size` bytes, as a pipe read of that size gives them."""
    return [data[i:i + size] for i in range(0, len(data), size)]


def chunked_events(path, parser_name: str, chunk: int) -> list:
    """Comparable events of `path` read in `chunk`-byte pieces; chunk 0: one line per
    read, as a live child writing line by line delivers them (wall_time left out)."""
    with open(path, "rb") as raw:
        data = open_log_bytes(raw).read()
    pieces = data.splitlines(keepends=True) if chunk == 0 else [data[i:i + chunk] for i in range(0, len(data), chunk)]
    out = feed_pieces(create_parser(parser_name, ParserOptions(year=2026)), pieces)
    return [e._replace(value=repr(e.value), wall_time=0.0) if type(e) is Metric else (e.path, e.kind, e.iteration, e.line)
            for e in out]
