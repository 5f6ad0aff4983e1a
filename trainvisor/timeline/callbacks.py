"""The callback API: a `Callback` has `on_<event>` methods, called with keyword arguments.

    class EarlyStop(trainvisor.Callback):
        def on_epoch_end(self, epoch, values):
            if values.get("val/loss", 0) > 10:
                return f"val/loss diverged at epoch {epoch}"   # a stop vote, with its reason

A hook may accept any subset of its event's fields (timeline/events.py), plus `event` (the
record itself); `**kwargs` takes them all. As pluggy does, a callback is checked when it is
*registered*, not when a hook first fires ten hours in: an `on_` method whose event does not
exist (`on_epoch_ends`) or a parameter its event does not give (`val_loss`) is a ConfigError
naming the callback and the hook. Subclassing `Callback` is optional: any object whose `on_*`
methods pass the check is a callback.

A hook votes to stop the training by returning True or a reason (a non-empty string); any other
return value is no vote (dispatch.py collects the votes).
"""
from __future__ import annotations

import difflib
import importlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

from ..errors import ConfigError
from .events import EVENT_TYPES, event_fields

__all__ = ["Callback", "Registered", "Hook", "register_callback", "register_all", "load_callback", "HOOK_NAMES"]

HOOK_NAMES = tuple("on_" + kind for kind in EVENT_TYPES)


class Callback:
    """Base class of a callback (optional): define any of `on_train_begin`, `on_batch_end`,
    `on_epoch_end`, `on_test_end`, `on_checkpoint`, `on_train_end`. `name` labels it in errors,
    the log and the fault counts (default: the class name)."""

    name: str = ""


@dataclass(frozen=True)
class Hook:
    """One checked hook: the bound method and the keyword arguments it takes (None: all)."""

    kind: str
    method: Callable[..., Any]
    wants: Optional[frozenset]


@dataclass(frozen=True)
class Registered:
    """A callback that passed the check: its label and its hooks by event kind."""

    label: str
    callback: object
    hooks: Mapping[str, Hook]


def _label(obj: object) -> str:
    return str(getattr(obj, "name", "") or type(obj).__name__)


def register_callback(obj: object, *, label: Optional[str] = None) -> Registered:
    """Check `obj`'s hooks; ConfigError (one line, naming it) for a misspelled hook or argument."""
    label = label or _label(obj)
    hooks: dict[str, Hook] = {}
    for attr in dir(type(obj)):
        if not attr.startswith("on_"):
            continue
        kind = attr[3:]
        if kind not in EVENT_TYPES:
            close = difflib.get_close_matches(attr, HOOK_NAMES, n=1)
            hint = f"; did you mean {close[0]}?" if close else f" (hooks: {', '.join(HOOK_NAMES)})"
            raise ConfigError(f"callback {label}: unknown hook {attr}{hint}")
        method = getattr(obj, attr)
        if not callable(method):
            raise ConfigError(f"callback {label}: {attr} is not a method")
        hooks[kind] = Hook(kind, method, _wanted(label, attr, method, frozenset(event_fields(kind))))
    if not hooks:
        raise ConfigError(f"callback {label}: no hook (define one of {', '.join(HOOK_NAMES)})")
    return Registered(label, obj, hooks)


def _wanted(label: str, attr: str, method: Callable, given: frozenset) -> Optional[frozenset]:
    """The arguments `method` asks for, each one its event gives; None when it takes **kwargs."""
    try:
        params = inspect.signature(method).parameters.values()
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"callback {label}: cannot read the signature of {attr}: {exc}") from exc
    wants, takes_all = set(), False
    for p in params:
        if p.kind is p.VAR_KEYWORD:
            takes_all = True
        elif p.kind is p.VAR_POSITIONAL:
            continue
        elif p.kind is p.POSITIONAL_ONLY:
            raise ConfigError(f"callback {label}: {attr}({p.name}) is positional-only; hooks are called "
                              f"with keyword arguments ({', '.join(sorted(given))})")
        elif p.name not in given:
            close = difflib.get_close_matches(p.name, sorted(given), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ConfigError(f"callback {label}: {attr} asks for {p.name!r}, which the {attr[3:]} event does not "
                              f"give (it gives {', '.join(sorted(given))}){hint}")
        else:
            wants.add(p.name)
    return None if takes_all else frozenset(wants)


def load_callback(spec: str, options: Mapping[str, Any] = {}, *, setting: str = "callbacks.use") -> Registered:
    """`module:Name` (a class or factory called with `options`, or an object used as it is),
    imported, made and checked; ConfigError (one line, naming `setting` and `spec`) otherwise."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"{setting}: {spec!r} is not module:Class (e.g. mypkg.callbacks:EarlyStop)")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or the module's own error while importing
        raise ConfigError(f"{setting}: cannot import {module_name} for {spec}: {type(exc).__name__}: {exc}") from exc
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigError(f"{setting}: {module_name} has no {attr} (for {spec})") from None
    if callable(target) and not _is_callback_object(target):
        try:
            target = target(**options)
        except Exception as exc:
            raise ConfigError(f"{setting}: {spec}({_show(options)}) failed: {type(exc).__name__}: {exc}") from exc
    elif options:
        raise ConfigError(f"{setting}: {spec} is an object, not a class: it takes no options")
    return register_callback(target, label=_label(target) if getattr(target, "name", "") else spec)


def _is_callback_object(target: object) -> bool:
    """An instance with hooks is used as it is; a class or factory function is called."""
    return not isinstance(target, type) and any(a.startswith("on_") for a in dir(type(target)))


def _show(options: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in options.items())


def register_all(objects: Sequence[object]) -> list[Registered]:
    """The caller's callback objects, each checked (an already registered one kept as it is)."""
    return [o if isinstance(o, Registered) else register_callback(o) for o in objects]
