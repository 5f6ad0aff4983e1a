"""The sink host's parts on their own: the follower of a growing metrics.jsonl (whole lines only,
the records as `read_jsonl` rebuilds them, a limit, what is left) and the host process driven
over its stdin as a run drives it, on the metrics of a real log: every record written, or, with
no time left, the rest counted as dropped."""
from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import trainvisor
from trainvisor.sinks.host.follower import JsonlFollower
from trainvisor.sinks.host.wire import end_line, read_counts, start_line, HostStart
from trainvisor.sinks.jsonl import read_jsonl

from .conftest import ROOT, real_logs


def _metrics_file(tmp_path: Path) -> Path:
    path = tmp_path / "m.jsonl"
    trainvisor.replay(real_logs("caffe") / "bearpaw-fork-mnist.log", parser="caffe", year=2020, metrics=path,
                      keep_events=False)
    return path


def test_the_follower_reads_whole_lines_as_the_jsonl_reader_does(tmp_path):
    path = _metrics_file(tmp_path)
    data = path.read_bytes()
    growing = tmp_path / "g.jsonl"
    half = data.index(b"\n", len(data) // 2) + 5  # a torn last line: held until its rest comes
    growing.write_bytes(data[:half])
    f = JsonlFollower(str(growing), 0, chunk=4096)
    got = []
    while batch := f.read():
        got += batch
    assert f.offset == data.rindex(b"\n", 0, half) + 1
    with open(growing, "ab") as fh:
        fh.write(data[half:])
    while batch := f.read():
        got += batch
    want = read_jsonl(path)
    assert [e for e in got if isinstance(e, trainvisor.Metric)] == want and len(want) == 343
    assert f.offset == len(data) and f.bad == 0


def test_a_limit_stops_the_follower_and_what_is_left_is_counted(tmp_path):
    path = _metrics_file(tmp_path)
    data = path.read_bytes()
    limit = data.index(b"\n", 1000) + 1
    f = JsonlFollower(str(path), 0)
    first = f.read(limit)
    assert f.offset == limit and len(first) == data[:limit].count(b"\n")
    rest = data.count(b"\n") - len(first)
    assert f.records_in(data[limit:]) == rest  # what the host counts when it skips a stretch
    assert f.records_in(data[limit:-1]) == rest  # a last line without its newline is a record too
    assert f.records_in(b'{"event": "notice", "code": "x"}\n' + data[limit:]) == rest  # notices are not
    assert f.read(limit) == []
    f.close()


def _host(start: HostStart, end: bytes) -> tuple:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "trainvisor.sinks.host"], input=start_line(start) + end,
                          capture_output=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()[-1500:]
    (line,) = proc.stdout.splitlines()
    return read_counts(line), proc.stderr.decode()


