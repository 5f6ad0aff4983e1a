"""Reading back what the trainvisor.logging tests wrote: all rotated files, in order, with
every record checked for wholeness and each sender's records checked for order."""
from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

# a test record's first line, after an optional "[...] " prefix of a full log format
_HEAD = re.compile(r"(?:\[.*\] )?R (\S+) (\d+) (\d+) (x*)\Z")
_LOOKS_LIKE_HEAD = re.compile(r"(?:\[.*\] )?R ")


def log_files(path: Path) -> list[Path]:
    """`name.N` ... `name.1`, `name`: oldest first."""
    backups = sorted(path.parent.glob(path.name + ".*"), key=lambda p: int(p.suffix[1:]), reverse=True)
    return backups + [path]


def read_log(path: Path) -> str:
    return "".join(p.read_text() for p in log_files(path))


def parse_records(text: str) -> dict[str, list[int]]:
    """Sequence numbers per tag, in file order. Raises AssertionError at the first torn,
    interleaved or malformed record (lines that are not test records are ignored)."""
    seqs: dict[str, list[int]] = defaultdict(list)
    lines = text.split("\n")
    assert lines[-1] == "", "log does not end with a whole line"
    i = 0
    while i < len(lines) - 1:
        line = lines[i]
        m = _HEAD.match(line)
        if not _LOOKS_LIKE_HEAD.match(line):
            i += 1
            continue
        assert m, f"torn record head at line {i}: {line!r}"
        tag, seq, extra, pad = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
        assert len(pad) == seq % 53 and extra == (3 if seq % 7 == 0 else 0), f"corrupt record {line!r}"
        for j in range(extra):
            expected = f"  {tag}/{seq} continuation {j}"
            assert lines[i + 1 + j] == expected, f"record {tag}/{seq} torn: {lines[i + 1 + j]!r}"
        seqs[tag].append(seq)
        i += 1 + extra
    return dict(seqs)


def assert_complete(seqs: dict[str, list[int]], tags: list[str], count: int) -> None:
    assert sorted(seqs) == sorted(tags), f"senders seen {sorted(seqs)}, expected {sorted(tags)}"
    for tag in tags:
        got = seqs[tag]
        assert got == list(range(count)), (
            f"{tag}: {len(got)} records, first out of order/missing at "
            f"{next((k for k, s in enumerate(got) if s != k), len(got))}")
