"""One exception hierarchy: the CLI maps each to a one-line message and an exit code."""
from __future__ import annotations

from .secrets import mask_text

__all__ = [
    "TrainvisorError",
    "ConfigError",
    "ParserError",
    "CommandNotFound",
    "CommandNotExecutable",
]


class TrainvisorError(Exception):
    """Root of every error trainvisor raises on purpose. `exit_code` is what the CLI exits with.
    Its message is masked when it is made (secrets.mask_text): a store's error quotes its URL, a
    bad value is quoted back, and the message then goes to stderr, the run log, summary.json."""

    exit_code = 2

    def __init__(self, *args: object) -> None:
        super().__init__(*(mask_text(a) if isinstance(a, str) else a for a in args))


class ConfigError(TrainvisorError):
    """Bad options, bad file, bad URL: the user can fix it."""


class ParserError(ConfigError):
    """Unknown parser name or invalid parser configuration."""


class CommandNotFound(TrainvisorError):
    """The training command does not exist (a shell exits 127 for this)."""

    exit_code = 127


class CommandNotExecutable(TrainvisorError):
    """The training command exists but cannot be executed (a shell exits 126)."""

    exit_code = 126
