"""Reading configuration: YAML and TOML files, the environment, and overrides (the CLI's flags),
merged in that order of precedence: defaults < file < environment < overrides.

YAML errors name the file and line of the offending key; TOML's reader gives no positions for
values, so those name the file and the key (a syntax error still has its line).
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Optional

from ..defaults import SETTINGS_FILE_LIMIT
from ..errors import ConfigError
from .convert import Key, from_dict

__all__ = ["load_file", "load_layers", "read_file", "ENV_FILE", "ENV_PREFIX", "Layer"]

ENV_FILE = "TRAINVISOR_CONFIG"
ENV_PREFIX = "TRAINVISOR__"


class Layer:
    """Plain nested data plus where each key was written."""

    def __init__(self, data: Optional[dict] = None, locations: Optional[dict[Key, str]] = None) -> None:
        self.data: dict = data or {}
        self.locations: dict[Key, str] = locations or {}

    def set(self, key: Key, value: Any, where: str) -> None:
        node = self.data
        for part in key[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[key[-1]] = value
        self.locations[key] = where

    def merge(self, other: "Layer") -> "Layer":
        for key, value in _leaves(other.data):
            self.set(key, value, other.locations.get(key, ""))
        for key, where in other.locations.items():
            self.locations.setdefault(key, where)
        return self


def _leaves(data: Mapping, prefix: Key = ()):
    for k, v in data.items():
        if isinstance(v, dict) and v and k not in ("env", "credentials"):
            yield from _leaves(v, prefix + (k,))
        else:
            yield prefix + (k,), v


def read_file(path: str) -> Layer:
    """The file's data and the line of each key; a one-line ConfigError when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(SETTINGS_FILE_LIMIT + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    if len(raw) > SETTINGS_FILE_LIMIT:  # a 50 MB file took 23 s and 215 MB to read: refused at once
        raise ConfigError(f"config file {path}: larger than {SETTINGS_FILE_LIMIT >> 20} MiB; "
                          "a configuration is a few keys (is this the right file?)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path}: not UTF-8 text (byte {exc.start})") from exc
    if path.endswith(".toml"):
        return _read_toml(path, text)
    return _read_yaml(path, text)


def _read_toml(path: str, text: str) -> Layer:
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: bad TOML: {exc}") from exc
    return Layer(data, {(): path})


def _read_yaml(path: str, text: str) -> Layer:
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{where}: bad YAML: {problem}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a table of settings, got {type(data).__name__}")
    locations: dict[Key, str] = {(): path}
    _yaml_lines(node, (), path, locations)
    return Layer(data, locations)


def _yaml_lines(node: Any, key: Key, path: str, out: dict[Key, str]) -> None:
    import yaml

    if not isinstance(node, yaml.MappingNode):
        return
    for k, v in node.value:
        name = k.value if isinstance(k, yaml.ScalarNode) else str(k.value)
        out[key + (name,)] = f"{path}:{k.start_mark.line + 1}"
        _yaml_lines(v, key + (name,), path, out)


def env_layer(environ: Mapping[str, str]) -> Layer:
    """`TRAINVISOR__WATCH__SETTLE=5` sets watch.settle; the value is read as a YAML scalar, so
    numbers, booleans and `[a, b]` lists work."""
    layer = Layer()
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or len(name) <= len(ENV_PREFIX):
            continue
        key = tuple(part.lower() for part in name[len(ENV_PREFIX):].split("__"))
        layer.set(key, _scalar(raw, name), name)
    return layer


def _scalar(raw: str, name: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{name}: not a value: {raw!r}") from exc


def load_layers(cls: type, path: Optional[str] = None, overrides: Optional[Layer] = None,
                environ: Optional[Mapping[str, str]] = None) -> Any:
    """The effective config of class `cls` (a `RunConfig`): defaults, then the file (`path`, else
    $TRAINVISOR_CONFIG), then `TRAINVISOR__*` variables, then `overrides`."""
    environ = os.environ if environ is None else environ
    path = path or environ.get(ENV_FILE) or None
    layer = read_file(path) if path else Layer()
    layer.merge(env_layer(environ))
    if overrides is not None:
        layer.merge(overrides)
    return from_dict(cls, layer.data, source=path, locations=layer.locations)


def load_file(cls: type, path: str) -> Any:
    """`RunConfig.from_file(path)`: the file alone over the defaults (no environment)."""
    layer = read_file(path)
    return from_dict(cls, layer.data, source=path, locations=layer.locations)
