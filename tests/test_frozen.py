"""`@frozen` makes the class `@dataclass(frozen=True)` makes (trainvisor/_frozen.py): each class
that uses it is compared with the one dataclass makes of the same fields, bases and methods."""
from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
import pickle
from pathlib import Path

import pytest

from trainvisor._frozen import frozen

PACKAGE = Path(__file__).resolve().parents[1] / "trainvisor"
GENERATED = {"__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__", "__match_args__",
             "__dataclass_fields__", "__dataclass_params__", "__dict__", "__weakref__", "__annotations__"}


def _frozen_classes() -> list[type]:
    """Every class of the package decorated with @frozen, found from the source."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "\n@frozen\n" not in text:
            continue
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        module = importlib.import_module(".".join(parts))
        names = [line.split()[1].split("(")[0].rstrip(":") for line in text.split("\n@frozen\n")[1:]
                 for line in [line.splitlines()[0]]]
        found += [getattr(module, name) for name in names]
    return found


CLASSES = _frozen_classes()


def _reference(cls: type) -> type:
    """The same class made by `@dataclass(frozen=True)`: its fields, bases and own methods."""
    own = {k: v for k, v in cls.__dict__.items() if k not in GENERATED and k not in cls.__dataclass_fields__}
    specs = [(f.name, f.type, dataclasses.field(default=f.default, default_factory=f.default_factory, init=f.init,
                                                repr=f.repr, hash=f.hash, compare=f.compare, metadata=f.metadata))
             for f in dataclasses.fields(cls)]
    ref = dataclasses.make_dataclass(cls.__name__, specs, bases=cls.__bases__, namespace=own, frozen=True)
    ref.__qualname__, ref.__module__ = cls.__qualname__, cls.__module__
    return ref


def _sample(cls: type, salt: int = 0) -> dict:
    """Values for the fields without a default (numbers: a check that runs, as Checkpoint's, reads them), so an instance
    can be made; distinct per field and per `salt`."""
    return {f.name: 100 * salt + i for i, f in enumerate(dataclasses.fields(cls))
            if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}


def _outcome(call) -> tuple:
    try:
        return ("value", call())
    except Exception as exc:
        return ("error", type(exc), str(exc))


def test_the_classes_are_found():
    names = {c.__name__ for c in CLASSES}
    assert {"RunConfig", "ProcessConfig", "RestartConfig", "RunSummary", "UploadTotals", "CheckpointEvent",
            "Checkpoint", "ProcessResult", "RunResult"} <= names
    assert len(CLASSES) >= 23


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_the_class_is_the_one_dataclass_makes(cls):
    ref = _reference(cls)
    assert dataclasses.is_dataclass(cls)
    assert str(inspect.signature(cls)) == str(inspect.signature(ref))
    assert cls.__init__.__annotations__ == ref.__init__.__annotations__
    assert cls.__match_args__ == ref.__match_args__
    assert repr(cls.__dataclass_params__) == repr(ref.__dataclass_params__)
    assert [f.name for f in dataclasses.fields(cls)] == [f.name for f in dataclasses.fields(ref)]
    assert cls.__doc__ == ref.__doc__
    for name in ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__"):
        assert getattr(cls, name).__qualname__ == getattr(ref, name).__qualname__


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_instances_behave_as_the_dataclass_ones(cls):
    ref = _reference(cls)
    a, r = cls(**_sample(cls)), ref(**_sample(ref))
    assert repr(a) == repr(r)
    assert _outcome(lambda: dataclasses.asdict(a)) == _outcome(lambda: dataclasses.asdict(r))
    assert a == cls(**_sample(cls))
    copied = _outcome(lambda: copy.deepcopy(a) == a)
    assert copied == _outcome(lambda: copy.deepcopy(r) == r)  # a mappingproxy field: neither copies
    assert _outcome(lambda: pickle.loads(pickle.dumps(a)) == a) == copied  # (the reference is in no module)
    assert (a == r) is False and a.__eq__(r) is NotImplemented  # another class, as dataclass says
    try:
        expected = hash(r)
    except TypeError as exc:  # a field holds a dict-like value: unhashable in both
        with pytest.raises(TypeError, match=str(exc).split(":")[0]):
            hash(a)
    else:
        assert hash(a) == expected
    name = dataclasses.fields(cls)[0].name
    for action in (lambda o: setattr(o, name, 1), lambda o: delattr(o, name), lambda o: setattr(o, "other", 1)):
        want = _outcome(lambda: action(r))
        assert want[:2] == ("error", dataclasses.FrozenInstanceError)
        assert _outcome(lambda: action(a)) == want


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_replace_and_equality_follow_the_compared_fields(cls):
    a = cls(**_sample(cls))
    for f in dataclasses.fields(cls):
        if not f.init or f.default_factory is not dataclasses.MISSING:
            continue
        other = dataclasses.replace(a, **_sample(cls, salt=1)) if f.default is dataclasses.MISSING else None
        if other is not None and f.compare:
            assert other != a
    assert dataclasses.replace(a) == a


def test_a_dataclass_subclass_and_a_recursive_repr_work_as_with_dataclass():
    @frozen
    class Node:
        """A node."""

        value: float
        children: list = dataclasses.field(default_factory=list, compare=False)

    @dataclasses.dataclass(frozen=True)
    class Leaf(Node):
        depth: int = 0

    node = Node(float("nan"))
    node.children.append(node)
    assert repr(node) == "test_a_dataclass_subclass_and_a_recursive_repr_work_as_with_dataclass.<locals>.Node(value=nan, children=[...])"
    assert node == node and node != Node(float("nan"))  # the same nan object compares equal, as in a tuple; another does not
    assert Leaf(1.0, depth=2) == Leaf(1.0, [1], depth=2) and hash(Leaf(1.0, depth=2)) == hash((1.0, 2))
    with pytest.raises(TypeError, match="cannot inherit non-frozen dataclass from a frozen one"):
        dataclasses.dataclass(type("Open", (Node,), {"__annotations__": {"x": int}, "x": 0}))


def test_what_it_does_not_make_is_refused_with_the_remedy():
    with pytest.raises(TypeError, match=r"@frozen: K\.b is keyword-only or an InitVar: use @dataclass\(frozen=True\)"):
        frozen(type("K", (), {"__annotations__": {"a": int, "b": int}, "b": dataclasses.field(kw_only=True, default=0)}))
    with pytest.raises(TypeError, match=r"@frozen: V\.a is keyword-only or an InitVar"):
        frozen(type("V", (), {"__annotations__": {"a": dataclasses.InitVar[int]}}))
    with pytest.raises(TypeError, match="non-default argument 'b' follows default argument"):
        frozen(type("D", (), {"__annotations__": {"a": int, "b": int}, "a": 0}))
    with pytest.raises(TypeError, match="Cannot overwrite attribute __setattr__ in class S"):
        frozen(type("S", (), {"__annotations__": {"a": int}, "__setattr__": lambda self, k, v: None}))
