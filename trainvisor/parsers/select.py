"""What the CLI calls: a parser name (``auto`` by default) plus an optional rules file -> one parser."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..defaults import PARSER
from . import create_parser
from .base import Parser, ParserOptions

__all__ = ["build_parser", "DEFAULT_PARSER"]

DEFAULT_PARSER = PARSER


def build_parser(name: str = DEFAULT_PARSER, options: ParserOptions | None = None, *,
                 rules: Optional[str | Path] = None) -> Parser:
    """The parser `name`, wrapped by the rules of `rules` (mode add) or replaced by them (mode replace).

    The rules file is loaded first so a bad file fails before anything starts.
    """
    if rules is None:
        return create_parser(name, options)
    from .rules import RulesParser, load_rules  # yaml and regex only when a rules file is given

    ruleset = load_rules(rules)
    base = create_parser(name, options) if ruleset.mode == "add" else None
    return RulesParser(ruleset, base)
