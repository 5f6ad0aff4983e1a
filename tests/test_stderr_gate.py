"""trainvisor's own messages on stderr land between the training's lines, never inside one
(stderr_gate.py); a line the training leaves open too long gets the message on its own line."""
from __future__ import annotations

import os
import threading

from trainvisor.stderr_gate import LineGate


def _read_all(fd: int) -> bytes:
    out = b""
    while chunk := os.read(fd, 65536):
        out += chunk
    return out


def _gated(wait: float, chunks_and_messages) -> bytes:
    """What a pipe behind a gate receives for `chunks_and_messages` (bytes pass through, str is said)."""
    r, w = os.pipe()
    gate = LineGate(w, wait=wait)
    for item in chunks_and_messages:
        gate.pass_through(w, item) if isinstance(item, bytes) else gate.say(item)
    os.close(w)
    try:
        return _read_all(r)
    finally:
        os.close(r)


def _wait_until_waiting(gate: LineGate) -> None:
    with gate._cond:  # the message thread holds the condition until it waits on it
        assert gate._cond.wait_for(lambda: gate.waiting == 1, timeout=10)


def test_a_message_during_an_open_line_waits_for_its_end():
    r, w = os.pipe()
    gate = LineGate(w, wait=30)
    gate.pass_through(w, b"step 1 loss: 0.5\nstep 2 lo")
    speaker = threading.Thread(target=gate.say, args=("trainvisor: upload failed, retrying",))
    speaker.start()
    _wait_until_waiting(gate)
    gate.pass_through(w, b"ss: 0.4\nstep 3")
    speaker.join(timeout=10)
    gate.pass_through(w, b" loss: 0.3\n")
    os.close(w)
    assert _read_all(r) == (b"step 1 loss: 0.5\nstep 2 loss: 0.4\ntrainvisor: upload failed, retrying\n"
                            b"step 3 loss: 0.3\n")
    os.close(r)


def test_a_line_left_open_gets_the_message_on_a_line_of_its_own_after_the_wait():
    # no waiting: the tqdm bar that never ends its line
    assert _gated(0.0, [b"Epoch 1: 45%|####5     | 45/100\r", "trainvisor: cannot write the run log",
                        b"Epoch 1: 46%|####6     | 46/100\r"]) == \
        b"Epoch 1: 45%|####5     | 45/100\r\ntrainvisor: cannot write the run log\nEpoch 1: 46%|####6     | 46/100\r"


def test_a_message_after_a_complete_line_goes_out_at_once():
    assert _gated(30, [b"step 1 loss: 0.5\n", "trainvisor: at once", b"step 2"]) == \
        b"step 1 loss: 0.5\ntrainvisor: at once\nstep 2"


def test_other_fds_pass_straight_through_and_at_a_line_start_nothing_waits():
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    gate = LineGate(w2, wait=30)
    gate.pass_through(w1, b"stdout without newline")  # another fd: the gate's stream stays at a line start
    gate.say("trainvisor: at once")
    os.close(w1)
    os.close(w2)
    assert _read_all(r1) == b"stdout without newline" and _read_all(r2) == b"trainvisor: at once\n"
    os.close(r1)
    os.close(r2)


def test_a_non_blocking_fd_that_fills_is_waited_on_not_given_up():
    # an fd shared with another program may be left O_NONBLOCK; a full pipe then refuses writes
    r, w = os.pipe()
    os.set_blocking(w, False)
    data = b"x" * (4 << 20)  # far more than a pipe holds
    got = []
    reader = threading.Thread(target=lambda: got.append(_read_all(r)))
    reader.start()
    LineGate(w).pass_through(w, data[:2 << 20])  # the gate's own fd
    LineGate(-1).pass_through(w, data[2 << 20:])  # an fd the gate does not watch (the child's stdout)
    os.close(w)
    reader.join(timeout=30)
    os.close(r)
    assert got == [data]
