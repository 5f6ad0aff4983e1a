"""CRC-64/NVME (S3's CRC64NVME): the C module and the pure-Python fallback against published
vectors (the check value of the CRC catalogue and of the NVM Command Set specification; the
vectors of AWS's CRT test suites, awslabs/aws-checksums tests/crc64_test.c and awslabs/aws-c-s3
tests/s3_checksums_crc64nvme_tests.c), and against each other on random data cut anywhere;
`combine` against the CRC of the joined bytes."""
from __future__ import annotations

import base64
import os
import subprocess
import sys

import pytest

from trainvisor.uploaders import crc64nvme as crc64

VECTORS = [
    (b"123456789", 0xAE8B14860A799888),  # the check value
    (b"", 0),
    (bytes(32), 0xCF3473434D4ECF3B),  # aws-checksums: 32 zero bytes
    (bytes(range(32)), 0xB9D9D4A8492CBD7F),  # aws-checksums: 0..31
    (b"a" * 10, 0x0C1A80036D65C555),  # aws-c-s3: NIST test case 1
]

IMPLEMENTATIONS = [pytest.param(crc64.py_crc64nvme, id="pure-python")]
if crc64.NATIVE:
    from trainvisor._native import _crc64

    IMPLEMENTATIONS.append(pytest.param(_crc64.crc64nvme, id="c"))


def test_the_c_module_is_built_here():
    """The fallback must not hide a build that failed: this checkout builds its extensions."""
    assert crc64.NATIVE and crc64.crc64nvme is _crc64.crc64nvme


@pytest.mark.parametrize("fn", IMPLEMENTATIONS)
@pytest.mark.parametrize("data, want", VECTORS, ids=lambda v: v.hex()[:12] if isinstance(v, bytes) else hex(v))
def test_known_vectors(fn, data, want):
    assert fn(data) == want


@pytest.mark.parametrize("fn", IMPLEMENTATIONS)
def test_continued_over_pieces_as_the_crt_updates_it(fn):
    """aws-c-s3's NIST cases 3 and 4: "a" ten times, "aa" five times, one update each."""
    for piece, times in ((b"a", 10), (b"aa", 5)):
        crc = 0
        for _ in range(times):
            crc = fn(piece, crc)
        assert crc == 0x0C1A80036D65C555


def test_s3_writes_it_as_base64_of_eight_big_endian_bytes():
    """The value an S3 reply carries for the check string (x-amz-checksum-crc64nvme)."""
    assert base64.b64encode(crc64.crc64nvme(b"123456789").to_bytes(8, "big")) == b"rosUhgp5mIg="


@pytest.mark.skipif(not crc64.NATIVE, reason="the C module is not built")
def test_c_and_python_agree_on_random_data_at_every_alignment():
    data = os.urandom(70_000)  # past the size where the C code lets go of the interpreter lock
    whole = crc64.py_crc64nvme(data)
    assert _crc64.crc64nvme(data) == whole
    for start in range(0, 17):
        view = memoryview(data)[start:start + 1000 + start]
        assert _crc64.crc64nvme(view) == crc64.py_crc64nvme(view)
    assert _crc64.crc64nvme(bytearray(data)) == whole


@pytest.mark.skipif(not crc64.NATIVE, reason="the C module is not built")
def test_c_and_python_agree_at_every_length_around_the_fast_paths_edges():
    """Folding (x86-64 with PCLMULQDQ) from 256 bytes, 64 at a time, then 16, then single bytes;
    the table loop below: every length up to 700, continued from a CRC other than zero."""
    data = os.urandom(700)
    for n in range(701):
        assert _crc64.crc64nvme(data[:n], 0x1234) == crc64.py_crc64nvme(data[:n], 0x1234), n


@pytest.mark.parametrize("combine", [crc64.py_combine, crc64.combine], ids=["pure-python", "module"])
def test_combine_gives_the_crc_of_the_joined_bytes(combine):
    a, b = os.urandom(100_003), os.urandom(65_537)
    assert combine(crc64.crc64nvme(a), crc64.crc64nvme(b), len(b)) == crc64.crc64nvme(a + b)
    assert combine(crc64.crc64nvme(a), crc64.crc64nvme(b""), 0) == crc64.crc64nvme(a)
    assert combine(crc64.crc64nvme(b""), crc64.crc64nvme(b), len(b)) == crc64.crc64nvme(b)


def test_without_the_c_module_the_pure_python_form_is_used():
    """TRAINVISOR_PURE_PYTHON (as for the parsers): the fallback a missing build gets."""
    env = {**os.environ, "TRAINVISOR_PURE_PYTHON": "1"}
    code = ("from trainvisor.uploaders import crc64nvme as c; "
            "print(c.NATIVE, c.crc64nvme is c.py_crc64nvme, hex(c.crc64nvme(b'123456789')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout == "False True 0xae8b14860a799888\n", done.stderr


def test_bad_input_is_a_type_error_not_a_crash():
    with pytest.raises(TypeError):
        crc64.crc64nvme("text, not bytes")
