"""trainvisor.logging pieces in one process: framing, rotation, fork hygiene, fallbacks, set-up."""
from __future__ import annotations

import logging
import os
import pickle
import socket
import sys
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainvisor.logging import (
    ENV_VAR,
    LogWriterError,
    LogWriterServer,
    MultiProcessingLogHandler,
    RotatingFile,
    attach,
    initialize_logger,
)
from trainvisor.logging.target import LogTarget, read_target, write_target
from trainvisor.logging.protocol import MAX_RECORD_BYTES, FrameDecoder, ProtocolError, encode_frame
from .test_process_tree import wait_for


@given(st.lists(st.text(max_size=300), max_size=30), st.lists(st.integers(1, 700), min_size=1, max_size=10))
@settings(max_examples=200, deadline=None)
def test_frames_reassemble_whatever_the_read_boundaries(texts, cuts):
    stream = b"".join(encode_frame(t + "\n") for t in texts)
    decoder, out, pos, i = FrameDecoder(), [], 0, 0
    while pos < len(stream):
        step = cuts[i % len(cuts)]
        out += decoder.feed(stream[pos : pos + step])
        pos, i = pos + step, i + 1
    assert [p.decode() for p in out] == [t + "\n" for t in texts]
    assert decoder.pending == 0


def test_oversized_frame_is_a_protocol_error_not_a_memory_blowup():
    with pytest.raises(ProtocolError):
        FrameDecoder().feed((MAX_RECORD_BYTES + 1).to_bytes(4, "little") + b"x")


def test_giant_record_is_cut_with_a_marker_and_still_ends_the_line():
    frame = encode_frame("y" * (MAX_RECORD_BYTES + 10))
    (payload,) = FrameDecoder().feed(frame)
    assert len(payload) == MAX_RECORD_BYTES and payload.endswith(b"[record truncated by trainvisor.logging]\n")


def test_rotation_keeps_files_under_max_bytes_and_drops_the_oldest_beyond_backup_count(tmp_path):
    f = RotatingFile(tmp_path / "a.log", max_bytes=100, backup_count=3)
    lock = threading.Lock()
    records = [f"{i:03d} {'z' * 40}\n".encode() for i in range(20)]  # 45 bytes: 2 per file
    f.write_records(records, lock)
    f.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["a.log", "a.log.1", "a.log.2", "a.log.3"]
    kept = b"".join((tmp_path / n).read_bytes() for n in ["a.log.3", "a.log.2", "a.log.1", "a.log"])
    assert kept == b"".join(records[-8:])
    assert all((tmp_path / n).stat().st_size <= 100 for n in names)


def test_record_larger_than_max_bytes_gets_a_file_of_its_own(tmp_path):
    f = RotatingFile(tmp_path / "a.log", max_bytes=10, backup_count=5)
    f.write_records([b"small\n", b"x" * 50 + b"\n", b"tail\n"], threading.Lock())
    f.close()
    assert (tmp_path / "a.log.2").read_bytes() == b"small\n"
    assert (tmp_path / "a.log.1").read_bytes() == b"x" * 50 + b"\n"
    assert (tmp_path / "a.log").read_bytes() == b"tail\n"


def test_backup_count_zero_never_rotates_and_mode_w_truncates(tmp_path):
    path = tmp_path / "a.log"
    path.write_text("old\n")
    f = RotatingFile(path, max_bytes=10, backup_count=0)
    f.write_records([b"0123456789\n", b"more\n"], threading.Lock())
    f.close()
    assert path.read_text() == "old\n0123456789\nmore\n" and list(tmp_path.iterdir()) == [path]
    RotatingFile(path, mode="w").close()
    assert path.read_text() == ""


