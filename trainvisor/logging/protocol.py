"""Wire format between logging processes and the one writer.

A stream of frames over a Unix stream socket: 4-byte little-endian length, then that many
bytes of an already-formatted record (UTF-8, ending in a newline). Records travel as text,
not pickles, so exc_info/stack_info and unpicklable arguments always survive the trip, and
formatting is spread over the sending processes instead of piling up on the single writer.

The writer answers with acks: 8-byte little-endian counts of that connection's records now in
the file (cumulative), so a sender knows which records it must re-send if the writer dies.
"""
from __future__ import annotations

import struct

__all__ = [
    "ACK",
    "ENV_VAR",
    "MAX_RECORD_BYTES",
    "ProtocolError",
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


class FrameDecoder:
    """Reassembles frames from one connection's byte stream, whatever the read boundaries."""

    __slots__ = ("_buffer", "frames")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.frames = 0  # complete frames returned so far: what the writer acks

    def feed(self, data: bytes) -> list[bytes]:
        """Append received bytes; return the payloads of the frames now complete, in order."""
        buf = self._buffer
        buf += data
        out: list[bytes] = []
        end = len(buf)
        off = 0
        unpack = _HEADER.unpack_from
        while off + 4 <= end:
            (length,) = unpack(buf, off)
            if length > MAX_RECORD_BYTES:
                raise ProtocolError(f"frame of {length} bytes exceeds {MAX_RECORD_BYTES}")
            stop = off + 4 + length
            if stop > end:
                break
            out.append(bytes(buf[off + 4 : stop]))
            off = stop
        if off:
            del buf[:off]
        self.frames += len(out)
        return out

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held back (lost if the peer disconnects now)."""
        return len(self._buffer)
