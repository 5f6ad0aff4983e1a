"""The writer's ledger and the successor's takeover, step by step: a write the kill tore, a write
that was whole but never committed, a sender's re-sent records, and rotation numbers with a gap.
(tests/test_logging_peers.py kills real writers under load; these pin each case down.)"""
from __future__ import annotations

import threading

from trainvisor.logging.ledger import SLOTS, Ledger
from trainvisor.logging.lockfile import WriterLock
from trainvisor.logging.protocol import FrameDecoder, encode_frame, hello_frame
from trainvisor.logging.rotation import RotatingFile


def _held_lock(log):
    lock = WriterLock(str(log))
    assert lock.try_acquire()
    return lock


def _dead_writer_mid_write(tmp_path, landed: int):
    """A writer that committed one record of sender A, then began a 2-record write (A's second,
    B's first) and died after `landed` of its bytes reached the file. Returns the log, the
    lock file and the batch it was writing."""
    log = tmp_path / "t.log"
    lock = _held_lock(log)
    ledger = Ledger(lock.fd)
    ledger.reset()
    f = RotatingFile(log)
    f.ledger = ledger
    slot_a, _ = ledger.claim(111)
    slot_b, _ = ledger.claim(222)
    f.write_records([b"a0\n"], threading.Lock(), [(0, 1, slot_a, 1)])
    batch = b"a1 second record of A\nb0 first of B\n"
    ledger.begin(f.inode, f.size, len(batch), [(slot_a, 2), (slot_b, 1)])
    with open(log, "ab") as out:
        out.write(batch[:landed])
    f.close()
    ledger.close()
    lock.forget()  # as a SIGKILL leaves it: the lock released, the lock file and ledger in place
    return log, batch


def _successor(log):
    lock = _held_lock(log)
    ledger = Ledger(lock.fd)
    found, senders = ledger.recover(str(log))
    ledger.close()
    lock.close()
    return found, senders


def test_a_write_the_kill_tore_is_cut_off_and_its_senders_counts_stay(tmp_path):
    log, batch = _dead_writer_mid_write(tmp_path, landed=7)
    found, senders = _successor(log)
    assert log.read_bytes() == b"a0\n"  # "a1 seco" is gone: A re-sends it whole
    assert found.torn_bytes == 7 and not found.completed_write
    assert {t: c for t, (_, c) in senders.items()} == {111: 1, 222: 0}


def test_a_whole_write_never_committed_counts_as_written(tmp_path):
    log, batch = _dead_writer_mid_write(tmp_path, landed=10_000)
    found, senders = _successor(log)
    assert log.read_bytes() == b"a0\n" + batch
    assert found.completed_write and found.torn_bytes == 0
    assert {t: c for t, (_, c) in senders.items()} == {111: 2, 222: 1}


def test_a_write_that_never_started_leaves_the_file_and_counts_alone(tmp_path):
    log, _ = _dead_writer_mid_write(tmp_path, landed=0)
    found, senders = _successor(log)
    assert log.read_bytes() == b"a0\n"
    assert (found.torn_bytes, found.completed_write) == (0, False)
    assert {t: c for t, (_, c) in senders.items()} == {111: 1, 222: 0}


def test_a_moved_file_is_never_cut(tmp_path):
    log, batch = _dead_writer_mid_write(tmp_path, landed=7)
    log.rename(tmp_path / "elsewhere.log")
    log.write_bytes(b"someone else's file\n")
    found, senders = _successor(log)
    assert log.read_bytes() == b"someone else's file\n"
    assert found.torn_bytes == 0 and {t: c for t, (_, c) in senders.items()} == {111: 1, 222: 0}


def test_re_sent_records_the_file_holds_are_skipped_and_still_acked():
    cells: dict[int, list[int]] = {}

    def sender_of(token):
        return cells.setdefault(token, [0, 5])

    first = FrameDecoder(sender_of)
    records = [encode_frame(f"r{i}\n") for i in range(5)]
    assert first.feed(hello_frame(7, 0) + b"".join(records[:3])) == [b"r0\n", b"r1\n", b"r2\n"]
    # the sender re-sends from record 1 (its first unacked) on a new connection
    again = FrameDecoder(sender_of)
    stream = hello_frame(7, 1) + b"".join(records[1:])
    got = [p for i in range(len(stream)) for p in again.feed(stream[i:i + 1])]  # byte by byte
    assert got == [b"r3\n", b"r4\n"]
    assert again.frames == 4 and cells[7][0] == 5  # all four acked; the writer has five
    # a connection without a hello (an older sender) is never filtered
    assert FrameDecoder(sender_of).feed(b"".join(records[:2])) == [b"r0\n", b"r1\n"]


def test_the_least_recently_seen_sender_gives_its_slot_up(tmp_path):
    lock = _held_lock(tmp_path / "t.log")
    ledger = Ledger(lock.fd)
    ledger.reset()
    slots = {ledger.claim(token)[0] for token in range(1, SLOTS + 1)}
    assert slots == set(range(SLOTS))
    slot, evicted = ledger.claim(SLOTS + 1)
    assert evicted == 1 and slot == 0
    ledger.close()
    lock.close()


def test_a_gap_in_the_backup_numbers_is_shifted_over_never_overwritten(tmp_path):
    """A writer killed mid-shift leaves name.1, name.3, name.4 (name.2 had moved up): the next
    rotation keeps every file, and the order newest to oldest."""
    log = tmp_path / "g.log"
    for i, text in ((1, "newest backup\n"), (3, "older\n"), (4, "oldest\n")):
        (tmp_path / f"g.log.{i}").write_text(text)
    log.write_text("current\n")
    f = RotatingFile(log, max_bytes=10, backup_count=10)
    f.write_records([b"next file\n"], threading.Lock())
    f.close()
    kept = {p.name: p.read_text() for p in tmp_path.iterdir() if p.name.startswith("g.log")}
    assert kept == {"g.log": "next file\n", "g.log.1": "current\n", "g.log.2": "newest backup\n",
                    "g.log.4": "older\n", "g.log.5": "oldest\n"}


def test_an_ack_that_finds_a_full_buffer_is_owed_and_the_last_one_waits_for_room():
    import socket
    import time

    from trainvisor.logging.protocol import ACK, final_acks, send_acks

    writer_end, sender_end = socket.socketpair()
    try:
        writer_end.setblocking(False)
        try:
            while True:  # the sender reads no acks: its buffer fills
                writer_end.send(b"x" * 4096)
        except BlockingIOError:
            pass
        decoder = FrameDecoder()
        decoder.feed(b"".join(encode_frame(f"r{i}\n") for i in range(3)))
        assert send_acks([(writer_end, decoder)]) == [writer_end]  # owed, not lost
        assert final_acks([(writer_end, decoder)], time.monotonic() + 0.05) is False
        sender_end.setblocking(False)
        try:
            while sender_end.recv(1 << 20):  # the sender reads: room again
                pass
        except BlockingIOError:
            pass
        assert final_acks([(writer_end, decoder)], time.monotonic() + 1.0) is True
        assert ACK.unpack(sender_end.recv(64)[-ACK.size:]) == (3,)
    finally:
        writer_end.close()
        sender_end.close()
