"""The peers' stress scenarios, project-written: workers that each build their own handler on
one file (concurrent-log-handler's set-up), a rotation that fails, a writer SIGKILLed while
8 processes log, and a dictConfig written for RotatingFileHandler."""
from __future__ import annotations

import json
import logging
import logging.config
import logging.handlers
import multiprocessing
import os
import signal
import time
from pathlib import Path

import multiprocessing.forkserver
import multiprocessing.resource_tracker

import psutil
import pytest

from . import logging_peer_workers as peers
from .logging_workers import message
from .logcheck import log_files, parse_records, read_log
from trainvisor.logging import LogWriterError, MultiProcessingLogHandler
from trainvisor.logging import ava


@pytest.fixture(scope="module", autouse=True)
def no_processes_left_behind():
    yield
    multiprocessing.forkserver._forkserver._stop()
    multiprocessing.resource_tracker._resource_tracker._stop()
    assert psutil.Process().children(recursive=True) == []


def _run_independent(tmp_path, method, processes, count, max_bytes, backup_count):
    ctx = multiprocessing.get_context(method)
    path, sockets = tmp_path / "stress.log", tmp_path / "sockets"
    sockets.mkdir()
    barrier = ctx.Barrier(processes)
    tags = [f"p{i}" for i in range(processes)]
    procs = [ctx.Process(target=peers.independent_worker,
                         args=(str(path), tag, count, max_bytes, backup_count, str(sockets), barrier))
             for tag in tags]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * processes
    # every writer closed cleanly: no socket directory, no lock file left
    assert list(sockets.iterdir()) == [] and not (tmp_path / ".stress.log.lock").exists()
    return path, tags


def _records(text: str) -> list[str]:
    """A file's records, whole (a record is its head line and its indented continuation lines)."""
    out: list[str] = []
    for line in text.splitlines(keepends=True):
        if line.startswith("  ") and out:
            out[-1] += line
        else:
            out.append(line)
    return out


def _assert_rotated_only_when_needed(path: Path, max_bytes: int) -> int:
    """Each finished file is within max_bytes (or is one oversized record), and was rotated
    only because the next record would not fit: the rollovers are exactly the expected ones.
    Returns the number of rollovers the files show."""
    files = log_files(path)
    for older, newer in zip(files, files[1:]):
        older_records = _records(older.read_text())
        assert older.stat().st_size <= max_bytes or len(older_records) == 1, f"{older.name} overfull"
        first = _records(newer.read_text())[0]
        assert older.stat().st_size + len(first.encode()) > max_bytes, f"{older.name} rotated early"
    return len(files) - 1


def _assert_every_record_once_in_order(text: str, tags: list[str], count: int) -> None:
    seqs = parse_records(text)  # raises at a torn or interleaved record
    assert sorted(seqs) == sorted(tags)
    for tag in tags:
        assert seqs[tag] == list(range(count)), f"{tag}: records missing, doubled or out of order"


@pytest.mark.parametrize("method, processes, count, max_bytes", [
    ("fork", 32, 300, 8 * 1024),          # many processes x few records
    ("spawn", 3, 12_000, 128 * 1024),     # few processes x many records, unrelated interpreters
], ids=["many-processes", "many-records"])
def test_independently_created_handlers_elect_one_writer_and_lose_nothing(tmp_path, capfd, method, processes,
                                                                            count, max_bytes):
    path, tags = _run_independent(tmp_path, method, processes, count, max_bytes, 100_000)
    rollovers = _assert_rotated_only_when_needed(path, max_bytes)
    total = path.stat().st_size + sum(p.stat().st_size for p in log_files(path)[:-1])
    assert rollovers >= total // max_bytes - 1 >= 10
    _assert_every_record_once_in_order(read_log(path), tags, count)
    assert capfd.readouterr().err == ""  # no warning, no record fell back to stderr


def test_tiny_max_bytes_gives_every_record_a_file_of_its_own(tmp_path, capfd):
    path, tags = _run_independent(tmp_path, "fork", 4, 75, 16, 100_000)
    files = log_files(path)
    assert len(files) == 4 * 75  # 299 rollovers: one before every record but the first
    assert all(len(_records(p.read_text())) == 1 for p in files)
    _assert_every_record_once_in_order(read_log(path), tags, 75)
    assert capfd.readouterr().err == ""


