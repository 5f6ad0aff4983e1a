"""`params.get_value("a.b.c", default=..., is_required=...)`: the job's JSON parameters
(`<workspace>/params/default.json`, or the file `AVA_PARAMS_FILE` names), read with dotted keys.

The file is read at each call (it is small, and a test or a launcher may write it after import).
A missing required key, or a file that is not JSON, is a one-line `ParamsError`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Optional

from ....errors import ConfigError
from ..workspace import Workspace

__all__ = ["ParamsError", "PARAMS_ENV", "get_value", "get_all", "params_file"]

PARAMS_ENV = "AVA_PARAMS_FILE"
_MISSING = object()


class ParamsError(ConfigError):
    """A required parameter is missing, or the parameter file cannot be read."""


def params_file(env: Optional[Mapping[str, str]] = None) -> Path:
    env = os.environ if env is None else env
    named = env.get(PARAMS_ENV)
    return Path(named) if named else Workspace.from_env(env).params_file


def get_all(path: Optional[str] = None) -> dict:
    """Every parameter; {} when there is no parameter file (a job started without any)."""
    file = Path(path) if path else params_file()
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ParamsError(f"{file}: cannot read the parameters: {exc.strerror}") from None
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError as exc:
        raise ParamsError(f"{file}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ParamsError(f"{file}: the parameters must be a JSON object, got {type(data).__name__}")
    return data


def get_value(key: str, default: Any = None, is_required: bool = False, *, path: Optional[str] = None) -> Any:
    """The value at `key` ("solver.base_lr" walks nested objects; a key that holds dots itself is
    found too), else `default`; ParamsError when `is_required` and it is missing."""
    value = _lookup(get_all(path), key)
    if value is _MISSING:
        if is_required:
            raise ParamsError(f"parameter {key!r} is required but not set in {path or params_file()}")
        return default
    return value


def _lookup(data: Any, key: str) -> Any:
    if not isinstance(data, dict):
        return _MISSING
    if key in data:
        return data[key]
    head, dot, rest = key.partition(".")
    while dot:  # the longest prefix first would be as right; the first match is AVA's reading
        if head in data:
            found = _lookup(data[head], rest)
            if found is not _MISSING:
                return found
        nxt, dot, rest = rest.partition(".")
        head = f"{head}.{nxt}"
    return _MISSING
