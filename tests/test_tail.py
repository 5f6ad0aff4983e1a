"""The sidecar's follower (stream/tail.py) on a real Caffe log written in pieces that cut lines:
a file that appears late, rotation by rename, copytruncate, truncation, a restart from the stored
position (the file renamed while no one read it; a new file that got the freed inode number), and
the end at the followed process's exit. The test pulls the follower's items itself: a None is
the follower's quiet moment, when everything written so far has been read, so no sleeps."""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import real_logs
from trainvisor.run.sidecar import ProcessEnd
from trainvisor.stream.source import Chunk, End, Eof, Gap
from trainvisor.stream.tail import TailFollower
from trainvisor.stream.tailpos import SLOT_BYTES, PositionStore
from trainvisor.stream.tailwait import PollWaiter

IDLE = 0.05  # the follower's quiet interval: a pull that finds nothing new returns after it


def caffe_log() -> bytes:
    return (real_logs("caffe") / "bearpaw-fork-mnist.log").read_bytes()


def pieces(data: bytes, n: int) -> list[bytes]:
    """`data` in n pieces cut at odd offsets (inside lines, not at their ends)."""
    step = len(data) // n
    cuts = [i * step + 7 for i in range(1, n)]
    assert all(data[c - 1:c] != b"\n" for c in cuts)
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]


class Reader:
    """Pulls a follower's items; keeps the bytes it handed on outside a restart's muted re-read."""

    def __init__(self, path, **kwargs) -> None:
        self.muted = False
        self.warm: list[bytes] = []
        self.gaps: list[Gap] = []
        self.data = bytearray()
        self.ended = False
        self.follower = TailFollower(path, idle=IDLE, on_warm=self._warm, **kwargs)
        self.items = self.follower.items()

    def _warm(self, muted: bool) -> None:
        self.muted = muted

    def pull(self, limit: int = 10_000) -> None:
        """Until the follower is quiet (everything written so far read) or has ended."""
        for _ in range(limit):
            item = next(self.items)
            if item is None:
                return
            if type(item) is Chunk:
                (self.warm.append(item.data) if self.muted else self.data.extend(item.data))
            elif type(item) is Gap:
                self.gaps.append(item)
            elif type(item) is End:
                self.ended = True
                return
        raise AssertionError("the follower never went quiet")

    def close(self) -> None:
        self.items.close()


@pytest.fixture
def readers():
    made: list[Reader] = []

    def make(path, **kwargs) -> Reader:
        made.append(Reader(path, **kwargs))
        return made[-1]

    yield make
    for r in made:
        r.close()


def position_after(readers, log, content: bytes):
    """`log` written with `content` and followed to its end by a sidecar that then stops: its
    last record."""
    log.write_bytes(content)
    first = readers(log)
    first.pull()
    first.close()
    return first.follower.position


def test_late_file_rotations_copytruncate_and_truncation_read_as_one_stream(tmp_path, readers):
    data = caffe_log()
    parts = pieces(data, 10)
    log = tmp_path / "train.log"
    r = readers(log)
    r.pull()  # the file is not there yet: quiet
    assert r.data == b""
    fh = open(log, "ab")
    written = bytearray()

    def write(piece: bytes) -> None:
        fh.write(piece)
        fh.flush()
        written.extend(piece)

    try:
        write(parts[0])
        r.pull()
        # only whole lines are handed on: the partial last line waits for its newline
        assert bytes(r.data) == parts[0][: parts[0].rfind(b"\n") + 1]
        write(parts[1])
        for i in (1, 2):  # rename rotation twice, the old file written to before the follower looked
            write(parts[2 * i])
            if (tmp_path / "train.log.1").exists():
                os.rename(tmp_path / "train.log.1", tmp_path / "train.log.2")
            os.rename(log, tmp_path / "train.log.1")
            fh.close()
            fh = open(log, "ab")
            write(parts[2 * i + 1][:100])
            r.pull()
            write(parts[2 * i + 1][100:])
        # copytruncate, with bytes written after the follower last read: they are in the copy
        r.pull()
        write(parts[6])
        os.rename(tmp_path / "train.log.2", tmp_path / "train.log.3")
        os.rename(tmp_path / "train.log.1", tmp_path / "train.log.2")
        shutil.copyfile(log, tmp_path / "train.log.1")
        os.truncate(log, 0)  # the writer's append mode goes on at 0
        write(parts[7])
        r.pull()
        # a plain truncation (no copy), after everything was read
        os.truncate(log, 0)
        write(parts[8])
        write(parts[9])
        r.pull()
    finally:
        fh.close()
    r.follower.stop()
    r.pull()
    assert r.ended
    assert bytes(r.data) == bytes(written) == data
    stats = r.follower.stats
    assert (stats.rotations, stats.truncations, stats.waiter) == (2, 2, "inotify")
    pos = r.follower.position  # the last whole line: the log's end (it ends with a newline)
    assert (pos.offset, pos.lines) == (len(parts[8]) + len(parts[9]), data.count(b"\n"))


