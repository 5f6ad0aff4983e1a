"""The flags of `trainvisor run` and `trainvisor config show`, one per configuration key.

A flag has no default of its own: one given on the command line overrides the config file (and
the environment), one left out leaves the file's value, and the schema's default stands when no
one says anything. Help texts and shown defaults come from the schema, so there is one source.
"""
from __future__ import annotations

import functools
import typing
from dataclasses import fields
from typing import Any, Callable, NamedTuple, Optional

import click
from click.core import ParameterSource

from ..config import RunConfig
from ..config.convert import type_hints
from ..config.files import Layer
from ..config.settings import help_of

__all__ = ["Flag", "RUN_FLAGS", "PARSING_FLAGS", "with_flags", "overrides", "config_option"]


class Flag(NamedTuple):
    """`--settle` sets `watch.settle`. `switch` names the off form of a boolean (`--no-summary`).
    A NamedTuple: every command line defines it, and a frozen dataclass costs ~0.5 ms to define."""

    decl: str
    key: tuple[str, str]
    short: Optional[str] = None
    switch: Optional[str] = None
    metavar: Optional[str] = None

    @property
    def dest(self) -> str:
        return "_".join(self.key)


PARSING_FLAGS = (
    Flag("--parser", ("parsing", "parser"), metavar="NAME|auto"),
    Flag("--rules", ("parsing", "rules"), metavar="FILE"),
    Flag("--year", ("parsing", "year")),
    Flag("--iters-per-epoch", ("parsing", "iters_per_epoch")),
    Flag("--max-line-bytes", ("parsing", "max_line_bytes")),
    Flag("--ranks", ("parsing", "ranks"), metavar="0|0,3|all"),
)

RUN_FLAGS = PARSING_FLAGS + (
    Flag("--metrics", ("sinks", "jsonl"), metavar="PATH"),
    Flag("--sink", ("sinks", "use"), metavar="NAME"),
    Flag("--sink-host", ("sinks", "host"), metavar="auto|on|off"),
    Flag("--run-dir", ("run", "dir"), metavar="DIR"),
    Flag("--run-id", ("run", "id")),
    Flag("--log-file", ("process", "output_log"), metavar="PATH"),
    Flag("--shell", ("process", "shell")),
    Flag("--pty", ("process", "pty")),
    Flag("--cwd", ("process", "cwd"), metavar="DIR"),
    Flag("--kill-timeout", ("process", "kill_timeout"), metavar="SECONDS"),
    Flag("--stop-grace", ("process", "stop_grace"), metavar="SECONDS"),
    Flag("--on-supervisor-death", ("process", "on_supervisor_death"), metavar="term|keep"),
    Flag("--grace", ("process", "grace"), metavar="SECONDS"),
    Flag("--term-signal", ("process", "term_signal"), metavar="SIGTERM|SIGINT|..."),
    Flag("--exit-checkpoint-wait", ("process", "exit_checkpoint_wait"), metavar="SECONDS"),
    Flag("--health-port", ("health", "port"), metavar="PORT"),
    Flag("--health-host", ("health", "host"), metavar="ADDRESS"),
    Flag("--health-max-metric-age", ("health", "max_metric_age"), metavar="SECONDS"),
    Flag("--summary", ("logging", "summary"), switch="--no-summary"),
    Flag("--quiet", ("logging", "quiet"), short="-q"),
    Flag("--watch", ("watch", "dirs"), metavar="DIR"),
    Flag("--poll", ("watch", "poll")),
    Flag("--settle", ("watch", "settle"), metavar="SECONDS"),
    Flag("--checkpoint-pattern", ("watch", "checkpoint_patterns"), metavar="GLOB|re:REGEX"),
    Flag("--upload-policy", ("watch", "policy"), metavar="all|epoch-end|every-N|last"),
    Flag("--solver-watch", ("watch", "solver_watch"), switch="--no-solver-watch"),
    Flag("--announced-watch", ("watch", "announced"), switch="--no-announced-watch"),
    Flag("--default-watch", ("watch", "defaults"), switch="--no-default-watch"),
    Flag("--follow", ("watch", "follow"), metavar="GLOB"),
    Flag("--upload-to", ("upload", "to"), metavar="URL"),
    Flag("--drain-timeout", ("upload", "drain_timeout"), metavar="SECONDS"),
    Flag("--delete-after-upload", ("upload", "delete_after_upload")),
    Flag("--upload-concurrency", ("upload", "concurrency"), metavar="N"),
    Flag("--upload-rate-limit", ("upload", "rate_limit"), metavar="RATE"),
    Flag("--upload-retry-max-delay", ("upload", "retry_max_delay"), metavar="SECONDS"),
    Flag("--credentials", ("upload", "credentials"), metavar="FILE"),
    Flag("--keep-last", ("upload", "keep_last"), metavar="N"),
    Flag("--keep-best", ("upload", "keep_best"), metavar="K"),
    Flag("--best-by", ("upload", "best_by"), metavar="'METRIC max|min'"),
    Flag("--stop-when", ("stop", "when"), metavar="RULE"),
    Flag("--callback", ("callbacks", "use"), metavar="MODULE:CLASS"),
    Flag("--restart", ("restart", "policy"), metavar="never|on-failure"),
    Flag("--max-restarts", ("restart", "max_restarts"), metavar="N"),
    Flag("--restart-backoff", ("restart", "backoff"), metavar="SECONDS"),
    Flag("--resume-arg", ("restart", "resume_arg"), metavar="TEMPLATE"),
    Flag("--resume-from", ("restart", "resume_from"), metavar="URL"),
)

