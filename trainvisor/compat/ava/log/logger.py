"""`from ava.log.logger import initialize_logger, MultiProcessingLogHandler, logger`: trainvisor's
log handler with the AVA SDK's defaults (trainvisor/logging/ava.py), re-exported where AVA had it.
`logger` is the root logger, the one AVA's `initialize_logger` configured."""
from __future__ import annotations

import logging

from ....logging.ava import MultiProcessingLogHandler, initialize_logger

__all__ = ["MultiProcessingLogHandler", "initialize_logger", "logger"]

logger = logging.getLogger()
