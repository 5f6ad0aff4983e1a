"""The AVA SDK's names with the AVA SDK's defaults, for code that switches by changing an import:
`from ava.log.logger import MultiProcessingLogHandler` -> `from trainvisor.logging.ava import ...`.

AVA's handler is `MultiProcessingLogHandler(filename, mode='w', maxBytes=0, backupCount=10)`.
`trainvisor.logging.MultiProcessingLogHandler` keeps `RotatingFileHandler`'s defaults instead
(`mode='a'`, `backupCount=0`), so that `dictConfig` files and code written for the standard
handler behave the same; this module gives AVA's.
"""
from __future__ import annotations

import os
from typing import Any

from .handler import MultiProcessingLogHandler as _Handler
from .setup import initialize_logger

__all__ = ["MultiProcessingLogHandler", "initialize_logger"]


class MultiProcessingLogHandler(_Handler):
    """AVA's defaults: `mode='w'` truncates the file when no writer has it open yet (as in
    AVA, it has no effect with `maxBytes > 0`: a rotating file is appended to), 10 backups."""

    def __init__(self, filename: str | os.PathLike[str], mode: str = "w", maxBytes: int = 0,
                 backupCount: int = 10, encoding: str | None = None, delay: bool = False,
                 errors: str | None = None, **options: Any) -> None:
        super().__init__(filename, mode, maxBytes, backupCount, encoding, delay, errors, **options)