def test_restart_goes_on_from_the_position_in_the_renamed_file(tmp_path, readers):
    data = caffe_log()
    half, rest = data[: len(data) // 2 + 5], data[len(data) // 2 + 5:]
    log = tmp_path / "train.log"
    pos = position_after(readers, log, half)
    assert pos.offset == half.rfind(b"\n") + 1 and pos.lines == half.count(b"\n")
    assert pos.anchor < pos.offset and pos.lines - pos.anchor_lines == 64  # the lines re-read for context
    # while no one reads: the old file gets more, is renamed, and a new one starts mid-line
    cut = len(rest) // 2 + 3
    with open(log, "ab") as fh:
        fh.write(rest[:cut])
    os.rename(log, tmp_path / "train.log.1")
    log.write_bytes(rest[cut:])
    second = readers(log, start=pos)
    second.pull()
    second.follower.stop()
    second.pull()
    assert second.warm == [data[pos.anchor:pos.offset]]
    assert second.gaps == [Gap("log", 0, pos.anchor_lines, True)]  # line numbers go on from there
    assert bytes(second.data) == data[pos.offset:]
    assert second.follower.stats.rotations == 1


def test_a_second_restart_re_reads_as_many_lines_as_the_first(tmp_path, readers):
    data = caffe_log()
    log = tmp_path / "train.log"
    pos = position_after(readers, log, data[:30_000])
    with open(log, "ab") as fh:
        fh.write(data[30_000:30_200])  # a few lines more: the next record's window reaches back past them
    second = readers(log, start=pos)
    second.pull()
    again = second.follower.position
    second.close()
    assert again.offset > pos.offset and again.lines - again.anchor_lines == 64
    assert data[again.anchor:again.offset].count(b"\n") == 64


def test_a_new_file_with_the_freed_inode_is_read_from_its_start(tmp_path, readers, caplog):
    data = caffe_log()
    log = tmp_path / "train.log"
    other = data[20_000:45_000]  # another log, longer than the first one's position
    # until the file system hands the freed inode number to the new file (another process on the
    # machine may take it first: the whole scenario is tried again)
    for _ in range(50):
        pos = position_after(readers, log, data[:20_000])
        log.unlink()
        log.write_bytes(other)
        if os.stat(log).st_ino == pos.ino:
            break
        log.unlink()
    else:
        pytest.skip("this file system did not reuse an inode number in 50 tries")
    assert os.stat(log).st_size > pos.offset
    with caplog.at_level(logging.WARNING, logger="trainvisor.stream.tail"):
        second = readers(log, start=pos)
        second.pull()
    second.follower.stop()
    second.pull()
    assert second.warm == [] and bytes(second.data) == other  # not from the old offset
    assert "is gone" in caplog.text


def test_copytruncate_while_no_one_read_is_finished_from_the_copy(tmp_path, readers):
    data = caffe_log()
    log = tmp_path / "train.log"
    pos = position_after(readers, log, data[:10_003])
    with open(log, "ab") as fh:
        fh.write(data[10_003:30_001])
    shutil.copyfile(log, tmp_path / "train.log.1")
    os.truncate(log, 0)
    with open(log, "ab") as fh:
        fh.write(data[30_001:])
    second = readers(log, start=pos)
    second.pull()
    second.follower.stop()
    second.pull()
    assert bytes(second.data) == data[pos.offset:]
    assert (second.follower.stats.rotations, second.follower.stats.truncations) == (0, 1)


def test_ends_when_the_process_exits_after_reading_what_is_left(tmp_path, readers):
    data = caffe_log()
    log = tmp_path / "train.log"
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    ends = ProcessEnd(child.pid)
    try:
        r = readers(log, should_end=ends.ended, wake_fds=ends.fds)
        log.write_bytes(data[:30_000])
        r.pull()
        assert not r.ended
        with open(log, "ab") as fh:
            fh.write(data[30_000:-10])  # written just before the training ends, its last line partial
        child.stdin.close()
        child.wait(timeout=30)
        r.pull()
        assert r.ended and bytes(r.data) == data[:-10]  # the partial last line too, at the end
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        ends.close()


def test_position_record_keeps_the_newest_whole_slot_and_a_broken_file_is_one_error(tmp_path, readers):
    from trainvisor.errors import ConfigError

    log = tmp_path / "train.log"
    log.write_bytes(b"loss = 1\n")
    r = readers(log)
    r.pull()
    first = r.follower.position
    with open(log, "ab") as fh:
        fh.write(b"loss = 2\n")
    r.pull()
    second = r.follower.position
    store = PositionStore(tmp_path)
    assert store.load() is None
    store.save(first)
    store.save(second)
    store.close()
    store = PositionStore(tmp_path)
    assert store.load() == second
    store.close()
    # a write cut short spoils its own slot only: the other, older record stands
    raw = bytearray((tmp_path / "tail-position.json").read_bytes())
    newest = 0 if raw[:SLOT_BYTES].find(b'"seq": 2') >= 0 else 1
    raw[newest * SLOT_BYTES + 40: newest * SLOT_BYTES + 60] = b"\0" * 20
    (tmp_path / "tail-position.json").write_bytes(bytes(raw))
    store = PositionStore(tmp_path)
    assert store.load() == first
    store.close()
    (tmp_path / "tail-position.json").write_text("{not json")
    store = PositionStore(tmp_path)
    with pytest.raises(ConfigError, match="tail-position.json: not a tail position record"):
        store.load()
    store.close()


def test_a_log_whose_directory_comes_later_is_waited_for_then_with_inotify(tmp_path, readers):
    log = tmp_path / "later" / "train.log"
    r = readers(log)
    r.pull()
    assert r.follower.stats.waiter == "poll"
    log.parent.mkdir()
    log.write_bytes(b"Iteration 1, loss = 0.5\n")
    r.pull()
    assert bytes(r.data) == b"Iteration 1, loss = 0.5\n"
    with open(log, "ab") as fh:
        fh.write(b"Iteration 2, loss = 0.4\n")
    r.pull()
    assert r.follower.stats.waiter == "inotify" and r.data.endswith(b"Iteration 2, loss = 0.4\n")


def test_polling_waits_with_the_injected_sleep(tmp_path, readers):
    slept: list[float] = []
    log = tmp_path / "train.log"
    r = readers(log, waiter=PollWaiter(0.05, sleep=slept.append))
    r.pull()  # no file: one look, then the quiet moment
    assert slept == [0.05] and r.data == b""
    log.write_bytes(b"Iteration 1, loss = 0.5\nIteration 2")
    r.pull()
    assert bytes(r.data) == b"Iteration 1, loss = 0.5\n" and r.follower.stats.waiter == "poll"


def rotate(log) -> None:
    """logrotate's rename rotation: NAME.2 -> NAME.3, NAME.1 -> NAME.2, NAME -> NAME.1."""
    for n in (2, 1):
        older = log.with_name(f"{log.name}.{n}")
        if older.exists():
            os.rename(older, log.with_name(f"{log.name}.{n + 1}"))
    os.rename(log, log.with_name(f"{log.name}.1"))


def test_two_rotations_between_two_looks_skip_no_file(tmp_path, readers):
    data = caffe_log()
    p = pieces(data, 4)
    log = tmp_path / "train.log"
    log.write_bytes(p[0])
    r = readers(log)
    r.pull()
    with open(log, "ab") as fh:
        fh.write(p[1][:50])
    rotate(log)
    log.write_bytes(p[1][50:] + p[2][:70])  # a whole file the follower never saw at the path
    rotate(log)
    log.write_bytes(p[2][70:] + p[3])
    r.pull()
    r.follower.stop()
    r.pull()
    assert bytes(r.data) == data and r.follower.stats.rotations == 2


def test_two_rotations_while_no_one_read_skip_no_file(tmp_path, readers):
    data = caffe_log()
    p = pieces(data, 4)
    log = tmp_path / "train.log"
    pos = position_after(readers, log, p[0])
    with open(log, "ab") as fh:
        fh.write(p[1])
    rotate(log)
    log.write_bytes(p[2])
    rotate(log)
    log.write_bytes(p[3])
    second = readers(log, start=pos)
    second.pull()
    second.follower.stop()
    second.pull()
    assert bytes(second.data) == data[pos.offset:] and second.follower.stats.rotations == 2
