"""`@frozen`: the class `@dataclass(frozen=True)` makes, for a third of its making.

Why: CPython 3.11's `dataclass` writes six methods of a frozen class as source text and compiles
each with `exec` (`__init__`, `__repr__`, `__eq__`, `__hash__`, `__setattr__`, `__delattr__`):
about 0.65 ms a class of ten fields, and `trainvisor run` makes 27 such classes (the config
sections, the events, the summary) before the training starts (bench/startup.py). Here
`dataclasses` itself reads the fields (`dataclass(init=False, repr=False, eq=False)` compiles
nothing), one `exec` writes `__init__` as dataclass writes it (the same signature, defaults,
default factories, `__post_init__` call and speed), and the other five are closures over the
field names, made without a compile and doing what dataclass's do: the same repr (recursion
shown as `...`), equality of the same field tuples, the same hash, `FrozenInstanceError` on
assignment and deletion. `__dataclass_params__` says what `@dataclass(frozen=True)` says, so
`fields`, `replace`, `asdict`, `is_dataclass` and subclassing with `@dataclass(frozen=True)` work
as ever; tests/test_frozen.py compares each class with the one dataclass makes of it.

Not for keyword-only fields or InitVar: use `@dataclass(frozen=True)` there (a TypeError says so).
"""
from __future__ import annotations

import copy
import dataclasses
import reprlib
from operator import attrgetter
from typing import Any, Callable, TypeVar

__all__ = ["frozen"]

T = TypeVar("T", bound=type)

_PARAMS: list = []  # what `@dataclass(frozen=True)` records of a class (see _params)


class _Factory:
    """The default of a parameter whose field has a default_factory; shown as dataclass shows it."""

    def __repr__(self) -> str:
        return "<factory>"


_HAS_FACTORY = _Factory()


def frozen(cls: T) -> T:
    """`@dataclass(frozen=True)` with one compile instead of six (see the module's docstring)."""
    for name in ("__setattr__", "__delattr__"):
        if name in cls.__dict__:  # as dataclass refuses it
            raise TypeError(f"Cannot overwrite attribute {name} in class {cls.__name__}")
    had_doc = bool(cls.__dict__.get("__doc__"))
    cls = dataclasses.dataclass(init=False, repr=False, eq=False)(cls)
    flds = dataclasses.fields(cls)
    for f in cls.__dataclass_fields__.values():
        if f.kw_only is True or isinstance(f.type, dataclasses.InitVar) or str(f.type).startswith(
                ("InitVar", "dataclasses.InitVar")):
            raise TypeError(f"@frozen: {cls.__name__}.{f.name} is keyword-only or an InitVar: use @dataclass(frozen=True)")
    cls.__dataclass_params__ = _params(cls.__dataclass_params__)
    _set(cls, "__init__", _init(cls, flds))
    _set(cls, "__repr__", _repr([f.name for f in flds if f.repr]))
    _set(cls, "__eq__", _eq(_values([f.name for f in flds if f.compare])))
    own = cls.__dict__.get("__hash__", dataclasses.MISSING)
    if own is dataclasses.MISSING or (own is None and "__eq__" in cls.__dict__):  # else an explicit one: kept
        _set(cls, "__hash__", _hash(_values([f.name for f in flds if (f.compare if f.hash is None else f.hash)])))
    names = tuple(f.name for f in flds)
    _set(cls, "__setattr__", _setattr(cls, names))
    _set(cls, "__delattr__", _delattr(cls, names))
    if not had_doc:  # dataclass's own text, now that the signature is the real one
        import inspect

        cls.__doc__ = cls.__name__ + str(inspect.signature(cls)).replace(" -> None", "")
    return cls


def _params(made: Any) -> Any:
    """What `@dataclass(frozen=True)` records (init, repr, eq, frozen true; order, unsafe_hash
    false): the record of `dataclass(init=False, repr=False, eq=False)` with those four set, made
    once and shared, as its type is not public (a class made only to read it costs 0.4 ms)."""
    if not _PARAMS:
        params = copy.copy(made)
        params.init = params.repr = params.eq = params.frozen = True
        _PARAMS.append(params)
    return _PARAMS[0]


def _set(cls: type, name: str, fn: Callable) -> None:
    """As dataclass does: a method the class defines itself stays."""
    if name in cls.__dict__ and name not in ("__setattr__", "__delattr__", "__hash__"):
        return
    fn.__qualname__ = f"{cls.__qualname__}.{fn.__name__}"
    setattr(cls, name, fn)


def _init(cls: type, flds: tuple) -> Callable:
    """`__init__`, written and compiled once as dataclass writes a frozen class's."""
    self_name = "__dataclass_self__" if any(f.name == "self" for f in flds) else "self"
    space: dict[str, Any] = {"__dataclass_builtins_object__": object, "_HAS_DEFAULT_FACTORY": _HAS_FACTORY}
    params, body, seen_default = [self_name], [], False
    for f in flds:
        has_factory, has_default = f.default_factory is not dataclasses.MISSING, f.default is not dataclasses.MISSING
        if f.init:
            if has_default or has_factory:
                seen_default = True
            elif seen_default:
                raise TypeError(f"non-default argument {f.name!r} follows default argument")
            params.append(f.name + ("=_HAS_DEFAULT_FACTORY" if has_factory else f"=_dflt_{f.name}" if has_default else ""))
        if has_factory:
            space[f"_dflt_{f.name}"] = f.default_factory
            value = f"_dflt_{f.name}() if {f.name} is _HAS_DEFAULT_FACTORY else {f.name}" if f.init else f"_dflt_{f.name}()"
        elif f.init:
            if has_default:
                space[f"_dflt_{f.name}"] = f.default
            value = f.name
        else:
            continue  # no default factory and not in __init__: the class attribute serves
        body.append(f"  __dataclass_builtins_object__.__setattr__({self_name},{f.name!r},{value})")
    if hasattr(cls, "__post_init__"):
        body.append(f"  {self_name}.__post_init__()")
    source = f"def __init__({', '.join(params)}):\n" + ("\n".join(body) or "  pass") + "\n"
    exec(source, space)  # the one compile
    fn = space["__init__"]
    fn.__annotations__ = {**{f.name: f.type for f in flds if f.init}, "return": None}
    return fn


def _values(names: list[str]) -> Callable[[Any], tuple]:
    """The tuple of these fields' values, as dataclass's generated `(self.a,self.b,)`."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        get = attrgetter(names[0])
        return lambda obj: (get(obj),)
    return lambda obj: ()


def _repr(names: list[str]) -> Callable:
    @reprlib.recursive_repr()
    def __repr__(self: Any) -> str:
        return self.__class__.__qualname__ + "(" + ", ".join([f"{n}={getattr(self, n)!r}" for n in names]) + ")"

    return __repr__


def _eq(values: Callable[[Any], tuple]) -> Callable:
    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    return __eq__


def _hash(values: Callable[[Any], tuple]) -> Callable:
    def __hash__(self: Any) -> int:
        return hash(values(self))

    return __hash__


def _setattr(cls: type, names: tuple[str, ...]) -> Callable:
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    return __setattr__


def _delattr(cls: type, names: tuple[str, ...]) -> Callable:
    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __delattr__
