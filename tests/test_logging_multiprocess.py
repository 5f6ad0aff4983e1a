"""trainvisor.logging under real processes: every start method, pools, abrupt exits, and a
writer that is killed while others log."""
from __future__ import annotations

import concurrent.futures
import json
import logging
import multiprocessing
import os
import subprocess
import sys
import threading
from pathlib import Path

import multiprocessing.forkserver
import multiprocessing.resource_tracker

import psutil
import pytest

from . import logging_workers as workers
from .logcheck import assert_complete, log_files, parse_records, read_log
from trainvisor.logging import ENV_VAR, LogWriterServer, MultiProcessingLogHandler

PROCESSES = 8
RECORDS = 20_000
MAX_BYTES = 256 * 1024  # ~10 MB of records: about 40 rotations per run
TESTS_DIR = Path(__file__).resolve().parent


@pytest.fixture(scope="module", autouse=True)
def no_processes_left_behind():
    """The forkserver and resource tracker that spawn/forkserver start outlive their users;
    stop them (private but stable stdlib calls) and check nothing else of ours survives."""
    yield
    multiprocessing.forkserver._forkserver._stop()
    multiprocessing.resource_tracker._resource_tracker._stop()
    assert psutil.Process().children(recursive=True) == []


@pytest.fixture
def handler(tmp_path):
    h = MultiProcessingLogHandler(tmp_path / "train.log", maxBytes=MAX_BYTES, backupCount=10_000)
    h.setFormatter(logging.Formatter("%(message)s"))
    log = workers.test_logger(h)
    yield h
    log.removeHandler(h)
    h.close()
    assert not os.path.exists(h.server.directory), "socket directory left behind"
    assert not [t for t in threading.enumerate() if t.name == "trainvisor-log-writer"], "writer thread leaked"
    assert ENV_VAR not in os.environ or os.environ[ENV_VAR] != h.address


def _check_rotated_run(handler, tags, count):
    path = Path(handler.filename)
    handler.close()  # drains every connection before we read
    assert handler.server.rotations >= 20, f"only {handler.server.rotations} rotations"
    assert all(p.stat().st_size <= MAX_BYTES for p in log_files(path))
    assert_complete(parse_records(read_log(path)), tags, count)


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_8_processes_x_20000_records_arrive_whole_and_in_order_across_rotations(handler, method):
    ctx = multiprocessing.get_context(method)
    tags = [f"{method}{i}" for i in range(PROCESSES)]
    # forked children inherit the handler; spawn/forkserver children get it pickled (a client)
    extra = () if method == "fork" else (handler,)
    procs = [ctx.Process(target=workers.log_records, args=(tag, RECORDS, *extra)) for tag in tags]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * PROCESSES
    _check_rotated_run(handler, tags, RECORDS)


def test_fork_pool_workers_log_whole_ordered_records(handler):
    tags = [f"pool{i}" for i in range(PROCESSES)]
    with multiprocessing.get_context("fork").Pool(4) as pool:
        assert sorted(pool.map(workers.log_task, [(t, RECORDS) for t in tags])) == sorted(tags)
    _check_rotated_run(handler, tags, RECORDS)


def test_spawn_pool_workers_attach_through_the_environment_variable(handler):
    assert os.environ[ENV_VAR] == handler.address
    tags = [f"spool{i}" for i in range(4)]
    with multiprocessing.get_context("spawn").Pool(2, initializer=workers.attach_test_logger) as pool:
        pool.map(workers.log_task, [(t, 5_000) for t in tags])
    handler.close()
    assert_complete(parse_records(read_log(Path(handler.filename))), tags, 5_000)


def test_forkserver_process_pool_executor_workers_attach_by_address(handler):
    tags = [f"exec{i}" for i in range(4)]
    ctx = multiprocessing.get_context("forkserver")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx, initializer=workers.attach_test_logger,
                                                initargs=(handler.address,)) as ex:
        list(ex.map(workers.log_task, [(t, 5_000) for t in tags]))
    handler.close()
    assert_complete(parse_records(read_log(Path(handler.filename))), tags, 5_000)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_records_logged_right_before_sys_exit_or_uncaught_exception_are_not_lost(handler, method):
    ctx = multiprocessing.get_context(method)
    extra = () if method == "fork" else (handler,)
    cases = {"exit": ("sys.exit", 3), "raise": ("raise", 1), "osexit": ("os._exit", 4)}
    procs = {name: ctx.Process(target=workers.log_then_exit, args=(name, 2_000, how, *extra))
             for name, (how, _) in cases.items()}
    for p in procs.values():
        p.start()
    for p in procs.values():
        p.join(60)
    assert {n: p.exitcode for n, p in procs.items()} == {n: code for n, (_, code) in cases.items()}
    handler.close()
    text = read_log(Path(handler.filename))
    assert_complete(parse_records(text), list(cases), 2_000)
    for name in cases:
        block = text.split(f"E {name} failed\n", 1)[1].split("\n")
        assert block[0] == "Traceback (most recent call last):"
        end = block.index(f"ValueError: payload {name}")
        assert all(line.startswith("  ") for line in block[1:end]), f"traceback of {name} torn"
        assert any('raise ValueError(f"payload {tag}")' in line for line in block[1:end])


