"""Names a package exports but loads on first use (PEP 562), so importing the package stays cheap:
`trainvisor` must not pay for the parsers or the uploaders before a run needs them."""
from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(package: str, namespace: dict, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package`: `exports` maps a name to the submodule (relative to the
    package) that defines it; the value is imported once and then kept in `namespace`."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", package), name)
        namespace[name] = value
        return value

    return __getattr__