def test_backup_count_3_drops_the_oldest_and_keeps_the_rest_intact(tmp_path, capfd):
    path, tags = _run_independent(tmp_path, "fork", 6, 2_000, 16 * 1024, 3)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == [
        "stress.log", "stress.log.1", "stress.log.2", "stress.log.3"]
    _assert_rotated_only_when_needed(path, 16 * 1024)
    seqs = parse_records(read_log(path))
    for tag in tags:  # what is kept of each process is an unbroken run up to its last record
        kept = seqs.get(tag, [])
        assert kept == list(range(2_000 - len(kept), 2_000))
    assert 0 < sum(map(len, seqs.values())) < 6 * 2_000
    assert capfd.readouterr().err == ""


def test_a_failed_rotation_keeps_the_file_and_rotation_resumes_once_the_obstacle_is_gone(tmp_path, capfd):
    (tmp_path / "x.log.2" / "d").mkdir(parents=True)  # the reproduction
    h = MultiProcessingLogHandler(os.path.abspath(tmp_path / "x.log"), "a", 100, 2)
    h.setFormatter(logging.Formatter("%(message)s"))
    records = [f"{i:02d} {'r' * 61}" for i in range(16)]  # 65 bytes with the newline
    for text in records[:8]:
        h.emit(logging.makeLogRecord({"msg": text}))
    h.flush()
    assert (tmp_path / "x.log.1").read_text() == records[0] + "\n"
    assert (tmp_path / "x.log").read_text() == "".join(r + "\n" for r in records[1:8])  # alive
    assert h.server.file.failed_rotations >= 2  # retried at each threshold, not before every record
    (tmp_path / "x.log.2" / "d").rmdir()
    (tmp_path / "x.log.2").rmdir()
    for text in records[8:]:
        h.emit(logging.makeLogRecord({"msg": text}))
    h.close()  # never raises
    assert (tmp_path / "x.log.2").is_file() and h.server.rotations >= 3
    kept = "".join((tmp_path / n).read_text() for n in ["x.log.2", "x.log.1", "x.log"])
    assert kept == "".join(r + "\n" for r in records[records.index(kept[:64]):])
    assert (tmp_path / "x.log").read_text() == records[-1] + "\n"
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "cannot rotate" in err and "x.log" in err  # one warning, no EBADF


def _bytes_in(folder: Path, name: str) -> int:
    """The size of a log and its backups, while the writer rotates them."""
    total = 0
    for entry in os.scandir(folder):
        if entry.name.startswith(name):
            try:
                total += entry.stat().st_size
            except FileNotFoundError:  # renamed between listing and stat
                pass
    return total