_TYPES = {float: click.FLOAT, int: click.INT, str: click.STRING}


def _schema_field(key: tuple[str, str]) -> tuple[Any, Any, Any]:
    section_cls = type_hints(RunConfig)[key[0]]
    f = next(f for f in fields(section_cls) if f.name == key[1])
    return f, type_hints(section_cls)[key[1]], f.default


def _one_or_many(t: Any) -> bool:
    """A setting that takes one string or a list of them (`upload.to`): its flag is repeatable."""
    return any(typing.get_origin(a) is tuple for a in typing.get_args(t))


def _option(flag: Flag) -> Callable:
    f, t, default = _schema_field(flag.key)
    inner = [a for a in typing.get_args(t) if a is not type(None)]
    base = inner[0] if inner else t
    shown = "" if default in (None, (), False) else f" [default: {default}]"
    help_text = help_of(f) + shown
    names = [n for n in (flag.short, flag.decl) if n]
    if base is bool and flag.switch:
        return click.option(f"{flag.decl}/{flag.switch}", flag.dest, default=None, help=help_text)
    if base is bool:
        return click.option(*names, flag.dest, is_flag=True, flag_value=True, default=None, help=help_text)
    if typing.get_origin(t) is tuple or _one_or_many(t):
        return click.option(*names, flag.dest, multiple=True, metavar=flag.metavar, help=help_text + " Repeatable.")
    return click.option(*names, flag.dest, type=_TYPES[base], default=None, metavar=flag.metavar, help=help_text)


def _add(flags: tuple[Flag, ...], f: Callable) -> Callable:
    for flag in reversed(flags):
        f = _option(flag)(f)
    return f


def config_option(f: Callable) -> Callable:
    return click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None, metavar="FILE",
                        help="YAML or TOML configuration (see `trainvisor config show`); flags override it. "
                             "Default: $TRAINVISOR_CONFIG.")(f)


def overrides(ctx: click.Context, flags: tuple[Flag, ...], values: dict[str, Any]) -> Layer:
    """The flags given on the command line, as a config layer that remembers each flag's name."""
    layer = Layer()
    for flag in flags:
        value = values.get(flag.dest)
        if ctx.get_parameter_source(flag.dest) in (None, ParameterSource.DEFAULT) or value is None:
            continue
        if isinstance(value, tuple) and not value:
            continue
        if isinstance(value, tuple):  # `--upload-to URL` once stays the one string a config file would hold
            value = value[0] if len(value) == 1 and _one_or_many(_schema_field(flag.key)[1]) else list(value)
        layer.set(flag.key, value, flag.decl)
    return layer


def pop_flags(flags: tuple[Flag, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Take the flags' values out of a command's keyword arguments."""
    return {flag.dest: kwargs.pop(flag.dest, None) for flag in flags}


def with_flags(flags: tuple[Flag, ...]) -> Callable[[Callable], Callable]:
    """Decorate a command: its flags arrive as one `flag_values` dict."""

    def decorate(f: Callable) -> Callable:
        @functools.wraps(f)
        def wrapper(**kwargs: Any) -> Any:
            values = pop_flags(flags, kwargs)
            return f(flag_values=values, **kwargs)

        return _add(flags, wrapper)

    return decorate
