"""Between plain data (what YAML, TOML, flags and the environment give) and `RunConfig`.

One routine checks every value, wherever it came from: its type, its range, and whether its key
exists. Errors are one line naming the key and, where known, where it was written
(`run.yaml:12: watch.settle: must not be negative (got -1)`). Secret values never appear in an
error or in printed output.
"""
from __future__ import annotations

import collections.abc
import functools
import re
import typing
from dataclasses import fields, is_dataclass
from types import MappingProxyType
from typing import Any, Mapping, Optional, Union

from ..errors import ConfigError
from ..secrets import MASK, mask_url
from .settings import check_of, is_secret, shows_value

__all__ = ["Section", "from_dict", "to_dict", "normalise_and_check", "type_hints", "Locations", "MASK", "mask_url"]

Key = tuple[str, ...]
Locations = Mapping[Key, str]
"""Where each key was written: `run.yaml:12`, `--settle`, `TRAINVISOR__WATCH__SETTLE`."""

_SECRET_NAME = re.compile(r"KEY|SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)


@functools.lru_cache(maxsize=None)
def type_hints(cls: type) -> dict[str, Any]:
    """The resolved annotations of a config class; resolving them is slow, and every section
    instance is checked when built, so once per class."""
    return typing.get_type_hints(cls)


class _Context:
    def __init__(self, source: Optional[str], locations: Optional[Locations]) -> None:
        self.source = source
        self.locations = locations or {}

    def fail(self, key: Key, problem: str) -> ConfigError:
        where = self._where(key)
        dotted = ".".join(key) or "configuration"
        return ConfigError(f"{where}{dotted}: {problem}")

    def _where(self, key: Key) -> str:
        for n in range(len(key), -1, -1):  # the key's own place, else its section's
            if key[:n] in self.locations:
                return self.locations[key[:n]] + ": "
        return f"{self.source}: " if self.source else ""


def from_dict(cls: type, data: Any, *, source: Optional[str] = None, locations: Optional[Locations] = None) -> Any:
    """Build the dataclass `cls` from nested plain data; unknown keys, wrong types and bad values
    raise a one-line `ConfigError`."""
    return _build(cls, data, (), _Context(source, locations))


def _build(cls: type, data: Any, key: Key, ctx: _Context) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ctx.fail(key, f"must be a table of settings, got {_kind(data)}")
    known = {f.name: f for f in fields(cls)}
    hints = type_hints(cls)
    kwargs = {}
    for name, value in data.items():
        if name not in known:
            raise ctx.fail(key + (str(name),), "unknown key" + _suggest(str(name), known))
        t = hints[name]
        if is_dataclass(t):
            kwargs[name] = _build(t, value, key + (name,), ctx)
        else:
            kwargs[name] = _coerce(t, value, key + (name,), ctx, is_secret(known[name]))
            _check(known[name], kwargs[name], key + (name,), ctx)
    return cls(**kwargs)


def _check(f: Any, value: Any, key: Key, ctx: _Context) -> None:
    check = check_of(f)
    problem = check(value) if check is not None else None
    if problem:
        shown = "" if is_secret(f) or shows_value(f) else f" (got {value!r})"
        raise ctx.fail(key, problem + shown)


def _coerce(t: Any, value: Any, key: Key, ctx: _Context, secret: bool) -> Any:
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is Union:  # Optional[X]; `upload.to`: a string or a list of them, each kept as written
        if value is None and type(None) in args:
            return None
        kinds = [a for a in args if a is not type(None)]
        listed = [a for a in kinds if typing.get_origin(a) is tuple]
        pick = listed[0] if listed and isinstance(value, (list, tuple)) else next(a for a in kinds if a not in listed)
        return _coerce(pick, value, key, ctx, secret)
    if value is None:
        raise ctx.fail(key, "must be given a value (null is not allowed here)")
    if origin is tuple:
        return _string_tuple(value, key, ctx)
    if origin is collections.abc.Mapping:
        if args and args[1] is not str:  # a table of tables (sinks.options): each inner table kept as written
            return _table_of_tables(value, key, ctx)
        return _string_mapping(value, key, ctx, secret)
    return _scalar(t, value, key, ctx, secret)


def _scalar(t: type, value: Any, key: Key, ctx: _Context, secret: bool) -> Any:
    if t is str and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # YAML's `ranks: 0`, `id: 2024`: the digits were meant
    if t is str and isinstance(value, bool):
        value = "on" if value else "off"  # YAML 1.1 reads `host: on` as true: the word was meant
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
    }[t]
    if not ok:
        shown = "" if secret else f", got {_kind(value)} {value!r}"
        raise ctx.fail(key, f"must be {_type_name(t)}{shown}")
    if secret and value == MASK:
        raise ctx.fail(key, f"is masked ({MASK}): write the real value or leave the key out")
    return float(value) if t is float else value


def _string_tuple(value: Any, key: Key, ctx: _Context) -> tuple[str, ...]:
    """A list of strings; a number in it is its text (`command: [python, train.py, -C, 20]`), as in
    `env`. A YAML boolean is refused: `yes` read back as "True" is not what was written."""
    if not isinstance(value, (list, tuple)):
        raise ctx.fail(key, f"must be a list of strings, got {_kind(value)}")
    out = []
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise ctx.fail(key, f"item {i + 1} ({v!r}) must be a string or a number (quote it to keep it as written)")
        out.append(v if isinstance(v, str) else str(v))
    return tuple(out)