@pytest.fixture
def isolated_root():
    """initialize_logger/attach change the root logger and the except hooks: put them back."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, sys.excepthook, threading.excepthook)
    yield root
    for h in root.handlers[:]:
        if h not in saved[0]:
            root.removeHandler(h)
            h.close()
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    sys.excepthook, threading.excepthook = saved[2], saved[3]


def _handler(tmp_path, **kw):
    h = MultiProcessingLogHandler(tmp_path / "t.log", **kw)
    h.setFormatter(logging.Formatter("%(message)s"))
    log = logging.getLogger(f"unit.{id(h)}")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    log.addHandler(h)
    return h, log


def test_exc_info_stack_info_and_unpicklable_args_are_logged_from_a_forked_child(tmp_path):
    h, log = _handler(tmp_path)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            unpicklable = threading.Lock()
            try:
                raise KeyError("inner")
            except KeyError:
                log.error("lock is %r", unpicklable, exc_info=True, stack_info=True)
            code = 0
        finally:
            os._exit(code)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    h.close()
    text = (tmp_path / "t.log").read_text()
    assert "lock is <unlocked _thread.lock object" in text
    assert "KeyError: 'inner'" in text and "Stack (most recent call last):" in text


def test_forked_child_holds_none_of_the_writers_descriptors(tmp_path):
    h, log = _handler(tmp_path)
    log.info("parent connected")
    server = h.server
    wait_for(lambda: server._connections, 30, "the writer accepting the parent's connection")
    fds = [server._listener.fileno(), server.file.fd] + [c.fileno() for c in server._connections]
    assert len(fds) == 3
    pid = os.fork()
    if pid == 0:
        still_open = 0
        for fd in fds:
            try:
                os.fstat(fd)
                still_open += 1
            except OSError:
                pass
        os._exit(still_open)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    h.close()


def test_handler_pickles_as_a_client_of_the_same_writer(tmp_path):
    h, _ = _handler(tmp_path)
    clone = pickle.loads(pickle.dumps(h))
    assert clone.server is None and clone.address == h.address
    assert clone.formatter._fmt == "%(message)s"
    clone.emit(logging.makeLogRecord({"msg": "via clone"}))
    clone.close()
    h.close()
    assert (tmp_path / "t.log").read_text() == "via clone\n"


def test_second_handler_for_the_same_file_joins_the_running_writer(tmp_path):
    h, log = _handler(tmp_path)
    second = MultiProcessingLogHandler(tmp_path / "t.log")
    assert second.server is None and second.address == h.address
    second.emit(logging.makeLogRecord({"msg": "second"}))
    log.info("first")
    second.close()
    h.close()
    assert sorted((tmp_path / "t.log").read_text().splitlines()) == ["first", "second"]
    assert os.environ.get(ENV_VAR) != h.address  # the export is undone


def test_logging_after_the_writer_stopped_goes_to_stderr_with_one_warning(tmp_path, capsys):
    # a handler that sends to the writer's address without taking over (take_over=False)
    server = LogWriterServer.start(tmp_path / "t.log")
    h = MultiProcessingLogHandler.connect(server.address, formatter=logging.Formatter("%(message)s"),
                                          take_over=False)
    log = logging.getLogger(f"unit.{id(h)}")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    log.addHandler(h)
    server.close()
    log.info("one")
    log.info("two")
    err = capsys.readouterr().err
    assert err.count("unreachable") == 1 and err.endswith("one\ntwo\n")
    h.close()


def test_a_writer_that_stops_reading_cannot_block_a_sender_beyond_the_timeout(tmp_path, capsys):
    address = str(tmp_path / "stuck.sock")
    stuck = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stuck.bind(address)
    stuck.listen(1)  # accepts into the backlog, never reads
    h = MultiProcessingLogHandler.connect(address, send_timeout=0.3)
    record = logging.makeLogRecord({"msg": "p" * 100_000})
    t0 = time.monotonic()
    for _ in range(100):  # 10 MB: far beyond any socket buffer
        h.emit(record)
    assert time.monotonic() - t0 < 3
    assert capsys.readouterr().err.count("unreachable") == 1
    h.close()
    stuck.close()


def test_server_env_names_the_socket_and_close_removes_it(tmp_path):
    with LogWriterServer.start(tmp_path / "run.log") as server:
        assert server.env == {ENV_VAR: server.address}
        assert os.path.exists(server.address) and server.filename == str(tmp_path / "run.log")
    assert not os.path.exists(server.directory) and server.closed


def test_unusable_paths_give_one_clear_error(tmp_path):
    (tmp_path / ("d" * 90)).mkdir()
    with pytest.raises(LogWriterError, match="too long"):
        LogWriterServer.start(tmp_path / "a.log", socket_dir=tmp_path / ("d" * 90))
    with pytest.raises(LogWriterError, match="cannot create a socket directory"):
        LogWriterServer.start(tmp_path / "a.log", socket_dir=tmp_path / "missing")
    (tmp_path / "file").write_text("")
    with pytest.raises(LogWriterError, match="cannot open log file"):
        LogWriterServer.start(tmp_path / "file" / "a.log", socket_dir=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d" * 90, "file"]


def test_initialize_logger_tags_the_node_and_reuses_its_writer(tmp_path, isolated_root):
    root = initialize_logger(tmp_path, node=3, stream=False)
    (first,) = root.handlers
    logging.getLogger("demo").info("hello")
    assert initialize_logger(tmp_path, node=3, stream=False).handlers == [first]
    logging.getLogger("demo").debug("hidden without debug")
    first.close()
    text = (tmp_path / "run.log").read_text()
    assert "[INFO]" in text and "Node[3] hello" in text and "hidden" not in text


def test_attach_without_an_address_does_nothing_and_is_idempotent_with_one(tmp_path, isolated_root, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert attach() is None
    with LogWriterServer.start(tmp_path / "run.log") as server:
        monkeypatch.setenv(ENV_VAR, server.address)
        h = attach(capture_uncaught=False)
        assert attach(capture_uncaught=False) is h
        logging.getLogger("x").info("attached")
        isolated_root.removeHandler(h)
        h.close()
    assert (tmp_path / "run.log").read_text().rstrip().endswith("attached")


def test_half_sent_record_of_a_vanished_sender_is_discarded_not_written(tmp_path):
    with LogWriterServer.start(tmp_path / "run.log") as server:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(server.address)
        whole, torn = encode_frame("whole\n"), encode_frame("torn record\n")
        conn.sendall(whole + torn[:-4])
        conn.close()
        deadline = time.monotonic() + 5
        while server.torn_records == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.torn_records == 1
    assert (tmp_path / "run.log").read_text() == "whole\n"


def test_a_client_learns_the_file_only_from_a_note_nobody_else_could_have_written(tmp_path):
    with LogWriterServer.start(tmp_path / "run.log", maxBytes=500, backupCount=4) as server:
        h = MultiProcessingLogHandler.connect(server.address)
        real = os.path.realpath(tmp_path / "run.log")
        assert h.connection.target == LogTarget(real, 500, 4, os.path.dirname(server.directory))
        h.close()
        declined = MultiProcessingLogHandler.connect(server.address, take_over=False)
        assert declined.connection.target is None
        declined.close()
    # the same note beside a socket in a directory others may write is ignored
    shared = tmp_path / "shared"
    shared.mkdir()
    write_target(str(shared), LogTarget(str(tmp_path / "elsewhere.log"), 0, 0))
    assert read_target(str(shared / "log.sock")) is not None
    shared.chmod(0o777)
    assert read_target(str(shared / "log.sock")) is None
    foreign = MultiProcessingLogHandler.connect(str(shared / "log.sock"))
    assert foreign.connection.target is None
    foreign.close()
