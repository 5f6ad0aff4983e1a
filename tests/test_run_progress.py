"""Draining at exit, as a person at a terminal sees it: what is being waited for, redrawn in place,
and the wait bounded by its timeout."""
from __future__ import annotations

import io

from trainvisor.run.progress import drain_showing_progress
from trainvisor.uploaders.manager import DrainReport, UploadProgress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class ScriptedUploads:
    """Two files of 50 MB at 10 MB/s on a clock that drain() advances: the upload side of the
    drain, without a store (the store-backed drains are in tests/uploaders)."""

    def __init__(self) -> None:
        self.now = 0.0

    def drain(self, timeout: float) -> DrainReport:
        self.now = round(self.now + timeout, 6)
        return DrainReport(pending=() if self.now >= 10 else ("r1/a.pt", "r1/b.pt"))

    def progress(self) -> UploadProgress:
        done = min(100_000_000, int(self.now * 10_000_000))
        return UploadProgress(done, 100_000_000, done // 50_000_000, 2)


def test_a_terminal_sees_bytes_rate_eta_and_files_redrawn_in_place():
    uploads, out = ScriptedUploads(), Terminal()
    report = drain_showing_progress(uploads, 600, out, prefix="waiting: ", clock=lambda: uploads.now)
    assert report.pending == () and uploads.now == 10.0  # returned as soon as nothing was pending
    frames = out.getvalue().split("\r")[1:]
    assert len(frames) == 50  # every 0.2 s
    assert frames[0] == "waiting: 2.0 MB / 100.0 MB  10.0 MB/s  ETA 0:09  0/2 files\x1b[K"
    assert frames[-1] == "waiting: 100.0 MB / 100.0 MB  10.0 MB/s  done  2/2 files\x1b[K\n"


def test_the_wait_ends_at_the_timeout_with_the_files_pending():
    uploads, out = ScriptedUploads(), io.StringIO()  # not a terminal: a line every 5 s
    report = drain_showing_progress(uploads, 7, out, clock=lambda: uploads.now)
    assert uploads.now == 7.0 and report.pending == ("r1/a.pt", "r1/b.pt")
    assert out.getvalue().splitlines() == ["50.0 MB / 100.0 MB  10.0 MB/s  ETA 0:05  1/2 files",
                                           "70.0 MB / 100.0 MB  10.0 MB/s  ETA 0:03  1/2 files"]


class SetJournaledLast(ScriptedUploads):
    """Every file verified at 10 s, the set itself 0.2 s later: the moment between a manifest's
    row and its set's, which a drain must not take for the end."""

    def drain(self, timeout: float) -> DrainReport:
        from trainvisor.uploaders.journal import JournalStates

        report = super().drain(timeout)
        open_sets = ("r1/net.manifest.json",) if self.now < 10.2 else ()
        return DrainReport(pending=report.pending, sets=JournalStates(verified=(), pending=open_sets, failed=()))


def test_the_wait_goes_on_until_the_sets_are_journaled_too():
    uploads = SetJournaledLast()
    report = drain_showing_progress(uploads, 600, Terminal(), clock=lambda: uploads.now)
    assert uploads.now == 10.2 and report.sets.pending == ()