def _string_mapping(value: Any, key: Key, ctx: _Context, secret: bool) -> Mapping[str, str]:
    if not isinstance(value, Mapping):
        raise ctx.fail(key, f"must be a table of NAME: value, got {_kind(value)}")
    out = {}
    for name, v in value.items():
        if not isinstance(name, str) or isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise ctx.fail(key + (str(name),), "must be a string or a number")
        if v == MASK and (secret or _SECRET_NAME.search(name)):
            raise ctx.fail(key + (name,), f"is masked ({MASK}): write the real value or leave the key out")
        out[name] = str(v)
    return MappingProxyType(out)


def _table_of_tables(value: Any, key: Key, ctx: _Context) -> Mapping[str, Mapping[str, Any]]:
    """NAME: {option: value} for plug-ins whose options the schema cannot know: values are plain
    data (strings, numbers, booleans, lists and tables of them), frozen; a masked secret is refused."""
    if not isinstance(value, Mapping):
        raise ctx.fail(key, f"must be a table of NAME: {{option: value}}, got {_kind(value)}")
    out = {}
    for name, table in value.items():
        if not isinstance(name, str) or not isinstance(table, Mapping):
            raise ctx.fail(key + (str(name),), f"must be a table of option: value, got {_kind(table)}")
        out[name] = _plain_data(table, key + (name,), ctx)
    return MappingProxyType(out)


def _plain_data(value: Any, key: Key, ctx: _Context) -> Any:
    if isinstance(value, Mapping):
        for k, v in value.items():
            if v == MASK and _SECRET_NAME.search(str(k)):
                raise ctx.fail(key + (str(k),), f"is masked ({MASK}): write the real value or leave the key out")
        return MappingProxyType({str(k): _plain_data(v, key + (str(k),), ctx) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_plain_data(v, key, ctx) for v in value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise ctx.fail(key, f"must be a string, number, boolean, list or table, got {_kind(value)}")


class Section:
    """Base of every config section: a value is normalised (lists to tuples, dicts to read-only
    mappings) and checked when it is built, so `WatchConfig(settle=-1)` fails where it is written,
    in Python as in a file. `section_key` is its key in a RunConfig (for error messages)."""

    section_key: typing.ClassVar[str] = ""

    def __post_init__(self) -> None:
        normalise_and_check(self)


def normalise_and_check(section: Any) -> None:
    """Lists become tuples and dicts read-only mappings; types and ranges are checked, so a
    section built in Python is held to the same rules as one read from a file."""
    hints = type_hints(type(section))
    ctx = _Context(None, None)
    prefix = (getattr(section, "section_key", ""),)
    for f in fields(section):
        t, value = hints[f.name], getattr(section, f.name)
        key = tuple(p for p in prefix + (f.name,) if p)
        if is_dataclass(t):
            if not isinstance(value, t):
                raise ctx.fail(key, f"must be a {t.__name__}, got {_kind(value)}")
            continue
        fixed = _coerce(t, value, key, ctx, is_secret(f))
        _check(f, fixed, key, ctx)
        if fixed is not value:
            object.__setattr__(section, f.name, fixed)


def to_dict(config: Any, *, mask_secrets: bool = True) -> dict[str, Any]:
    """Plain nested data in the shape `from_dict` reads; secrets replaced by `***`."""
    out: dict[str, Any] = {}
    for f in fields(config):
        value = getattr(config, f.name)
        if is_dataclass(value):
            out[f.name] = to_dict(value, mask_secrets=mask_secrets)
        elif isinstance(value, Mapping):
            out[f.name] = {k: _masked(_unfrozen(v), mask_secrets and (is_secret(f) or bool(_SECRET_NAME.search(k))),
                                      mask_secrets) for k, v in value.items()}
        elif isinstance(value, tuple):  # the command's arguments too: `--db postgres://u:pw@host`
            out[f.name] = [mask_url(v) if mask_secrets and isinstance(v, str) else v for v in value]
        elif isinstance(value, str) and mask_secrets:
            out[f.name] = MASK if is_secret(f) else mask_url(value)
        else:
            out[f.name] = value
    return out


def _masked(value: Any, secret: bool, mask: bool = True) -> Any:
    if isinstance(value, dict):  # a plug-in's options: its secret-named keys masked, the rest shown
        return {k: _masked(v, secret or (mask and bool(_SECRET_NAME.search(k))), mask) for k, v in value.items()}
    if secret:
        return MASK
    # a URL's password too (a webhook's `url: https://user:pw@host/...`), as for the config's own URLs
    return mask_url(value) if mask and isinstance(value, str) else value


def _unfrozen(value: Any) -> Any:
    """Plain dicts and lists again, as YAML, TOML and JSON write them."""
    if isinstance(value, Mapping):
        return {k: _unfrozen(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_unfrozen(v) for v in value]
    return value


def _suggest(name: str, known: Mapping[str, Any]) -> str:
    import difflib  # only a misspelled key needs it: not loaded by every run

    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(known)})"


def _type_name(t: type) -> str:
    return {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}[t]


def _kind(value: Any) -> str:
    return {dict: "a table", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "nothing"}.get(type(value), type(value).__name__)
