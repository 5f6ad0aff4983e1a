"""`cmd.startproc` / `logproc` / `runproc`: the child's output passed on byte for byte, every line
to every hook, a failing hook contained, `finish()` at the end, the exit status returned."""
from __future__ import annotations

import logging
import sys

from trainvisor.compat.ava.utils import cmd

from .conftest import FAKE_CAFFE, real_logs

LOG = "bearpaw-fork-mnist.log"


class _Lines:
    name = "collector"

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.finished = 0

    def __call__(self, line: str) -> None:
        self.lines.append(line)

    def finish(self) -> None:
        self.finished += 1


def test_every_line_reaches_every_hook_and_a_failing_hook_stops_nothing(capfdbinary, caplog):
    log = real_logs("caffe") / LOG
    seen = _Lines()

    def broken(line: str) -> None:
        raise ValueError("a hook bug")

    argv = [sys.executable, str(FAKE_CAFFE), "--log", str(log), "--rate", "0", "--no-snapshots", "--exit-code", "3"]
    with caplog.at_level(logging.INFO, logger="trainvisor.compat.ava.cmd"):  # the counts after the first are INFO
        status = cmd.runproc(argv, [broken, None, seen])  # None: what an AVA getter gives for "unsupported"
    assert status == 3
    expected = log.read_text().splitlines(keepends=True)
    assert seen.lines == expected and len(expected) == 882 and seen.finished == 1
    assert capfdbinary.readouterr().out == log.read_bytes()  # passed on unchanged (stderr merged, as AVA)
    failures = [r for r in caplog.records if "hook broken" in r.getMessage()]
    assert [r.getMessage().split(";")[0] for r in failures] == [
        "hook broken failed: ValueError: a hook bug", "hook broken has failed 10 times",
        "hook broken has failed 100 times"]


def test_a_string_runs_through_the_shell_and_a_list_does_not(capfdbinary):
    seen = _Lines()
    proc = cmd.startproc("echo $((6 * 7)); echo err >&2")
    cmd.logproc(proc, seen)
    assert proc.wait() == 0 and seen.lines == ["42\n", "err\n"]
    seen = _Lines()
    assert cmd.runproc(["echo", "$HOME"], seen) == 0 and seen.lines == ["$HOME\n"]
