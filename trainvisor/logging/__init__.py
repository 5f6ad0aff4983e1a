"""Multiprocess-safe logging: one writer per log file, any number of processes logging to it.

This package is `trainvisor.logging`; the `import logging` inside it is the standard library.
`trainvisor.logging.ava` has the same handler with the AVA SDK's defaults.
"""
from __future__ import annotations

from .handler import MultiProcessingLogHandler
from .protocol import ENV_VAR
from .setup import DEFAULT_FORMAT, attach, initialize_logger, log_uncaught_exceptions
from .writer import LogWriterError, LogWriterServer, RotatingFile

__all__ = [
    "ENV_VAR",
    "DEFAULT_FORMAT",
    "LogWriterError",
    "LogWriterServer",
    "MultiProcessingLogHandler",
    "RotatingFile",
    "attach",
    "initialize_logger",
    "log_uncaught_exceptions",
]
