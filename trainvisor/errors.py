"""One exception hierarchy: the CLI maps each to a one-line message and an exit code."""
from __future__ import annotations

__all__ = [
    "TrainvisorError",
    "ConfigError",
    "ParserError",
    "CommandNotFound",
    "CommandNotExecutable",
]


class TrainvisorError(Exception):
    """Root of every error trainvisor raises on purpose. `exit_code` is what the CLI exits with."""

    exit_code = 2


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
