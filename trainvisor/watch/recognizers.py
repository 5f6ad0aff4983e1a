"""Which files are checkpoints, and which files make one checkpoint complete.

A recogniser looks at a file's name (one that defines `match_path` at its path: the
Hugging Face Trainer's sets are folders): it says which set (checkpoint) the file
belongs to, what role it plays in the set, and the iteration/epoch the name
carries. `required_roles` says, from the parts seen so far, which roles the set
needs before it can be handed over. Recognisers are tried in registry order; the
first match wins (Caffe's ``.caffemodel.h5`` must not be taken for a Keras file).
"""
from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Protocol, Sequence, runtime_checkable

from ..errors import ConfigError

__all__ = [
    "Part",
    "Recognizer",
    "register_recognizer",
    "default_recognizers",
    "available_recognizers",
    "PatternRecognizer",
    "HuggingFaceRecognizer",
    "is_temporary",
    "recognize",
]


@dataclass(frozen=True)
class Part:
    """One file's place in a checkpoint. `set_name` is unique within the file's
    directory; `shared` parts (MXNet's symbol file) belong to every set with the
    same `set_name` prefix and are attached, not waited for."""

    framework: str
    set_name: str
    role: str
    iteration: Optional[int] = None
    epoch: Optional[int] = None
    shared: bool = False


@runtime_checkable
class Recognizer(Protocol):
    name: str

    def match(self, filename: str) -> Optional[Part]: ...

    def required_roles(self, seen: frozenset[str]) -> Optional[frozenset[str]]:
        """Roles the set needs, given the roles seen; None while that cannot be known yet."""
        ...


_TEMP_SUFFIXES = (".tmp", ".temp", ".partial", ".part", ".swp", ".swx", ".crdownload", "~")
_TEMP_PREFIXES = (".~", ".#", "~$")
_TEMP_INFIX = re.compile(r"\.(?:tmp|tempstate\d*|partial)(?:[._-]|\d|$)", re.IGNORECASE)


def is_temporary(filename: str) -> bool:
    """Names writers use before renaming into place (editors, TF's `.tempstate`,
    `torch.save(f + '.tmp')`). They are ignored; the rename is what counts."""
    low = filename.lower()
    return low.endswith(_TEMP_SUFFIXES) or low.startswith(_TEMP_PREFIXES) or bool(_TEMP_INFIX.search(low))


class _Single:
    """A checkpoint that is one file (Keras, PyTorch, user patterns)."""

    def required_roles(self, seen: frozenset[str]) -> Optional[frozenset[str]]:
        return frozenset({"file"})


_EPOCH = re.compile(r"epoch[=_-]?(\d+)", re.IGNORECASE)
_STEP = re.compile(r"(?:iter|iteration|step|global_step|it)[=_-]?(\d+)", re.IGNORECASE)
_LEADING_NUMBER = re.compile(r"^[^\d]*?[._-](\d+)(?:[._-]|$)")


def _numbers_from_name(stem: str, *, bare_is_epoch: bool) -> tuple[Optional[int], Optional[int]]:
    """(iteration, epoch) from names like `epoch=3-step=1200`, `model_iter_500`,
    `weights.05-0.23` (Keras' ModelCheckpoint template: a bare number is the epoch)."""
    e = _EPOCH.search(stem)
    s = _STEP.search(stem)
    epoch = int(e.group(1)) if e else None
    iteration = int(s.group(1)) if s else None
    if epoch is None and iteration is None:
        m = _LEADING_NUMBER.search(stem)
        if m:
            if bare_is_epoch:
                epoch = int(m.group(1))
            else:
                iteration = int(m.group(1))
    return iteration, epoch


class CaffeRecognizer:
    """`PREFIX_iter_N.caffemodel` + `PREFIX_iter_N.solverstate` (or their `.h5`
    forms with `snapshot_format: HDF5`): one checkpoint, two files."""

    name = "caffe"
    _re = re.compile(r"^(?P<set>.*_iter_(?P<it>\d+))\.(?P<kind>caffemodel|solverstate)(?:\.h5)?$")

    def match(self, filename: str) -> Optional[Part]:
        m = self._re.match(filename)
        if not m:
            return None
        role = "weights" if m["kind"] == "caffemodel" else "solverstate"
        return Part(self.name, m["set"], role, int(m["it"]))

    def required_roles(self, seen: frozenset[str]) -> Optional[frozenset[str]]:
        return frozenset({"weights", "solverstate"})


class MxnetRecognizer:
    """`PREFIX-NNNN.params` (epoch NNNN); `PREFIX-symbol.json` is written once and
    shared by every epoch, so it is attached to each set but never waited for."""

    name = "mxnet"
    _params = re.compile(r"^(?P<prefix>.+)-(?P<ep>\d{4,})\.params$")
    _symbol = re.compile(r"^(?P<prefix>.+)-symbol\.json$")

    def match(self, filename: str) -> Optional[Part]:
        m = self._params.match(filename)
        if m:
            return Part(self.name, f"{m['prefix']}-{m['ep']}", "params", None, int(m["ep"]))
        m = self._symbol.match(filename)
        if m:
            return Part(self.name, m["prefix"], "symbol", shared=True)
        return None

    def required_roles(self, seen: frozenset[str]) -> Optional[frozenset[str]]:
        return frozenset({"params"})


