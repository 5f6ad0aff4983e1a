"""UploadManager as a context manager over an executor: futures per set, a drain bounded by its
timeout that reports what the journal says, and a close that does not wait for a large upload."""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from trainvisor.uploaders import LocalUploader
from trainvisor.uploaders.journal import QUEUED, Journal, JournalStates
from trainvisor.uploaders.manager import DrainReport, SetOutcome, UploadManager

from test_manager import _checkpoint  # tests/uploaders is on sys.path (no package)


class EndlessStore(LocalUploader):
    """A large upload to the real local store: after its first chunk it never finishes on its
    own; it ends only when the manager's progress callback raises (the manager is closing)."""

    def __init__(self, root):
        super().__init__(root)
        self.started = threading.Event()
        self.ended = threading.Event()

    def upload(self, local_path, key, *, progress=None):
        def stuck(n):
            progress(n)
            self.started.set()
            while True:
                progress(0)
                self.ended.wait(0.005)

        try:
            return super().upload(local_path, key, progress=stuck)
        finally:
            self.ended.set()


_EARLIER: set[threading.Thread] = set()


@pytest.fixture(autouse=True)
def _earlier_threads():
    """The threads alive before the test: another test's leak is that test's failure, not this one's."""
    _EARLIER.clear()
    _EARLIER.update(threading.enumerate())
    yield


def _upload_threads() -> list[str]:
    """The upload threads this test's manager started and left running."""
    return [t.name for t in threading.enumerate() if t.name.startswith("trainvisor-upload") and t not in _EARLIER]


def test_submit_returns_a_future_that_resolves_to_the_verified_set(tmp_path):
    with UploadManager(LocalUploader(str(tmp_path / "store")), run_dir=str(tmp_path / "run"), run_id="r1") as m:
        future = m.submit(_checkpoint(tmp_path))
        assert isinstance(future, Future)
        assert future.result(timeout=10) == SetOutcome("r1/net_iter_100.manifest.json", "verified")
        report = m.drain(5)
    assert report.pending == () and report.failed == ()
    assert report.verified == ("r1/net_iter_100.caffemodel", "r1/net_iter_100.manifest.json",
                               "r1/net_iter_100.solverstate")
    assert _upload_threads() == []


def test_an_injected_executor_runs_the_sets_and_stays_the_callers(tmp_path):
    names = []
    with ThreadPoolExecutor(1, thread_name_prefix="caller-pool") as pool:
        def spy(fn, *args):
            names.append(fn.__name__)
            return pool.submit(fn, *args)

        class Spy:
            submit = staticmethod(spy)

        m = UploadManager(LocalUploader(str(tmp_path / "store")), run_dir=str(tmp_path / "run"), run_id="r1",
                          executor=Spy())
        m.submit(_checkpoint(tmp_path, 1)).result(timeout=10)
        m.close()
        assert names == ["_upload_set"]
        assert pool.submit(lambda: 7).result() == 7  # close() left the caller's executor running


class Inline:
    """The simplest executor: runs each task at once on the caller's thread."""

    def submit(self, fn, *args):
        future = Future()
        future.set_result(fn(*args))
        return future


def test_an_executor_that_runs_tasks_inline_works(tmp_path):
    m = UploadManager(LocalUploader(str(tmp_path / "store")), run_dir=str(tmp_path / "run"), run_id="r1",
                      executor=Inline())
    future = m.submit(_checkpoint(tmp_path))
    assert future.done() and future.result().state == "verified"
    report = m.drain(0)
    m.close()
    assert report.pending == () and len(report.verified) == 3


def test_drain_returns_within_its_timeout_while_a_large_upload_is_in_flight(tmp_path):
    store = EndlessStore(str(tmp_path / "store"))
    m = UploadManager(store, run_dir=str(tmp_path / "run"), run_id="r1")
    m.submit(_checkpoint(tmp_path, 1))
    assert store.started.wait(5)
    t0 = time.monotonic()
    report = m.drain(0.3)
    elapsed = time.monotonic() - t0
    assert 0.3 <= elapsed < 1.5  # the upload never ends: any return is the timeout's (slack for a loaded CI)
    assert report.pending == ("r1/net_iter_100.caffemodel", "r1/net_iter_100.manifest.json")
    assert report.failed == () and report.verified == ()
    t0 = time.monotonic()
    m.close()
    assert time.monotonic() - t0 < 1.0 and store.ended.is_set()
    assert _upload_threads() == []
    j = Journal(str(tmp_path / "run"))
    try:
        assert j.get("r1/net_iter_100.caffemodel").state == QUEUED      # left to the next start
        assert [cp.name for cp in j.unfinished_sets()] == ["net_iter_100"]
    finally:
        j.close()
    assert not list((tmp_path / "store").rglob("*.trainvisor-tmp"))  # the cut copy left no debris
    # The next start on the same run directory finishes it.
    with UploadManager(LocalUploader(str(tmp_path / "store")), run_dir=str(tmp_path / "run"), run_id="r1") as again:
        assert again.resume() == 1
        report = again.drain(10)
    assert report.pending == () and "r1/net_iter_100.manifest.json" in report.verified


def test_drain_report_is_what_the_journal_says_about_this_managers_keys(tmp_path):
    """An earlier attempt's row that nothing resumes (its set is gone) is not reported: otherwise
    a caller draining until nothing is pending would wait for it for ever."""
    run = str(tmp_path / "run")
    j = Journal(run)
    j.queue("r1/stale.pt", "/gone/stale.pt", size=1, mtime_ns=1)
    j.close()
    with UploadManager(LocalUploader(str(tmp_path / "store")), run_dir=run, run_id="r1") as m:
        assert m.resume() == 0
        m.submit(_checkpoint(tmp_path, 1))
        report = m.drain(10)
    assert report == DrainReport(pending=(), failed=(),
                                 verified=("r1/net_iter_100.caffemodel", "r1/net_iter_100.manifest.json"),
                                 sets=JournalStates(verified=("r1/net_iter_100.manifest.json",), pending=(), failed=()))
