"""trainvisor: wrap a training command, pass its output through, parse its metrics,
back up its checkpoints."""
from __future__ import annotations

__version__ = "0.1.0"

from .errors import TrainvisorError
from .events import CheckpointEvent, LineRecord, Metric
from .lines import LineBlock, LineSplitter
from .parsers import ParserOptions, available_parsers, create_parser, register_parser
from .pipeline import Pipeline
from .replay import replay

__all__ = [
    "__version__",
    "TrainvisorError",
    "CheckpointEvent",
    "LineRecord",
    "Metric",
    "LineBlock",
    "LineSplitter",
    "ParserOptions",
    "available_parsers",
    "create_parser",
    "register_parser",
    "Pipeline",
    "replay",
    "RunResult",
    "Supervisor",
]


def __getattr__(name: str):
    # The supervisor pulls in psutil; `trainvisor parse` / `replay` never need it.
    if name in ("Supervisor", "RunResult"):
        from . import supervisor

        return getattr(supervisor, name)
    raise AttributeError(f"module 'trainvisor' has no attribute {name!r}")
