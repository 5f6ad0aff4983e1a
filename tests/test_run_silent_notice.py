"""A parser's `Notice` (the output lacks values; the remedy) reaches the reader once: one warning
in the run log and on stderr, one entry in `RunSummary.notices` and the printed summary, however
many ranks' parsers said it; the metrics file keeps every record. The parser is registered for
the test with `register_parser`, chosen by name as a user's would be, behind the rank router.
Replay and the announcement sink, the other readers of events, cope with a Notice too."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainvisor import Run, RunConfig, parsers
from trainvisor.config import LoggingConfig, ParsingConfig, ProcessConfig, RunDirConfig
from trainvisor.events import CheckpointEvent, Metric, Notice
from trainvisor.parsers import register_parser
from trainvisor.parsers.base import LineParser
from trainvisor.stream.pipeline import PipelineStats
from trainvisor.stream.replay import replay
from trainvisor.run.build import build_parser
from trainvisor.sinks.jsonl import JsonlSink
from trainvisor.sinks.stats import StatsSink
from trainvisor.summary import format_replay_summary, format_summary
from trainvisor.watch.announce import AnnouncementSink

CODE = "test-bar-last-epoch-only"
MESSAGE = "the progress bar printed its last epoch only: earlier epochs' values are missing (log them with CSVLogger)"

# Two ranks behind torchrun's --tee prefix: each prints its losses, then the line its parser
# answers with a Notice (the rank prefix is decided from the first 8 lines).
PROGRAM = """
for step in range(1, 6):
    for rank in (0, 1):
        print(f'[rank{rank}]: step {step} loss={step / 10 + rank:.2f}', flush=True)
for rank in (0, 1):
    print(f'[rank{rank}]: bar: last epoch only', flush=True)
for rank in (0, 1):
    print(f'[rank{rank}]: bar: last epoch only', flush=True)
"""


class NoticeParser(LineParser):
    """`loss=X` -> a Metric; `last epoch only` -> a Notice, once per parser (as a parser must)."""

    name = "silent-notice-test"
    description = "test parser: loss=X metrics and a Notice"

    def __init__(self, options=None) -> None:
        super().__init__(options)
        self.said = False

    def parse_line(self, text: str, number: int, wall_time: float):
        if "loss=" in text:
            step = int(text.split("step ")[1].split()[0])
            return [Metric("loss", float(text.rsplit("=", 1)[1]), step, "train", None, None, None, wall_time, number)]
        if "last epoch only" in text and not self.said:
            self.said = True
            return [Notice(CODE, MESSAGE, number, wall_time)]
        return None


@pytest.fixture
def notice_parser(monkeypatch):
    """`NoticeParser` registered for this test only (the registry is restored after it)."""
    monkeypatch.setattr(parsers, "_REGISTRY", dict(parsers._REGISTRY))
    register_parser(NoticeParser)
    return NoticeParser.name


def test_a_notice_is_said_once_and_listed_in_the_summary(tmp_path, notice_parser, capfd):
    (tmp_path / "train.py").write_text(PROGRAM)
    config = RunConfig(command=(sys.executable, "train.py"), process=ProcessConfig(cwd=str(tmp_path)),
                       parsing=ParsingConfig(parser=notice_parser, ranks="all"),
                       logging=LoggingConfig(quiet=False, summary=True),
                       run=RunDirConfig(id="r1", dir=str(tmp_path / "r")))
    with open(tmp_path / "out", "wb") as out, open(tmp_path / "err", "wb") as err:
        summary = Run(config, stdout_fd=out.fileno(), stderr_fd=err.fileno()).run()
    said = capfd.readouterr().err  # trainvisor's own stderr (the training's went to the files)
    assert summary.exit_code == 0 and summary.metrics == 10
    # rank 0's notice line is stdout line 11, the first of the two ranks' (lines 11 and 12).
    (notice,) = summary.notices
    assert (notice.code, notice.message, notice.line, notice.stream) == (CODE, MESSAGE, 11, "stdout")
    assert said.count(f"trainvisor: {MESSAGE} (stdout line 11)\n") == 1 and said.count(MESSAGE) == 1
    log = (tmp_path / "r" / "train.log").read_text()
    assert log.count(f"WARNING trainvisor: {MESSAGE} (stdout line 11)\n") == 1 and log.count(MESSAGE) == 1
    assert f"  NOTICE         {MESSAGE}" in format_summary(summary).splitlines()
    assert summary.warnings == ()
    records = [json.loads(x) for x in Path(summary.metrics_path).read_text().splitlines()]
    notices = [(r["code"], r["line"]) for r in records if r.get("event") == "notice"]
    assert notices == [(CODE, 11), (CODE, 12)]  # each rank's parser said it once; the file keeps both


def test_a_replay_of_the_saved_output_gives_the_same_notices_and_lists_one(tmp_path, notice_parser):
    (tmp_path / "train.py").write_text(PROGRAM)
    (tmp_path / "out.log").write_bytes(subprocess.run([sys.executable, "train.py"], cwd=tmp_path, check=True,
                                                      capture_output=True, timeout=60).stdout)
    counts = StatsSink()
    with open(tmp_path / "replayed.jsonl", "w") as fh:
        parser = build_parser(ParsingConfig(parser=notice_parser, ranks="all"), argv=(), year=2026)
        stats = replay(tmp_path / "out.log", parser, sinks=[JsonlSink(fh), counts])
    assert isinstance(stats, PipelineStats) and stats.lines == 14 and counts.metrics == 10
    records = [json.loads(x) for x in (tmp_path / "replayed.jsonl").read_text().splitlines()]
    assert [(r["code"], r["line"], r["stream"]) for r in records if r.get("event") == "notice"] == \
        [(CODE, 11, "log"), (CODE, 12, "log")]
    printed = format_replay_summary(stats, counts).splitlines()
    assert printed.count(f"  NOTICE         {MESSAGE}") == 1


class Told:
    def __init__(self) -> None:
        self.proven: list[str] = []

    def announce(self, path: str) -> None:
        self.proven.append(path)

    def watch_announced(self, path: str, *, directory: bool = False) -> None:
        pass


def test_a_notice_is_no_proof_that_an_announced_checkpoint_was_written():
    told = Told()
    sink = AnnouncementSink(told)
    # Lightning prints `saving model to '...ckpt'` before the save: only a later record proves it.
    sink.write([CheckpointEvent("ck/epoch=0.ckpt", "ckpt", None, 0.0, 5, 0.0)])
    sink.write([Notice(CODE, MESSAGE, 6, 0.0)])
    assert told.proven == []
    sink.write([Metric("loss", 0.5, 8, "train", None, None, None, 0.0, 7)])
    assert told.proven == ["ck/epoch=0.ckpt"]
