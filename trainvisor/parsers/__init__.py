"""Parser registry: a name on the command line -> a parser class.

Other code (``auto``, the CLI's parser list) reads the registry through its
public view only: a frozen `ParserInfo` per parser (`parser_infos`,
`get_parser_info`), never the classes.
"""
from __future__ import annotations

import importlib
from typing import Callable, TypeVar

from .._frozen import frozen
from ..errors import ParserError
from .base import LineParser, Parser, ParserOptions

__all__ = [
    "Parser",
    "LineParser",
    "ParserOptions",
    "register_parser",
    "create_parser",
    "available_parsers",
    "ParserInfo",
    "parser_infos",
    "get_parser_info",
]


@frozen
class ParserInfo:
    """What a registered parser declares about itself.

    `signature`: a regex (MULTILINE) over lines only its format prints, which
    ``auto`` counts to choose; "" when it has none. `markers`: substrings of which
    every line it takes a metric from carries at least one (a cheap pre-check, and
    what the property tests hold it to); () when it declares none.
    """

    name: str
    description: str
    signature: str = ""
    markers: tuple[str, ...] = ()

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


# Built-in parser name -> its module. A module is imported (and its patterns compiled) only when
# its parser is asked for by name, or when every parser is listed: `auto` choosing by the command
# line, or a run whose child prints nothing, never pays for the other eleven.
BUILTIN_MODULES = {
    "auto": "auto", "caffe": "caffe", "darknet": "darknet", "detectron2": "detectron2", "generic": "generic",
    "huggingface": "huggingface", "keras": "keras", "lightning": "lightning", "mmdet": "mmdet", "mxnet": "mxnet",
    "pytorch": "pytorch", "tensorflow": "tensorflow", "yolo": "yolo",
}


def _load_builtins() -> None:
    global _BUILTINS_LOADED
    if not _BUILTINS_LOADED:
        _BUILTINS_LOADED = True
        from . import builtin  # noqa: F401  (registers on import)


def _lookup(name: str) -> Callable[[ParserOptions], Parser]:
    if name not in _REGISTRY and name in BUILTIN_MODULES:
        importlib.import_module(f".{BUILTIN_MODULES[name]}", __name__)  # registers on import
    cls = _REGISTRY.get(name)
    if cls is None:
        _load_builtins()  # so the error lists every parser
        raise _unknown(name)
    return cls


def create_parser(name: str, options: ParserOptions | None = None) -> Parser:
    return _lookup(name)(options or ParserOptions())


def _info(cls: object) -> ParserInfo:
    return ParserInfo(
        name=cls.name,  # type: ignore[attr-defined]
        description=cls.description,  # type: ignore[attr-defined]
        signature=getattr(cls, "signature", "") or "",
        markers=tuple(getattr(cls, "markers", None) or ()),
    )


def parser_infos() -> tuple[ParserInfo, ...]:
    """Every registered parser, sorted by name."""
    _load_builtins()
    return tuple(_info(_REGISTRY[n]) for n in sorted(_REGISTRY))


def get_parser_info(name: str) -> ParserInfo:
    """The registered parser `name`; ParserError naming the known ones otherwise."""
    return _info(_lookup(name))


def _unknown(name: str) -> ParserError:
    return ParserError(f"unknown parser {name!r} (available: {', '.join(sorted(_REGISTRY))})")


def available_parsers() -> list[tuple[str, str]]:
    """(name, one-line description) of every registered parser, sorted by name."""
    return [(i.name, i.description) for i in parser_infos()]
