#!/usr/bin/env python3
"""Parse throughput of every format parser and of `auto` on the same mixed log, in one run;
then the rank-prefix section: the generic parser behind the RankRouter on a log where four
ranks prefix every line (``[default0]:`` of torchrun --tee), against the same lines unprefixed.

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

The rank section reports lines/s of: the bare generic parser on the unprefixed log (the
baseline), the router on that same unprefixed log (what a log without ranks pays), and the
router on the prefixed log with rank 0 reported (the default) and with every rank.

The bar section: a log of progress bars rewritten with ``\r`` (tqdm, rich, Keras; the fixtures
in BAR_FIXTURES, repeated), where every physical line holds many terminal states. It reports
the generic parser's lines/s on it, and `auto` against the parser it chooses, timed alternately.
Those fixtures stay out of the format mix: a line of many bar states costs each state's work, and the
mix measures the per-line loop.

    python bench/parse_mixed.py [--lines 300000] [--repeat 3] [--ranks-only] [--bars-only]
"""
from __future__ import annotations

import argparse
import hashlib
import sys

from _common import OUT, ROOT, best_of

from trainvisor.parsers import ParserOptions, available_parsers, create_parser
from trainvisor.stream.encoding import open_log_bytes
from trainvisor.stream.pipeline import Pipeline
from trainvisor.stream.ranks import RankRouter, parse_rank_selection
from trainvisor.stream.replay import replay_stream

FIXTURES = ROOT / "fixtures" / "logs"
RANKS = 4
# The format mix is these fixtures, named, not every *.log: a fixture added for a test would
# otherwise change the mix, and the figures would no longer compare across commits (the rank-prefixed
# and \r-rewritten fixtures have sections of their own). A format
# joins the mix here, deliberately, with a note of the figures before and after.
MIX = ("darknet", "detectron2-eval-tables", "detectron2", "detr-coco-eval", "generic-eval-tables",
       "generic-phases-config", "generic", "guild-output-scalars", "huggingface", "katib-json", "katib-text",
       "keras", "lenet-newyear", "lightning-rich", "lightning", "mmdet-eval-results", "mmdet", "mxnet",
       "pairs-every-match", "pytorch-mnist", "pytorch", "tensorflow-tpu-absl", "tensorflow", "yolo", "yolox-eval")
# Progress bars rewritten with \r: measured in their own section (bars_section).
BAR_FIXTURES = ("tqdm-cr", "rich-bar", "keras3-bar", "lightning-tqdm-steps", "lightning-rich-pty")


def format_fixtures() -> list:
    return [FIXTURES / f"{name}.log" for name in sorted(MIX)]


def bar_fixtures() -> list:
    return [FIXTURES / f"{name}.log" for name in sorted(BAR_FIXTURES)]  # named, as the mix is


