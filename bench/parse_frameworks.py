#!/usr/bin/env python3
"""Parse throughput of the Lightning and PyTorch parsers on their real-run fixture logs
(fixtures/logs/lightning-*.log, pytorch-mnist.log), against the generic parser on the same
blocks in the same run (the baseline: what `auto` would fall back to).

Each log is repeated to a few thousand lines and split into blocks once; only the parser's
`feed` is timed (best of N), so the figures compare parsers, not the splitter.
tqdm and Rich bar lines are long (hundreds of characters), so lines/s is far below a
one-line-per-metric format's.

    python bench/parse_frameworks.py [--repeat 5]
"""
from __future__ import annotations

import argparse
import sys

from _common import ROOT, best_of

from trainvisor.stream.lines import LineSplitter
from trainvisor.parsers import ParserOptions, create_parser

FIXTURES = ROOT / "fixtures" / "logs"
LOGS = [("lightning-tqdm-steps.log", "lightning"), ("lightning-rich.log", "lightning"),
        ("lightning-rich-pty.log", "lightning"), ("pytorch-mnist.log", "pytorch")]
MIN_LINES = 5000


def blocks_of(path) -> tuple[list, int]:
    """The log repeated to at least MIN_LINES lines, as the splitter's 64 KiB blocks."""
    one = path.read_bytes()
    data = one * (MIN_LINES // max(one.count(b"\n"), 1) + 1)
    splitter = LineSplitter("log")
    blocks = [splitter.feed(data[i:i + 65536], 0.0, 0.0) for i in range(0, len(data), 65536)]
    blocks.append(splitter.finish(0.0, 0.0))
    return [b for b in blocks if b is not None], data.count(b"\n")


def parse_all(name: str, blocks: list) -> int:
    parser = create_parser(name, ParserOptions(year=2026))
    return sum(len(parser.feed(b)) for b in blocks) + len(parser.finish())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    for log, name in LOGS:
        blocks, lines = blocks_of(FIXTURES / log)
        events = parse_all(name, blocks)
        t = best_of(a.repeat, lambda: parse_all(name, blocks))
        t_generic = best_of(a.repeat, lambda: parse_all("generic", blocks))
        print(f"{log:<26} {name:<10} {lines:>7} lines {events:>6} events  {lines / t / 1e6:6.3f} M lines/s   "
              f"generic {lines / t_generic / 1e6:6.3f} M lines/s   time {t / t_generic:.2f}x generic's")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