def _kill_writer_while_8_log(tmp_path: Path, count: int, max_bytes: int, kill_at_bytes: int) -> dict:
    """8 processes, each with its own handler, log `count` records each; the writer (a ninth
    process that logs nothing) is SIGKILLed once `kill_at_bytes` are in the files. Asserts every
    record is in the kept files exactly once and in each process's order; returns the figures."""
    ctx = multiprocessing.get_context("fork")
    path, sockets = tmp_path / "train.log", tmp_path / "sockets"
    sockets.mkdir()
    backups = 100_000  # every record kept
    ready = ctx.Event()
    writer = ctx.Process(target=peers.writer_only, args=(str(path), max_bytes, backups, str(sockets), ready))
    writer.start()
    assert ready.wait(30)
    reports = [tmp_path / f"report{i}.json" for i in range(8)]
    procs = [ctx.Process(target=peers.timed_worker,
                         args=(str(path), f"k{i}", count, max_bytes, backups, str(sockets), str(reports[i])))
             for i in range(8)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _bytes_in(tmp_path, "train.log") < kill_at_bytes:
        time.sleep(0.002)
    os.kill(writer.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    writer.join(10)
    for p in procs:
        p.join(120)
    assert writer.exitcode == -signal.SIGKILL and [p.exitcode for p in procs] == [0] * 8
    facts = [json.loads(r.read_text()) for r in reports]
    seqs = parse_records(read_log(path))  # raises at a torn or interleaved record
    for i in range(8):
        # every record whose emit() returned is there, once, in order: a record the dead writer
        # wrote but had not acked was re-sent, and its successor knew from the ledger to skip it
        assert seqs[f"k{i}"] == list(range(count)), f"k{i}: records missing, doubled or out of order"
    files = log_files(path)
    assert all(p.stat().st_size <= max_bytes for p in files[:-1])
    assert [p.name for p in sockets.iterdir()] == [], "the dead writer's socket directory was not removed"
    return {"resent": sum(f["resent"] for f in facts), "files": len(files),
            "longest_emit": max(f["longest_emit"] for f in facts),
            "after_kill": max(f["finished"] for f in facts) - killed_at}


def test_writer_sigkilled_while_8_processes_log_loses_no_record_they_emitted(tmp_path):
    # ~8 MB in all, rotated at 1 MB; the kill lands about a third of the way in
    got = _kill_writer_while_8_log(tmp_path, 20_000, 1 << 20, 2_600_000)
    print(f"\nwriter SIGKILLed: {got['resent']} records re-sent; longest emit {got['longest_emit']:.3f} s; "
          f"loggers done {got['after_kill']:.1f} s after the kill")
    assert got["resent"] > 0  # the kill hit records in flight, and they were re-sent
    assert got["longest_emit"] < 5.0


def test_writer_sigkilled_amid_rotations_10_times_keeps_every_record_once(tmp_path):
    """The bad-day case: 8 x 5,000 records, maxBytes=4096 (a rotation every ~60 records, ~700
    files), the writer SIGKILLed at a different point of each of 10 runs: with a rotation that
    often, the kill lands mid-write and mid-rotation in some of them."""
    resent = []
    for run in range(10):
        where = tmp_path / f"run{run}"
        where.mkdir()
        got = _kill_writer_while_8_log(where, 5_000, 4096, 250_000 + run * 150_000)
        assert got["files"] > 300
        resent.append(got["resent"])
    print(f"\n10 kills amid rotations: re-sent {resent}")
    assert sum(1 for r in resent if r > 0) >= 5  # most kills caught records in flight


DICT_CONFIG = {
    "version": 1,
    "disable_existing_loggers": False,  # the other tests' loggers stay as they are
    "formatters": {"plain": {"format": "%(levelname)s %(message)s"}},
    "handlers": {"file": {"class": "logging.handlers.RotatingFileHandler", "formatter": "plain",
                          "filename": "", "mode": "a", "maxBytes": 120, "backupCount": 3,
                          "encoding": "utf-8", "delay": True, "errors": "strict"}},
    "loggers": {"dictconfig": {"handlers": ["file"], "level": "INFO", "propagate": False}},
}


def _log_with(config: dict, path: Path) -> None:
    handler_cfg = {**config["handlers"]["file"], "filename": str(path)}
    logging.config.dictConfig({**config, "handlers": {"file": handler_cfg}})
    log = logging.getLogger("dictconfig")
    for i in range(12):
        log.info("record %d: température %s", i, "é" * i)
    for h in log.handlers[:]:
        log.removeHandler(h)
        h.close()


def test_a_dict_config_for_rotating_file_handler_works_with_only_the_class_changed(tmp_path):
    (tmp_path / "std").mkdir()
    (tmp_path / "ours").mkdir()
    _log_with(DICT_CONFIG, tmp_path / "std" / "app.log")
    ours = json.loads(json.dumps(DICT_CONFIG))
    ours["handlers"]["file"]["class"] = "trainvisor.logging.MultiProcessingLogHandler"
    _log_with(ours, tmp_path / "ours" / "app.log")
    std = {p.name: p.read_bytes() for p in (tmp_path / "std").iterdir()}
    assert sorted(std) == ["app.log", "app.log.1", "app.log.2", "app.log.3"]
    assert {p.name: p.read_bytes() for p in (tmp_path / "ours").iterdir()} == std


def test_signature_defaults_delay_and_the_ava_positional_form(tmp_path):
    path = tmp_path / "a.log"
    path.write_text("earlier run\n")
    h = MultiProcessingLogHandler(path, delay=True)  # RotatingFileHandler's defaults: append
    assert (h.mode, h.maxBytes, h.backupCount, h.address) == ("a", 0, 0, None)
    h.emit(logging.makeLogRecord({"msg": "appended"}))
    h.close()
    assert path.read_text() == "earlier run\nappended\n"
    a = ava.MultiProcessingLogHandler(path)  # AVA's defaults: mode 'w', 10 backups
    assert (a.mode, a.maxBytes, a.backupCount) == ("w", 0, 10)
    a.emit(logging.makeLogRecord({"msg": "fresh"}))
    a.close()
    assert path.read_text() == "fresh\n"
    r = ava.MultiProcessingLogHandler(str(path), "w", 10, 2)  # AVA's positional form, rotating: appends
    r.emit(logging.makeLogRecord({"msg": "rotated in"}))
    r.close()
    assert (tmp_path / "a.log.1").read_text() == "fresh\n" and path.read_text() == "rotated in\n"
    with pytest.raises(LogWriterError, match="mode must be 'a' or 'w'"):
        MultiProcessingLogHandler(path, "r+")


def test_a_second_writer_for_a_file_with_a_live_writer_is_refused(tmp_path):
    from trainvisor.logging import LogWriterServer

    with LogWriterServer.start(tmp_path / "run.log"):
        with pytest.raises(LogWriterError, match="already has a log writer"):
            LogWriterServer.start(tmp_path / "run.log")
        h = MultiProcessingLogHandler(tmp_path / "run.log")  # a handler joins it instead
        assert h.server is None
        h.emit(logging.makeLogRecord({"msg": "joined"}))
        h.close()
    assert (tmp_path / "run.log").read_text() == "joined\n"


def test_a_handler_that_knows_the_file_takes_over_when_the_writer_closes(tmp_path, capfd):
    first = MultiProcessingLogHandler(tmp_path / "t.log", "a", 1000, 5, socket_dir=tmp_path)
    second = MultiProcessingLogHandler(tmp_path / "t.log", "w", 1000, 5, socket_dir=tmp_path)
    assert first.server is not None and second.server is None
    second.emit(logging.makeLogRecord({"msg": "to the first writer"}))
    first.close()
    assert not (tmp_path / ".t.log.lock").exists()
    second.emit(logging.makeLogRecord({"msg": "to the successor"}))
    assert second.server is not None and second.address != first.address
    # the lock file's first line names the writer (its ledger follows, past the line)
    assert (tmp_path / ".t.log.lock").read_bytes().split(b"\n")[0] == second.address.encode()
    second.close()
    # the successor appended ('w' is for a file without a writer, never for a takeover)
    assert (tmp_path / "t.log").read_text() == "to the first writer\nto the successor\n"
    assert capfd.readouterr().err == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.log"]


def test_two_spellings_of_one_file_share_one_writer(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    a = MultiProcessingLogHandler(tmp_path / "real" / "x.log")
    b = MultiProcessingLogHandler(tmp_path / "alias" / ".." / "alias" / "x.log")
    assert a.server is not None and b.server is None and b.address == a.address
    b.emit(logging.makeLogRecord({"msg": "via the alias"}))
    b.close()
    a.close()
    assert (tmp_path / "real" / "x.log").read_text() == "via the alias\n"


def test_a_client_given_only_the_address_takes_over_a_killed_writer(tmp_path, capfd):
    ctx = multiprocessing.get_context("fork")
    path, sockets = tmp_path / "run.log", tmp_path / "sockets"
    sockets.mkdir()
    addresses = ctx.Queue()
    writer = ctx.Process(target=peers.server_only, args=(str(path), 400, 3, str(sockets), addresses))
    writer.start()
    address = addresses.get(timeout=30)
    h = MultiProcessingLogHandler.connect(address, formatter=logging.Formatter("%(message)s"))
    assert h.server is None and h.connection.target is not None
    log = logging.getLogger(f"peers.connect.{id(h)}")
    log.propagate = False
    log.setLevel(logging.INFO)
    log.addHandler(h)
    for seq in range(20):
        log.info(message("c", seq))
    h.flush()
    os.kill(writer.pid, signal.SIGKILL)
    writer.join(10)
    for seq in range(20, 60):
        log.info(message("c", seq))
    # this process became the writer, with the dead writer's rotation settings
    assert h.server is not None and h.address != address
    assert (h.server.file.max_bytes, h.server.file.backup_count) == (400, 3)
    h.close()
    addresses.close()
    addresses.join_thread()
    assert capfd.readouterr().err == ""  # no "unreachable", nothing on stderr
    files = log_files(path)
    assert len(files) == 4 and all(p.stat().st_size <= 400 for p in files[:-1])  # rotated, 3 kept
    got = parse_records(read_log(path))["c"]
    assert got == list(range(got[0], 60))  # the newest records, whole and in order, none lost
    assert [p.name for p in sockets.iterdir()] == [], "the dead writer's socket directory was not removed"
