"""Wire format between logging processes and the one writer.

A stream of frames over a Unix stream socket: 4-byte little-endian length, then that many
bytes of an already-formatted record (UTF-8, ending in a newline). Records travel as text,
not pickles, so exc_info/stack_info and unpicklable arguments always survive the trip, and
formatting is spread over the sending processes instead of piling up on the single writer.

The writer answers with acks: 8-byte little-endian counts of that connection's records now in
the file (cumulative), so a sender knows which records it must re-send if the writer dies.

Each connection opens with a hello: the length field all ones, then the sender's token (random,
one per process) and the sequence number of the first record that follows (the number of its
records acked so far). A writer that takes over from a killed one knows from its ledger how
many of each sender's records the file holds, and skips the re-sent ones it already has.
"""
from __future__ import annotations

import select
import socket
import struct
import time
from typing import Callable

__all__ = [
    "ACK",
    "hello_frame",
    "ENV_VAR",
    "MAX_RECORD_BYTES",
    "ProtocolError",
    "final_acks",
    "send_acks",
    "FrameDecoder",
    "encode_frame",
]

#: Environment variable holding the writer's socket address; set for supervised children.
ENV_VAR = "TRAINVISOR_LOG_ADDRESS"

#: A single record larger than this is cut (with a marker) by the sender; the writer
#: treats a larger announced length as a corrupt stream.
MAX_RECORD_BYTES = 16 * 1024 * 1024

_HEADER = struct.Struct("<I")

#: The writer's answer: how many records of this connection are in the file so far.
ACK = struct.Struct("<Q")
_TRUNCATED = b"... [record truncated by trainvisor.logging]\n"
_HELLO_MARK = 0xFFFFFFFF
_HELLO = struct.Struct("<IQQ")  # mark, sender token, sequence number of the next record


class ProtocolError(ValueError):
    """A peer sent a frame no well-behaved client produces; its connection is dropped."""


def encode_frame(text: str, encoding: str = "utf-8", errors: str = "backslashreplace") -> bytes:
    """One record as a frame. `text` should end with a newline; one is added if not."""
    payload = text.encode(encoding, errors)
    if not payload.endswith(b"\n"):
        payload += b"\n"
    if len(payload) > MAX_RECORD_BYTES:
        payload = payload[: MAX_RECORD_BYTES - len(_TRUNCATED)] + _TRUNCATED
    return _HEADER.pack(len(payload)) + payload


def hello_frame(token: int, first_seq: int) -> bytes:
    """What a sender writes first on each connection (`token` is never 0)."""
    return _HELLO.pack(_HELLO_MARK, token, first_seq)


#: A sender's state in the writer: [records of it accepted so far, its ledger slot or -1].
SenderCell = list


class FrameDecoder:
    """Reassembles frames from one connection's byte stream, whatever the read boundaries.

    With `sender_of` (token -> SenderCell, the writer's), a connection that says hello has its
    records numbered, and a record whose number the sender's cell has passed is skipped: the
    file already holds it (a re-send after a writer's death, or after the sender's own retry)."""

    __slots__ = ("_buffer", "frames", "sender", "_seq", "_sender_of")

    def __init__(self, sender_of: Callable[[int], SenderCell] | None = None) -> None:
        self._buffer = bytearray()
        self.frames = 0  # complete frames taken so far (skipped ones too): what the writer acks
        self.sender: SenderCell | None = None
        self._seq = 0
        self._sender_of = sender_of

    def feed(self, data: bytes) -> list[bytes]:
        """Append received bytes; return the payloads of the frames now complete, in order."""
        buf = self._buffer
        buf += data
        out: list[bytes] = []
        end = len(buf)
        off = 0
        unpack = _HEADER.unpack_from
        taken = 0
        cell, seq = self.sender, self._seq
        while off + 4 <= end:
            (length,) = unpack(buf, off)
            if length > MAX_RECORD_BYTES:
                if length != _HELLO_MARK:
                    raise ProtocolError(f"frame of {length} bytes exceeds {MAX_RECORD_BYTES}")
                if off + _HELLO.size > end:
                    break
                cell, seq = self._hello(buf, off)
                off += _HELLO.size
                continue
            stop = off + 4 + length
            if stop > end:
                break
            taken += 1
            if cell is None:
                out.append(bytes(buf[off + 4 : stop]))
            elif seq >= cell[0]:
                out.append(bytes(buf[off + 4 : stop]))
                seq += 1
                cell[0] = seq
            else:  # already in the file
                seq += 1
            off = stop
        if off:
            del buf[:off]
        self.frames += taken
        self._seq = seq
        return out

    def _hello(self, buf: bytearray, off: int) -> tuple[SenderCell | None, int]:
        _, token, first = _HELLO.unpack_from(buf, off)
        if self._sender_of is None or not token:
            return None, first
        self.sender = self._sender_of(token)
        return self.sender, first

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held back (lost if the peer disconnects now)."""
        return len(self._buffer)


def send_acks(senders: list[tuple[socket.socket, FrameDecoder]]) -> list[socket.socket]:
    """Tell each sender how many of its records are now in the file. Never blocks: returns the
    senders whose buffer was full, to be told again (the count is cumulative: the latest says all)."""
    full = []
    for conn, decoder in senders:
        if conn.fileno() < 0:
            continue  # it disconnected in this round: nobody to tell
        try:
            conn.send(ACK.pack(decoder.frames), socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
        except BlockingIOError:
            full.append(conn)
        except OSError:
            pass
    return full


def final_acks(senders: list[tuple[socket.socket, FrameDecoder]], until: float) -> bool:
    """The writer's last word to each sender, waiting (until the monotonic `until`, for all of
    them together) for a full buffer to take it. False when one could not be told."""
    pending = senders
    while pending:
        owed = set(send_acks(pending))
        pending = [(c, d) for c, d in pending if c in owed]
        left = until - time.monotonic()
        if not pending:
            return True
        if left <= 0:
            return False
        select.select([], [c for c, _ in pending], [], min(left, 0.05))
    return True
