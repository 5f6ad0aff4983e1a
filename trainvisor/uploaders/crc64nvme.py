"""CRC-64/NVME: the CRC S3 calls CRC64NVME (what AWS S3 stores for an object written without a
checksum, and the one CRC it keeps FULL_OBJECT for every multipart upload).

`crc64nvme(data, crc=0)` continues `crc` over `data`; `combine(crc1, crc2, len2)` is the CRC of
two pieces one after the other from theirs (a whole file's from its parts', no byte read twice).
Both come from the C module (trainvisor/_native/_crc64.c: carry-less multiplication folding on
x86-64 CPUs that have it, else slicing-by-8; the interpreter lock released for large buffers;
`bench/checksums.py`) when it is built; without it (no compiler, or TRAINVISOR_PURE_PYTHON
set) from the pure-Python forms here: the same values, hundreds of times slower, so a store
that answers with CRC64NVME is still verified rather than trusted. The tests compare both.
"""
from __future__ import annotations

import os

__all__ = ["crc64nvme", "combine", "py_crc64nvme", "py_combine", "NATIVE"]

_POLY = 0x9A6C9329AC4BC9B5  # 0xAD93D23594C93659, bit-reflected
_ONES = (1 << 64) - 1


def _table() -> list[int]:
    out = []
    for byte in range(256):
        c = byte
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        out.append(c)
    return out


_TABLE = _table()


def py_crc64nvme(data: bytes, crc: int = 0) -> int:
    """The pure-Python CRC-64/NVME of `data`, continuing `crc`: a byte at a time."""
    c, table = crc ^ _ONES, _TABLE
    for byte in memoryview(data).cast("B"):
        c = table[(c ^ byte) & 0xFF] ^ (c >> 8)
    return c ^ _ONES


def _multmodp(a: int, b: int) -> int:
    """a * b modulo the polynomial, both reflected (bit 63 is x^0)."""
    p, m = 0, 1 << 63
    while m and a:
        if a & m:
            p ^= b
            a ^= m
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return p


def py_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC of A then B from A's (`crc1`), B's (`crc2`) and B's length: A's CRC moved past
    len2 zero bytes (a multiplication by x^(8 len2)), then B's added."""
    power, square = 1 << 63, 1 << 55  # x^0; x^8, one zero byte
    while len2:
        if len2 & 1:
            power = _multmodp(square, power)
        len2 >>= 1
        square = _multmodp(square, square)
    return _multmodp(power, crc1) ^ crc2


def _native():
    if os.environ.get("TRAINVISOR_PURE_PYTHON"):
        return None
    try:
        from .._native import _crc64
    except ImportError:
        return None
    return _crc64


_C = _native()
NATIVE = _C is not None
"""Whether the C module computes them (else the pure-Python forms, slowly)."""
crc64nvme = _C.crc64nvme if _C is not None else py_crc64nvme
combine = _C.combine if _C is not None else py_combine
