"""Saved logs that are not UTF-8: UTF-16 (PowerShell redirects) and GBK/GB18030 (Chinese Windows).

The line splitter decodes UTF-8; for a replay we look at the first bytes of the
file once and, when needed, put an incremental transcoder in front of it so the
rest of the pipeline still sees UTF-8 bytes; a live stream is sniffed from its first
chunk by the engine (`stream_decoder`). Incremental decoders keep a
partial character across chunk boundaries, so any chunking gives the same text.
"""
from __future__ import annotations

import codecs
from typing import BinaryIO, Callable, Optional

__all__ = ["detect_encoding", "Transcoder", "open_log_bytes", "stream_decoder", "SNIFF_BYTES"]

SNIFF_BYTES = 64 * 1024


def detect_encoding(head: bytes, *, strict: bool = False) -> Optional[str]:
    """The codec to transcode from, or None when the bytes should be read as UTF-8.

    UTF-16 is recognised by its BOM or, without one, by NULs in every other
    byte of ASCII-heavy text; GB18030 (a superset of GBK) when the head is not
    valid UTF-8 but is valid GB18030. `strict` (a live stream's first chunk, which
    may be a program's binary garbage): a UTF-16 BOM counts only with the NULs.
    """
    if head.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    bom = head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
    if bom and not strict:
        return "utf-16"
    sample = head[2:4098] if bom else head[:4096]
    if len(sample) >= 8:
        even, odd = sample[0::2], sample[1::2]
        n = len(sample) // 2
        if odd.count(0) > 0.4 * n and even.count(0) < 0.05 * n:
            return "utf-16" if bom else "utf-16-le"
        if even.count(0) > 0.4 * n and odd.count(0) < 0.05 * n:
            return "utf-16" if bom else "utf-16-be"
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
        return None
    except UnicodeDecodeError:
        pass
    try:
        codecs.getincrementaldecoder("gb18030")().decode(head, final=False)
    except UnicodeDecodeError:
        return None  # neither: UTF-8 with replacement loses the least
    return "gb18030"


def stream_decoder(encoding: str) -> Callable[[bytes], bytes]:
    """Bytes in `encoding` -> the same text as UTF-8 bytes, chunk by chunk (a character split
    across chunks is held until it is whole), for a live stream that is not UTF-8."""
    decode = codecs.getincrementaldecoder(encoding)(errors="replace").decode
    return lambda data: decode(data).encode("utf-8")


class Transcoder:
    """A read-only binary stream: bytes of `raw` in `encoding`, re-encoded as UTF-8."""

    def __init__(self, raw: BinaryIO, encoding: str, *, head: bytes = b"") -> None:
        self._raw = raw
        self._dec = codecs.getincrementaldecoder(encoding)(errors="replace")
        self._head = head
        self._eof = False
        self.encoding = encoding

    def read(self, size: int = -1) -> bytes:
        """Up to `size` bytes (fewer when the decoder holds a partial character); all of the
        rest when `size` is negative, as a file's read() gives."""
        if size < 0:
            return b"".join(iter(lambda: self._read_some(1 << 16), b""))
        return self._read_some(size)

    def _read_some(self, size: int) -> bytes:
        while not self._eof:
            if self._head:
                data, self._head = self._head, b""
            else:
                data = self._raw.read(size or 1 << 16)
            if not data:
                self._eof = True
                return self._dec.decode(b"", final=True).encode("utf-8")
            out = self._dec.decode(data).encode("utf-8")
            if out:
                return out
        return b""


def open_log_bytes(fh: BinaryIO) -> BinaryIO:
    """`fh` itself when it holds UTF-8, else a `Transcoder` to UTF-8."""
    head = fh.read(SNIFF_BYTES)
    enc = detect_encoding(head)
    if enc is None:
        return _Prefixed(fh, head)
    return Transcoder(fh, enc, head=head)  # type: ignore[return-value]


class _Prefixed:
    """`fh` with the sniffed head put back in front."""

    def __init__(self, raw: BinaryIO, head: bytes) -> None:
        self._raw, self._head = raw, head

    def read(self, size: int = -1) -> bytes:
        """The head first (a short read), then `fh`'s bytes; all of them when `size` is negative."""
        if self._head:
            data, self._head = self._head, b""
            return data + self._raw.read() if size < 0 else data
        return self._raw.read(size)