def test_the_host_writes_every_record_from_its_offset_and_reports_the_counts(tmp_path):
    path = _metrics_file(tmp_path)
    data = path.read_bytes()
    offset = data.index(b"\n", len(data) // 3) + 1  # a rerun's offset: the records before it are not its
    start = HostStart(path=str(path), offset=offset, sinks=(("csv", {"dir": str(tmp_path / "csv")}),))
    (counts,), err = _host(start, end_line(len(data), 60))
    n = data[offset:].count(b"\n")
    assert (counts.name, counts.written, counts.dropped, counts.failed, counts.abandoned) == ("csv", n, 0, 0, False)
    rows = sum(len(p.read_text().splitlines()) - 1 for p in (tmp_path / "csv").glob("*.csv"))
    assert 0 < rows < 101 + 21


def test_a_host_behind_the_file_drops_what_its_queue_cannot_hold_and_counts_every_record(tmp_path):
    one = _metrics_file(tmp_path).read_bytes()
    path = tmp_path / "long.jsonl"  # 200 runs' worth, the end already known: a flood it cannot keep up with
    path.write_bytes(one * 200)
    total = one.count(b"\n") * 200
    start = HostStart(path=str(path), offset=0, sinks=(("csv", {"dir": str(tmp_path / "csv")}),), queue=500)
    (counts,), err = _host(start, end_line(path.stat().st_size, 60))
    assert 0 < counts.dropped < total and counts.written + counts.dropped == total and not counts.abandoned
    rows = sum(len(p.read_text().splitlines()) - 1 for p in (tmp_path / "csv").glob("*.csv"))
    assert 0 < rows < total


def test_with_no_time_left_the_host_counts_what_its_sinks_held_as_dropped_and_still_reports(tmp_path):
    one = _metrics_file(tmp_path).read_bytes()
    path = tmp_path / "long.jsonl"
    path.write_bytes(one * 200)
    total = one.count(b"\n") * 200
    start = HostStart(path=str(path), offset=0, sinks=(("csv", {"dir": str(tmp_path / "csv")}),))
    (counts,), err = _host(start, end_line(path.stat().st_size, 0))
    assert counts.written + counts.dropped == total and counts.dropped > 0
    if counts.abandoned:  # the sink still held records when the (zero) wait ran out
        assert re.search(r"sink csv is still busy at the end of the run \(close timeout 0s\): abandoned, \d+", err)


def test_a_sink_that_cannot_be_made_in_the_host_fails_alone(tmp_path):
    path = _metrics_file(tmp_path)
    data = path.read_bytes()
    start = HostStart(path=str(path), offset=0, sinks=(("csv", {}), ("caffe-csv", {"outdir": str(tmp_path / "t")})))
    (bad, good), err = _host(start, end_line(len(data), 60))
    assert (bad.written, bad.failed) == (0, data.count(b"\n")) and "cannot be made in the sink host" in err
    assert (good.written, good.failed) == (data.count(b"\n"), 0)
    assert (tmp_path / "t" / "train.train").exists()


def test_which_sinks_the_host_runs_follows_sinks_host():
    from trainvisor.config import SinksConfig
    from trainvisor.sinks import jsonl
    from trainvisor.sinks.host import hosted_names

    use = ("prometheus", "tensorboard", "my-sink", "csv")
    built = jsonl._c_format is not None and jsonl._FAST
    assert hosted_names(SinksConfig(use=use)) == (("tensorboard", "csv") if built else ())  # auto
    assert hosted_names(SinksConfig(use=use, host="on")) == ("tensorboard", "csv")
    assert hosted_names(SinksConfig(use=use, host="off")) == ()
    assert hosted_names(SinksConfig(use=("prometheus", "jsonl"), host="on")) == ()  # they stay in the run


@pytest.mark.parametrize("given, shown", [("off", "off"), ("on", "on"), ("auto", "auto")])
def test_the_flag_and_the_file_set_sinks_host(tmp_path, given, shown):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINVISOR")}
    env["PYTHONPATH"] = str(ROOT)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"sinks:\n  host: {given}\n")  # YAML reads on/off as booleans: the word is meant
    for argv in (["--config", str(cfg)], ["--sink-host", given]):
        proc = subprocess.run([sys.executable, "-m", "trainvisor", "config", "show", *argv, "--", "echo"],
                              capture_output=True, text=True, env=env, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert yaml.safe_load(proc.stdout)["sinks"]["host"] == shown


def test_a_bad_sinks_host_is_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINVISOR")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-m", "trainvisor", "config", "show", "--sink-host", "maybe", "--", "echo"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "sinks.host" in proc.stderr, proc.stderr


def test_the_cpu_governor_holds_the_host_to_its_share_and_a_burst_is_paid_back_by_waiting():
    from trainvisor.sinks.host.main import CpuGovernor

    wall, cpu = [100.0], [7.0]
    gov = CpuGovernor(0.25, window=1.0, clock=lambda: wall[0], cpu=lambda: cpu[0])
    cpu[0] += 0.125
    wall[0] += 0.5
    assert gov.pace() == 0.0  # 0.125 s of CPU from a full bucket of 0.25: 0.125 left
    cpu[0] += 0.5  # a sink wrote a full queue: 0.5 s of CPU in no time
    assert gov.pace() == pytest.approx(0.375 / 0.25)  # 0.375 s in debt: 1.5 s to refill at 0.25 a second
    wall[0] += 1.5
    assert gov.pace() == pytest.approx(0.0)  # paid back
    wall[0] += 3600  # an hour of quiet fills the bucket to one window's worth, no more
    cpu[0] += 0.25
    assert gov.pace() == pytest.approx(0.0)  # 0.25 used of 0.25: empty, not in debt
    cpu[0] += 0.25
    assert gov.pace() == pytest.approx(1.0)  # the hour banked nothing beyond the window
    assert CpuGovernor(1.0, clock=lambda: wall[0], cpu=lambda: cpu[0]).pace() == 0.0  # share 1: never paced

def test_the_hosts_log_records_cross_as_one_line_each_tracebacks_included(tmp_path):
    from trainvisor.sinks.host.wire import read_log

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "trainvisor.sinks.host"], input=b"not a start\n",
                          capture_output=True, env=env, timeout=120)
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()  # one record, one line: nothing else printed
    got = read_log(line)
    assert got is not None and got.level == logging.ERROR and got.traceback is None
    assert got.message.startswith("sink host: a bad start line: ")
    # a sink that fails in the host: its record carries the traceback's text beside the message
    path = _metrics_file(tmp_path)
    start = HostStart(path=str(path), offset=0, sinks=(("csv", {"dir": str(tmp_path / "csv")}),))
    (tmp_path / "csv" / "train.csv").mkdir(parents=True)  # a folder where the train table goes: its writes fail
    proc = subprocess.run([sys.executable, "-m", "trainvisor.sinks.host"], capture_output=True, env=env, timeout=120,
                          input=start_line(start) + end_line(path.stat().st_size, 60))
    records = [read_log(x) for x in proc.stderr.splitlines()]
    assert records and None not in records
    failed = [r for r in records if r.level == logging.ERROR]
    assert failed and failed[0].message.startswith("sink csv failed: IsADirectoryError")
    assert failed[0].traceback.startswith("Traceback (most recent call last):") and "\n" in failed[0].traceback
    assert read_log(b"Traceback (most recent call last):") is None  # an interpreter's own lines are not records


