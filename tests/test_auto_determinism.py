"""`auto` gives the same events however the bytes are chunked: a live run reads small
chunks, a replay large ones, and both must produce identical records."""
from __future__ import annotations

import math

import pytest

from trainvisor.stream.lines import LineSplitter
from trainvisor.parsers import ParserOptions, create_parser
from trainvisor.stream.encoding import open_log_bytes

from .conftest import FIXTURES, REAL_LOGS

LOGS = sorted(FIXTURES.glob("logs/*.log")) + (sorted(REAL_LOGS.glob("*/*.log")) if REAL_LOGS.is_dir() else [])


def events(path, chunk: int) -> list:
    """chunk 0: one line per read, as a child that writes line by line delivers them."""
    parser = create_parser("auto", ParserOptions(year=2026))
    sp = LineSplitter("log")
    out = []
    with open(path, "rb") as raw:
        fh = open_log_bytes(raw)
        data = fh.read()
    pieces = data.splitlines(keepends=True) if chunk == 0 else [data[i:i + chunk] for i in range(0, len(data), chunk)]
    for piece in pieces:
        block = sp.feed(piece, 0.0, 0.0)
        if block:
            out.extend(parser.feed(block))
    block = sp.finish(0.0, 0.0)
    if block:
        out.extend(parser.feed(block))
    out.extend(parser.finish())
    return [tuple("nan" if isinstance(v, float) and math.isnan(v) else v
                  for v in (e if isinstance(e, tuple) else e.__dict__.values())) for e in out]


@pytest.mark.parametrize("log", LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_auto_is_independent_of_chunking(log):
    assert events(log, 0) == events(log, 256 * 1024)
