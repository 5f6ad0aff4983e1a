#!/usr/bin/env python3
"""Parse throughput of every format parser and of `auto` on the same mixed log, in one run.

The mixed log is built from the project's own fixture logs (fixtures/logs/*.log,
one per format, plus the Caffe fixture), interleaved in sections and repeated to
the requested size, so every parser sees its own lines among the others'.
Each parser replays the same file (splitter + parser + pipeline, no sink),
best of N runs. The target (auto within 1.5x of the best single parser) is
read against the best single parser *for this log*: the one `auto` chose,
which gives the same events (checked here). Parsers that skip most of the
log because it is not their format are faster but parse nothing of it; their
figures are printed for scale. `auto` and its choice are timed alternately so
machine drift hits both alike.

    python bench/parse_mixed.py [--lines 300000] [--repeat 3]
"""
from __future__ import annotations

import argparse
import sys

from _common import OUT, ROOT, best_of

from trainvisor.parsers import ParserOptions, available_parsers, create_parser
from trainvisor.parsers.encoding import open_log_bytes
from trainvisor.pipeline import Pipeline
from trainvisor.replay import replay_stream

FIXTURES = ROOT / "fixtures" / "logs"


def mixed_log(lines: int):
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"mixed-{lines}.log"
    if path.exists() and path.stat().st_size > 0:
        return path
    sections = [p.read_text() for p in sorted(FIXTURES.glob("*.log"))]
    # each section repeated so a block holds runs of one format, as a real log has
    chunk = "".join(s * 20 for s in sections)
    per = chunk.count("\n")
    with open(path, "w") as fh:
        for _ in range(lines // per + 1):
            fh.write(chunk)
    return path


def parse(path, name: str) -> int:
    parser = create_parser(name, ParserOptions(year=2026))
    with open(path, "rb") as fh:
        stats = replay_stream(open_log_bytes(fh), Pipeline(parser))
    parse.last_parser = parser
    return stats.events


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=300_000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    log = mixed_log(a.lines)
    n = sum(1 for _ in open(log, "rb"))
    print(f"mixed log: {log.name}, {n} lines, {log.stat().st_size / 1e6:.1f} MB, "
          f"{len(list(FIXTURES.glob('*.log')))} formats")
    times = {}
    metrics = {}
    for name, _ in available_parsers():
        times[name] = best_of(a.repeat, lambda: metrics.__setitem__(name, parse(log, name)))
    parse(log, "auto")
    chosen = parse.last_parser.chosen
    if "switched from" in parse.last_parser.reason:  # its first lines went to the parser it left
        print(f"auto switched ({parse.last_parser.reason}): {metrics['auto']} events, {chosen} alone "
              f"{metrics[chosen]}")
    else:
        assert metrics["auto"] == metrics[chosen], "auto must give exactly its choice's events"
    t_auto, t_chosen = [], []
    for _ in range(a.repeat):
        t_chosen.append(best_of(1, lambda: parse(log, chosen)))
        t_auto.append(best_of(1, lambda: parse(log, "auto")))
    times["auto"] = min(times["auto"], *t_auto)
    times[chosen] = min(times[chosen], *t_chosen)
    singles = {k: v for k, v in times.items() if k != "auto"}
    best = min(singles, key=singles.get)
    for name, t in sorted(times.items(), key=lambda kv: kv[1]):
        print(f"  {name:<12} {n / t / 1e6:6.3f} M lines/s   {metrics[name]:>8} events   "
              f"{t / times[best]:.2f}x the fastest single parser's time")
    print(f"auto chose {chosen!r} ({parse.last_parser.reason})")
    print(f"auto / the right single parser for this log ({chosen}): {times['auto'] / times[chosen]:.2f}x"
          "   (target <= 1.5x)")
    print(f"auto / fastest parser of all ({best}, which parses only its own lines): "
          f"{times['auto'] / times[best]:.2f}x")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