def test_a_counted_middle_has_the_records_a_read_would_have_counted(tmp_path, monkeypatch):
    """What the host passes over unread at the end (a flood's middle) is counted in large blocks
    cut at whole lines: the same count as `records_in` of the same bytes, notices left out, and
    none lost or doubled where a block ends (small blocks here: a notice on every block edge)."""
    from trainvisor.sinks.host import follower as follower_module

    one = _metrics_file(tmp_path).read_bytes()
    lines = one.splitlines(keepends=True)
    notice = b'{"event": "notice", "code": "x", "message": "m"}\n'
    data = b"".join(line + (notice if i % 7 == 0 else b"") for i, line in enumerate(lines * 3))
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(data)
    monkeypatch.setattr(follower_module, "COUNT_BLOCK", 1000)
    f = JsonlFollower(str(path), 0)
    starts = [0] + [i + 1 for i, b in enumerate(data) if b == 0x0A]
    spans = [(0, len(data)), (starts[5], starts[-40]), (starts[1], starts[2]), (starts[9], starts[9])]
    c_count = follower_module._c_count
    monkeypatch.setattr(follower_module, "_c_count", None)  # the Python loop, in 1000-byte blocks
    for start, stop in spans:
        assert f.count_records(start, stop) == f.records_in(data[start:stop])
    assert f.count_records(0, len(data)) == len(lines) * 3  # every metric, no notice
    # line_start: the first line start at or after a position
    assert f.line_start(starts[3]) == starts[3] and f.line_start(starts[3] + 1) == starts[4]
    assert f.line_start(len(data) - 1) == len(data)
    f.offset = starts[2]  # pass_over: from where the follower is to a line start, unread
    assert f.pass_over(starts[10] + 3) == (starts[2], starts[11]) and f.offset == starts[11]
    f.close()
    if c_count is None:
        pytest.skip("the C extensions are not built (python setup.py build_ext --inplace): the C count untested")
    monkeypatch.setattr(follower_module, "_c_count", c_count)  # the C count, in its 4 MiB blocks
    f = JsonlFollower(str(path), 0)
    for start, stop in spans:
        assert f.count_records(start, stop) == f.records_in(data[start:stop])
    f.close()
    big = tmp_path / "big.jsonl"  # several of the C count's blocks
    copies = (9 << 20) // len(data) + 1
    big.write_bytes(data * copies)
    g = JsonlFollower(str(big), 0)
    assert g.count_records(0, big.stat().st_size) == len(lines) * 3 * copies
    g.close()

