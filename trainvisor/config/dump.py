"""Writing a `RunConfig` as YAML or TOML that `--config` reads back to the same configuration,
with each key's help as a comment so a printed config is a starting point for a user's own.

Scalars are written as JSON literals, which both formats read the same way; secrets are masked.
"""
from __future__ import annotations

import json
import re
from dataclasses import fields, is_dataclass
from typing import Any

from .convert import to_dict
from .settings import help_of

__all__ = ["dump", "FORMATS"]

FORMATS = ("yaml", "toml")
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def dump(config: Any, fmt: str = "yaml") -> str:
    data = to_dict(config, mask_secrets=True)
    if fmt == "toml":
        return "\n".join(_toml(config, data)) + "\n"
    return "\n".join(_yaml(config, data)) + "\n"


def _helps(section: Any) -> dict[str, str]:
    return {f.name: help_of(f) for f in fields(section)}


def _literal(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _key(name: str) -> str:
    return name if _BARE_KEY.match(name) else json.dumps(name)


def _yaml(config: Any, data: dict) -> list[str]:
    out: list[str] = []
    helps = _helps(config)
    for name, value in data.items():
        section = getattr(config, name)
        if is_dataclass(section):
            out.append(f"{name}:")
            for key, v in value.items():
                out.append(f"  # {_helps(section)[key]}")
                out.extend(_yaml_entry(key, v, "  "))
        else:
            out.append(f"# {helps[name]}")
            out.extend(_yaml_entry(name, value, ""))
    return out


def _yaml_entry(key: str, value: Any, indent: str) -> list[str]:
    if isinstance(value, dict) and value:
        return [f"{indent}{_key(key)}:"] + [f"{indent}  {_key(k)}: {_literal(v)}" for k, v in value.items()]
    return [f"{indent}{_key(key)}: {_literal(value)}"]


def _toml(config: Any, data: dict) -> list[str]:
    out: list[str] = []
    tables: list[str] = []
    helps = _helps(config)
    for name, value in data.items():
        section = getattr(config, name)
        if not is_dataclass(section):
            out += [f"# {helps[name]}", f"{_key(name)} = {_literal(value)}"]
            continue
        tables += ["", f"[{name}]"]
        nested: list[str] = []
        for key, v in value.items():
            if isinstance(v, dict):
                nested += ["", f"# {_helps(section)[key]}", f"[{name}.{_key(key)}]"]
                nested += [f"{_key(k)} = {_toml_value(x)}" for k, x in v.items()]
            elif v is None:
                tables.append(f"# {_key(key)}: not set. {_helps(section)[key]}")
            else:
                tables += [f"# {_helps(section)[key]}", f"{_key(key)} = {_literal(v)}"]
        tables += nested
    return out + tables


def _toml_value(value: Any) -> str:
    """A value as TOML writes it: JSON's literals, but a table inline as `{key = value}`."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return _literal(value)
