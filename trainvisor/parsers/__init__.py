"""Parser registry: a name on the command line -> a parser class."""
from __future__ import annotations

from typing import Callable, TypeVar

from ..errors import ParserError
from .base import LineParser, Parser, ParserOptions

__all__ = [
    "Parser",
    "LineParser",
    "ParserOptions",
    "register_parser",
    "create_parser",
    "available_parsers",
]

_REGISTRY: dict[str, Callable[[ParserOptions], Parser]] = {}
_BUILTINS_LOADED = False

T = TypeVar("T")


def register_parser(cls: T) -> T:
    """Class decorator. Rejects a malformed parser when it is registered, not when it runs."""
    name = getattr(cls, "name", "")
    if not isinstance(name, str) or not name or not name.replace("-", "").replace("_", "").isalnum():
        raise ParserError(f"parser {cls!r}: needs a class attribute 'name' (letters, digits, - or _)")
    if not getattr(cls, "description", ""):
        raise ParserError(f"parser {name!r}: needs a one-line class attribute 'description'")
    for method in ("feed", "finish"):
        if not callable(getattr(cls, method, None)):
            raise ParserError(f"parser {name!r}: has no method {method}()")
    if name in _REGISTRY and _REGISTRY[name] is not cls:
        raise ParserError(f"parser {name!r} is registered twice ({_REGISTRY[name]!r} and {cls!r})")
    _REGISTRY[name] = cls  # type: ignore[assignment]
    return cls


def _load_builtins() -> None:
    global _BUILTINS_LOADED
    if not _BUILTINS_LOADED:
        _BUILTINS_LOADED = True
        from . import builtin  # noqa: F401  (registers on import)


def create_parser(name: str, options: ParserOptions | None = None) -> Parser:
    _load_builtins()
    try:
        cls = _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise ParserError(f"unknown parser {name!r} (available: {known})") from None
    return cls(options or ParserOptions())


def available_parsers() -> list[tuple[str, str]]:
    """(name, one-line description) of every registered parser, sorted by name."""
    _load_builtins()
    return sorted((n, c.description) for n, c in _REGISTRY.items())  # type: ignore[attr-defined]