def mixed_log(lines: int, fixtures=None, stem: str = "mixed"):
    """`fixtures` (the format mix by default), each repeated 20 times in turn, to `lines` lines.
    The format mix is read as text (a CRLF ending becomes LF); other fixtures keep every \r."""
    OUT.mkdir(parents=True, exist_ok=True)
    sources = fixtures or format_fixtures()
    # cached under a digest of what it is made of: a changed fixture makes a new log, never a stale one
    digest = hashlib.sha1(b"".join(p.name.encode() + p.read_bytes() for p in sources)).hexdigest()[:10]
    path = OUT / f"{stem}-{lines}-{digest}.log"
    if path.exists() and path.stat().st_size > 0:
        return path
    sections = [p.read_bytes().decode() for p in fixtures] if fixtures else [p.read_text() for p in format_fixtures()]
    # each section repeated so a block holds runs of one format, as a real log has
    chunk = "".join(s * 20 for s in sections)
    per = chunk.count("\n")
    with open(path, "w", newline="") as fh:  # the fixtures' \r stay as they are
        for _ in range(lines // per + 1):
            fh.write(chunk)
    return path


def parse(path, name: str) -> int:
    parser = create_parser(name, ParserOptions(year=2026))
    parse.last_parser = parser
    return parse_with(path, parser)


def ranked_logs(lines: int):
    """(prefixed, unprefixed): a data-parallel run's key=value lines, each rank printing every
    step, ranks interleaved line by line as torchrun --tee writes them."""
    OUT.mkdir(parents=True, exist_ok=True)
    prefixed, plain = OUT / f"ranked-{lines}.log", OUT / f"ranked-plain-{lines}.log"
    if not (prefixed.exists() and plain.exists()):
        with open(prefixed, "w") as pre, open(plain, "w") as bare:
            for step in range(lines // RANKS + 1):
                for rank in range(RANKS):
                    line = f"step={step} loss={1.0 / (step + rank + 1):.6f} lr=0.001 grad_norm={rank + 0.5}\n"
                    pre.write(f"[default{rank}]:{line}")
                    bare.write(line)
    return prefixed, plain


def parse_with(path, parser) -> int:
    with open(path, "rb") as fh:
        return replay_stream(open_log_bytes(fh), Pipeline(parser)).events


def ranks_section(lines: int, repeat: int) -> None:
    prefixed, plain = ranked_logs(lines)
    n = sum(1 for _ in open(prefixed, "rb"))

    def routed(ranks: str) -> RankRouter:
        return RankRouter(lambda: create_parser("generic", ParserOptions(year=2026)), parse_rank_selection(ranks))

    runs = {
        "generic, unprefixed log (baseline)": (plain, lambda: create_parser("generic", ParserOptions(year=2026))),
        "router + generic, unprefixed log": (plain, lambda: routed("0")),
        "router + generic, prefixed, --ranks 0": (prefixed, lambda: routed("0")),
        "router + generic, prefixed, --ranks all": (prefixed, lambda: routed("all")),
    }
    events, times = {}, {}
    for _ in range(repeat):  # alternated, so machine drift hits every variant alike
        for label, (path, make) in runs.items():
            t = best_of(1, lambda: events.__setitem__(label, parse_with(path, make())))
            times[label] = min(times.get(label, t), t)
    print(f"rank prefixes: {prefixed.name}, {n} lines, {RANKS} ranks interleaved line by line")
    base = times["generic, unprefixed log (baseline)"]
    for label, t in times.items():
        print(f"  {label:<42} {n / t / 1e6:6.3f} M lines/s   {events[label]:>8} events   "
              f"{t / base:.2f}x the baseline's time")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=300_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--ranks-only", action="store_true", help="Only the rank-prefix section.")
    ap.add_argument("--bars-only", action="store_true", help="Only the progress-bar section.")
    a = ap.parse_args()
    if not (a.ranks_only or a.bars_only):
        formats_section(a.lines, a.repeat)
    if not a.bars_only:
        ranks_section(a.lines, a.repeat)
    if not a.ranks_only:
        bars_section(a.lines, a.repeat)


def bars_section(lines: int, repeat: int) -> None:
    """Generic on the bar log, and auto against its choice, alternated (as the format section)."""
    log = mixed_log(lines // 10, bar_fixtures(), "bars")
    n = sum(1 for _ in open(log, "rb"))
    states = log.read_bytes().count(b"\r") + n
    parse(log, "auto")
    chosen = parse.last_parser.chosen
    labels = ("generic", "auto", chosen) if chosen != "generic" else ("generic", "auto")
    events, times = {}, {}
    for _ in range(repeat):
        for label in labels:
            t = best_of(1, lambda: events.__setitem__(label, parse(log, label)))
            times[label] = min(times.get(label, t), t)
    print(f"progress bars: {log.name}, {n} lines, {states} terminal states, "
          f"{', '.join(p.stem for p in bar_fixtures())}")
    for label, t in times.items():
        print(f"  {label:<12} {n / t / 1e6:6.3f} M lines/s {states / t / 1e6:6.3f} M states/s   "
              f"{events[label]:>8} events")
    print(f"auto chose {chosen!r}; auto / {chosen}: {times['auto'] / times[chosen]:.2f}x")


def formats_section(lines: int, repeat: int) -> None:
    log = mixed_log(lines)
    n = sum(1 for _ in open(log, "rb"))
    print(f"mixed log: {log.name}, {n} lines, {log.stat().st_size / 1e6:.1f} MB, "
          f"{len(format_fixtures())} formats")
    times = {}
    metrics = {}
    for name, _ in available_parsers():
        times[name] = best_of(repeat, lambda: metrics.__setitem__(name, parse(log, name)))
    parse(log, "auto")
    chosen = parse.last_parser.chosen
    if "switched from" in parse.last_parser.reason:  # its first lines went to the parser it left
        print(f"auto switched ({parse.last_parser.reason}): {metrics['auto']} events, {chosen} alone "
              f"{metrics[chosen]}")
    else:
        assert metrics["auto"] == metrics[chosen], "auto must give exactly its choice's events"
    t_auto, t_chosen = [], []
    for _ in range(repeat):
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
