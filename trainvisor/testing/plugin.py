"""trainvisor's pytest plugin, registered as ``trainvisor`` by the ``pytest11`` entry point:
installing trainvisor makes these fixtures available in any test session, ``-p no:trainvisor``
turns them off.

- `replay_log(path, parser='auto', rules=None, **options)`: a saved log's records
  (`testing.replaying.ReplayedLog`: `.metrics`, `.checkpoints`, `.series('loss', phase='train')`).
- `fake_training(log, rate=0, snapshots=True, exit_code=0, die_by_signal=None, **options)`: the argv
  of a child that plays the log as its training did (`trainvisor fake-training`).
- `supervised_run(argv, **options)`: the training under trainvisor; its summary, output and events.
- `assert_golden(events, path)`: the events' metric stream equals the golden file's (with
  ``--trainvisor-update-golden``: rewrites it instead).

The module imports nothing of trainvisor until a fixture is used: a session that uses none pays
for nothing but this file (bench/pytest_plugin.py measures it)."""
from __future__ import annotations

import itertools
import os
import sys
from typing import Any, Callable, Optional, Sequence

import pytest

__all__ = ["replay_log", "fake_training", "supervised_run", "assert_golden", "fake_training_argv"]

# The golden assertion is rewritten by pytest (its failure compares the records field by field)
# however trainvisor was installed: pytest marks an entry-point plugin's modules for rewriting only
# from the files its distribution lists, which an editable install does not list.
pytest.register_assert_rewrite("trainvisor.testing.asserts")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--trainvisor-update-golden", action="store_true", default=False,
                     help="trainvisor: rewrite the golden files assert_golden compares with, instead of failing.")


def fake_training_argv(log: "str | os.PathLike[str]", *, rate: float = 0.0, snapshots: bool = True,
                       exit_code: int = 0, die_by_signal: Optional[str] = None, framework: Optional[str] = None,
                       stream: Optional[str] = None, snapshot_dir: Optional[str] = None,
                       snapshot_size: Optional[int] = None, linger: float = 0.0) -> list[str]:
    """The command line of `trainvisor fake-training` with these options, run by this interpreter."""
    argv = [sys.executable, "-m", "trainvisor", "fake-training", os.fspath(log)]
    if rate:
        argv += ["--rate", repr(float(rate))]
    if not snapshots:
        argv.append("--no-snapshots")
    if exit_code:
        argv += ["--exit-code", str(exit_code)]
    if die_by_signal:
        argv += ["--die-by-signal", str(die_by_signal)]
    for flag, value in (("--framework", framework), ("--stream", stream), ("--snapshot-dir", snapshot_dir),
                        ("--snapshot-size", snapshot_size)):
        if value is not None:
            argv += [flag, str(value)]
    if linger:
        argv += ["--linger", repr(float(linger))]
    return argv


@pytest.fixture
def replay_log() -> Callable[..., Any]:
    """`replay_log(path, parser='auto', rules=None, **options)` -> ReplayedLog."""
    from .replaying import replay_log as replay

    return replay


@pytest.fixture
def fake_training() -> Callable[..., list[str]]:
    """`fake_training(log, rate=0, snapshots=True, exit_code=0, die_by_signal=None, **options)` -> argv."""
    return fake_training_argv


@pytest.fixture
def supervised_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Any]:
    """`supervised_run(argv, run_dir=None, in_process=True, **options)` -> SupervisedRun; each run
    gets its own run directory under the test's temporary directory unless `run_dir` is given."""
    from .supervised import supervised_run as run

    base = tmp_path_factory.mktemp("trainvisor-runs")
    numbers = itertools.count(1)

    def supervised(argv: Sequence[str], run_dir: "str | os.PathLike[str] | None" = None, **options: Any) -> Any:
        return run(argv, run_dir if run_dir is not None else base / f"run-{next(numbers)}", **options)

    return supervised


@pytest.fixture
def assert_golden(request: pytest.FixtureRequest) -> Callable[..., None]:
    """`assert_golden(events, path)`: see `asserts.check_golden`; ``--trainvisor-update-golden`` rewrites."""
    from .asserts import check_golden

    update = bool(request.config.getoption("--trainvisor-update-golden", default=False))

    def check(events: Any, path: "str | os.PathLike[str]") -> None:
        __tracebackhide__ = True
        check_golden(events, path, update=update)

    return check
