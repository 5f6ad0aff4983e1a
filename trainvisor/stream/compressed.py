"""Compressed saved logs: a `train.log.gz` (or .bz2, .xz) is read as the log it holds.

Why by its first bytes, not its name: logs are renamed, and logrotate's `compress` keeps a
`.1.gz` that is given as is; a compressed log read as text used to give 0 records and exit 0
without a word. The standard library reads gzip, bzip2 and xz; a Zstandard log (which this
Python cannot read) is a one-line error naming the remedy, as is a damaged stream, never a
traceback or a silent empty result.
"""
from __future__ import annotations

from typing import BinaryIO, Callable

from ..errors import ConfigError

__all__ = ["decompressed", "MAGIC"]

MAGIC = {
    b"\x1f\x8b": "gzip",
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"\x28\xb5\x2f\xfd": "zstd",
}


def _opener(kind: str) -> tuple[Callable[[BinaryIO], BinaryIO], tuple[type, ...]]:
    """The reader of a `kind` stream, and the errors its damage raises beyond OSError/EOFError."""
    if kind == "gzip":
        import gzip
        import zlib

        return (lambda fh: gzip.GzipFile(fileobj=fh, mode="rb")), (zlib.error,)  # type: ignore[return-value]
    if kind == "bzip2":
        import bz2

        return (lambda fh: bz2.BZ2File(fh, "rb")), ()  # type: ignore[return-value]
    import lzma

    return (lambda fh: lzma.LZMAFile(fh, "rb")), (lzma.LZMAError,)  # type: ignore[return-value]


def decompressed(fh: BinaryIO, name: str) -> BinaryIO:
    """`fh` when it is not compressed (its position unchanged: it must be at its start and
    seekable), else a reader of the bytes it holds, whose damage is a one-line ConfigError."""
    head = fh.read(6)
    fh.seek(0)
    kind = next((k for magic, k in MAGIC.items() if head.startswith(magic)), None)
    if kind is None:
        return fh
    if kind == "zstd":
        raise ConfigError(f"{name}: a Zstandard-compressed log, which this Python cannot read: "
                          f"decompress it first (zstd -d {name})")
    open_, errors = _opener(kind)
    return _Checked(open_(fh), name, kind, errors)


class _Checked:
    """A decompressing reader whose errors (a cut or corrupt stream) say which file, in one line."""

    def __init__(self, inner: BinaryIO, name: str, kind: str, errors: tuple[type, ...]) -> None:
        self._inner, self._name, self._kind = inner, name, kind
        self._errors = (EOFError, OSError, ValueError, *errors)  # gzip.BadGzipFile is an OSError

    def read(self, size: int = -1) -> bytes:
        try:
            return self._inner.read(size)
        except self._errors as exc:
            raise ConfigError(f"{self._name}: the {self._kind} stream is damaged or cut short: {exc}") from exc
