"""Metadata lives in setup.cfg; this file only declares the optional C speedups.

`optional=True`: without a compiler the install still succeeds and the Caffe and
generic parsers and the sinks run their pure-Python code (same results, slower).
Each extension belongs to its folder: the Caffe and generic line scanners to
parsers/, the record formatting to sinks/; all include the shared exact number
routines (trainvisor/_native/fastnum.h), so none imports another. The pipe pump
(trainvisor/_native/_pump.c) serves two areas (supervisor/readers.py, stderr_gate.py),
so it lives in _native/; without it the pass-through is the Python readers'. The CRC-64/NVME
(trainvisor/_native/_crc64.c: S3's CRC64NVME) verifies uploads and downloads; without it
uploaders/crc64nvme.py computes the same values in Python, slowly.
"""
from setuptools import Extension, setup

_SHARED = ["trainvisor/_native/fastnum.h"]

setup(
    ext_modules=[
        Extension(
            "trainvisor.parsers._caffe_scan",
            ["trainvisor/parsers/_caffe_scan.c"],
            depends=_SHARED + ["trainvisor/parsers/_caffe_grammar.h"],
            optional=True,
        ),
        Extension(
            "trainvisor.parsers._generic_scan",
            ["trainvisor/parsers/_generic_scan.c"],
            depends=_SHARED + ["trainvisor/parsers/_generic_grammar.h", "trainvisor/parsers/_generic_events.h",
                               "trainvisor/parsers/_generic_tables.h", "trainvisor/parsers/_generic_coco.h",
                               "trainvisor/parsers/_generic_json.h", "trainvisor/parsers/_generic_bars.h"],
            optional=True,
        ),
        Extension(
            "trainvisor.sinks._format",
            ["trainvisor/sinks/_format.c", "trainvisor/sinks/_pivot.c", "trainvisor/sinks/_phase_csv.c",
             "trainvisor/sinks/_latest.c", "trainvisor/sinks/_count.c"],
            depends=_SHARED + ["trainvisor/sinks/_format.h"],
            optional=True,
        ),
        # The pipe pump: the child's bytes passed through by a C thread, never waiting for the
        # interpreter lock the parsing holds (supervisor/readers.py; stderr_gate.py's gate).
        Extension(
            "trainvisor._native._pump",
            ["trainvisor/_native/_pump.c"],
            depends=["trainvisor/_native/_outlets.h"],
            optional=True,
        ),
        # S3's CRC64NVME, checked once per byte while a part is in memory (uploaders/crc64nvme.py).
        Extension("trainvisor._native._crc64", ["trainvisor/_native/_crc64.c"], optional=True),
        # The death watcher: a forked process that sends the child one signal when trainvisor dies
        # (supervisor/deathwatch.py); without it the child keeps PR_SET_PDEATHSIG.
        Extension("trainvisor._native._deathwatch", ["trainvisor/_native/_deathwatch.c"], optional=True),
        # prctl (child subreaper, parent-death signal) and sigaction without ctypes (supervisor/).
        Extension("trainvisor._native._proc", ["trainvisor/_native/_proc.c"], optional=True),
    ]
)
