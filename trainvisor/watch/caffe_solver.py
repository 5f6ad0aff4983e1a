"""Where `caffe train -solver FILE` will write its snapshots, from the solver prototxt.

Caffe resolves `snapshot_prefix` against its own working directory (not the solver
file's). Newer Caffe (upgrade_proto.cpp, UpgradeSnapshotPrefixProperty) fills a
missing prefix with the solver path minus its extension, and appends the solver's
stem when the prefix names an existing directory; we do the same.
"""
from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from typing import Optional, Sequence

from ..errors import ConfigError

__all__ = ["SolverSnapshot", "solver_path_from_argv", "read_solver_snapshot", "snapshot_target"]

_FIELD = re.compile(r'^\s*(snapshot_prefix|snapshot_format|snapshot)\s*:\s*("(?:[^"\\]|\\.)*"|\'[^\']*\'|\S+)', re.M)


@dataclass(frozen=True)
class SolverSnapshot:
    directory: str        # absolute
    prefix: str           # file name prefix, e.g. "lenet" (files are lenet_iter_N.*)
    interval: Optional[int]
    hdf5: bool


def solver_path_from_argv(argv: Sequence[str]) -> Optional[str]:
    """The solver of `caffe train -solver FILE` (`--solver FILE`, `-solver=FILE`, `--solver=FILE`);
    None when the command is not a Caffe training."""
    if len(argv) == 1 and " " in argv[0]:  # `trainvisor run --shell -- 'caffe train -solver s.prototxt'`
        try:
            argv = shlex.split(argv[0])
        except ValueError:
            return None
    if "train" not in argv:
        return None
    # `caffe train`, `/opt/caffe/build/tools/caffe.bin train`, `python fake-caffe train`
    if not any("caffe" in os.path.basename(a) for a in argv[: list(argv).index("train")]):
        return None
    for i, a in enumerate(argv):
        if a in ("-solver", "--solver") and i + 1 < len(argv):
            return argv[i + 1]
        for flag in ("-solver=", "--solver="):
            if a.startswith(flag):
                return a[len(flag):]
    return None


def _unquote(v: str) -> str:
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
        return v[1:-1].encode().decode("unicode_escape") if v[0] == '"' else v[1:-1]
    return v


def read_solver_snapshot(solver: str, *, cwd: str) -> SolverSnapshot:
    path = solver if os.path.isabs(solver) else os.path.join(cwd, solver)
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = "\n".join(line.split("#", 1)[0] for line in fh)
    except OSError as exc:
        raise ConfigError(f"cannot read solver {solver}: {exc.strerror}") from exc
    fields = {k: _unquote(v) for k, v in _FIELD.findall(text)}
    prefix = fields.get("snapshot_prefix")
    if not prefix:
        prefix = os.path.splitext(solver)[0]
    full = prefix if os.path.isabs(prefix) else os.path.join(cwd, prefix)
    if os.path.isdir(full):
        full = os.path.join(full, os.path.splitext(os.path.basename(solver))[0])
    interval = fields.get("snapshot")
    try:
        interval_n = int(interval) if interval is not None else None
    except ValueError as exc:
        raise ConfigError(f"solver {solver}: snapshot: {interval!r} is not a number") from exc
    directory, name = os.path.split(os.path.normpath(full))
    return SolverSnapshot(directory or cwd, name, interval_n, fields.get("snapshot_format", "").upper() == "HDF5")


def snapshot_target(argv: Sequence[str], *, cwd: str) -> Optional[SolverSnapshot]:
    solver = solver_path_from_argv(argv)
    return read_solver_snapshot(solver, cwd=cwd) if solver else None