def test_unrelated_subprocess_attaches_via_env_and_its_uncaught_traceback_is_logged(tmp_path):
    log = tmp_path / "run" / "train.log"
    with LogWriterServer.start(log, maxBytes=64 * 1024, backupCount=100) as server:
        env = {**os.environ, **server.env, "PYTHONPATH": str(TESTS_DIR)}
        proc = subprocess.run([sys.executable, str(TESTS_DIR / "logging_workers.py"), "attached", "3000", "raise"],
                              env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 1
        assert "RuntimeError: uncaught in attached program" in proc.stderr  # Python still prints it
    assert not os.path.exists(server.address)
    text = read_log(log)
    assert_complete(parse_records(text), ["attached"], 3000)
    uncaught = text.split("uncaught exception, process", 1)[1].split("\n")
    assert uncaught[1] == "Traceback (most recent call last):"
    assert "RuntimeError: uncaught in attached program" in uncaught


def test_spawn_child_re_creating_the_handler_joins_the_parents_writer(handler):
    p = multiprocessing.get_context("spawn").Process(target=workers.reopen_same_file, args=(handler.filename,))
    p.start()
    p.join(60)
    assert p.exitcode == 0, "the child started a second writer for the same file"
    handler.close()
    assert_complete(parse_records(read_log(Path(handler.filename))), ["reopened"], 1)


def test_threads_of_one_process_interleave_whole_records(handler):
    tags = [f"thread{i}" for i in range(4)]
    threads = [threading.Thread(target=workers.log_records, args=(t, 5_000)) for t in tags]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    handler.close()
    assert_complete(parse_records(read_log(Path(handler.filename))), tags, 5_000)


def test_owner_keeps_its_writer_until_non_daemon_children_have_logged(tmp_path):
    log = tmp_path / "train.log"
    # multiprocessing's exit hook (which joins children) registered before logging's
    # shutdown hook runs after it: the order in which the writer would close too early
    code = f"import multiprocessing.util, logging_workers; logging_workers.outlived({str(log)!r})"
    subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(TESTS_DIR)},
                   check=True, timeout=60)
    assert_complete(parse_records(log.read_text()), ["owner", "late"], 1)


def test_loggers_finish_promptly_and_fall_back_to_stderr_when_the_writer_is_killed(tmp_path):
    log, out = tmp_path / "train.log", tmp_path / "report.json"
    n = 4
    proc = subprocess.run([sys.executable, str(TESTS_DIR / "logging_workers.py"), "family", str(log), str(out), str(n)],
                          env={**os.environ, "PYTHONPATH": str(TESTS_DIR)}, capture_output=True, text=True,
                          timeout=90)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    codes = {int(pid): code for pid, code in report["exit_codes"].items()}
    assert codes.pop(report["owner_pid"]) == -9
    assert list(codes.values()) == [0] * n, f"loggers did not all finish: {codes}"
    assert report["seconds"] < 10
    before = parse_records(log.read_text())
    assert len(before) == n and all(seqs == list(range(len(seqs))) for seqs in before.values())
    for i in range(n):
        err = (tmp_path / f"child{i}.err").read_text()
        assert err.count("unreachable") == 1, err[:500]
        after = parse_records(err.split("logs to stderr from now on\n", 1)[1])
        # from the first failed send on, every record is on stderr, in order; records the
        # dead writer had not yet read from its socket died with it
        first = after[f"c{i}"][0]
        assert first >= len(before[f"c{i}"])
        assert after[f"c{i}"] == list(range(first, first + len(after[f"c{i}"])))
        # they kept logging once the writer was gone (the first of the 500 records that
        # follow the flag may have been sent just before the kill)
        assert len(after[f"c{i}"]) >= 499