class TensorflowRecognizer:
    """`model.ckpt-N.index` + `model.ckpt-N.data-0000i-of-0000K` shards. The
    shard count is known from any shard's name; until one is seen the set waits."""

    name = "tensorflow"
    _re = re.compile(r"^(?P<set>.+?(?:-(?P<it>\d+))?)\.(?:(?P<index>index)|data-(?P<i>\d{5})-of-(?P<n>\d{5}))$")

    def match(self, filename: str) -> Optional[Part]:
        m = self._re.match(filename)
        if not m:
            return None
        it = int(m["it"]) if m["it"] else None
        if m["index"]:
            return Part(self.name, m["set"], "index", it)
        return Part(self.name, m["set"], f"data-{int(m['i'])}-of-{int(m['n'])}", it)

    def required_roles(self, seen: frozenset[str]) -> Optional[frozenset[str]]:
        for role in seen:
            if role.startswith("data-"):
                n = int(role.rsplit("-", 1)[1])
                return frozenset({"index", *(f"data-{i}-of-{n}" for i in range(n))})
        return None


class _SuffixRecognizer(_Single):
    """One file per checkpoint, known by its extension; numbers come from the stem."""

    name = ""
    suffixes: tuple[str, ...] = ()
    bare_is_epoch = False

    def match(self, filename: str) -> Optional[Part]:
        low = filename.lower()
        for suf in self.suffixes:
            if low.endswith(suf) and len(filename) > len(suf):
                it, ep = _numbers_from_name(filename[: -len(suf)], bare_is_epoch=self.bare_is_epoch)
                return Part(self.name, filename, "file", it, ep)
        return None


class KerasRecognizer(_SuffixRecognizer):
    """`.h5` / `.hdf5` / `.keras`; ModelCheckpoint names carry the epoch (`weights.05-0.23.h5`)."""

    name = "keras"
    suffixes = (".h5", ".hdf5", ".keras")
    bare_is_epoch = True


class PytorchRecognizer(_SuffixRecognizer):
    """`.pt` / `.pth` / `.ckpt` / `.pth.tar`; Lightning names carry `epoch=` and `step=`."""

    name = "pytorch"
    suffixes = (".pt", ".pth", ".ckpt", ".pth.tar")


class HuggingFaceRecognizer:
    """Every file directly in a Trainer's ``checkpoint-N`` folder: one checkpoint of step N, whatever
    files the model, tokenizer, optimizer and scheduler add. ``trainer_state.json`` is required: the
    Trainer writes it after the weights, optimizer, scheduler and RNG state (older versions wrote
    ``rng_state.pth`` after it; the set is then handed over once more, with it)."""

    name = "huggingface"
    _folder = re.compile(r"^checkpoint-(\d+)$")

    def match(self, filename: str) -> Optional[Part]:
        return None  # a file's name alone never says it belongs to a Trainer checkpoint

    def match_path(self, path: str) -> Optional[Part]:
        folder = os.path.basename(os.path.dirname(path))
        m = self._folder.match(folder)
        if m is None:
            return None
        return Part(self.name, folder, os.path.basename(path), int(m.group(1)))

    def required_roles(self, seen: frozenset[str]) -> Optional[frozenset[str]]:
        return frozenset({"trainer_state.json"})


class PatternRecognizer(_Single):
    """A user pattern (`--checkpoint-pattern`): a glob on the file name, or
    `re:REGEX` (full match) whose named groups `iter` / `epoch` give the numbers.
    Each matching file is one checkpoint."""

    name = "pattern"

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        src = pattern[3:] if pattern.startswith("re:") else fnmatch.translate(pattern)
        try:
            self._re = re.compile(src)
        except re.error as exc:
            raise ConfigError(f"bad --checkpoint-pattern {pattern!r}: {exc}") from exc

    def match(self, filename: str) -> Optional[Part]:
        m = self._re.fullmatch(filename)
        if not m:
            return None
        groups = m.groupdict()
        it = int(groups["iter"]) if groups.get("iter") else None
        ep = int(groups["epoch"]) if groups.get("epoch") else None
        return Part(self.name, filename, "file", it, ep)


_REGISTRY: dict[str, Callable[[], Recognizer]] = {}


def register_recognizer(name: str, factory: Callable[[], Recognizer]) -> None:
    """Add a framework; rejected at registration if it does not look like a Recognizer."""
    probe = factory()
    if not isinstance(probe, Recognizer):
        raise TypeError(f"recogniser {name!r} lacks match/required_roles/name")
    _REGISTRY[name] = factory


for _cls in (HuggingFaceRecognizer, CaffeRecognizer, MxnetRecognizer, TensorflowRecognizer, KerasRecognizer,
             PytorchRecognizer):
    register_recognizer(_cls.name, _cls)


def available_recognizers() -> list[str]:
    return list(_REGISTRY)


def default_recognizers(patterns: Sequence[str] = (), *, frameworks: Optional[Iterable[str]] = None) -> list[Recognizer]:
    """User patterns first (they are the user's explicit word), then the frameworks."""
    names = list(frameworks) if frameworks is not None else available_recognizers()
    unknown = [n for n in names if n not in _REGISTRY]
    if unknown:
        raise ConfigError(f"unknown checkpoint framework {unknown[0]!r} (known: {', '.join(_REGISTRY)})")
    return [PatternRecognizer(p) for p in patterns] + [_REGISTRY[n]() for n in names]


def recognize(path: str, recognizers: Sequence[Recognizer]) -> Optional[tuple[Recognizer, Part]]:
    filename = os.path.basename(path)
    if not filename or is_temporary(filename):
        return None
    for r in recognizers:
        by_path = getattr(r, "match_path", None)
        part = by_path(path) if by_path is not None else r.match(filename)
        if part is not None:
            return r, part
    return None
