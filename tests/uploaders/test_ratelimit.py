"""The upload rate limit: one token bucket, accurate and fair, shared by every worker and every
destination. Simulated time (the bucket's clock advanced by its own sleep) measures what the
limit costs exactly; one check runs in real time through a real store."""
from __future__ import annotations

import os
import threading
import time

import pytest

from tests.test_process_tree import wait_for  # the bucket's queue tells nobody: it is looked at
from trainvisor.events import Checkpoint, CheckpointFile
from trainvisor.uploaders import LocalUploader
from trainvisor.uploaders.manager import UploadManager
from trainvisor.uploaders.ratelimit import TokenBucket, parse_rate

MiB = 1 << 20


class SimClock:
    """Simulated time: `sleep` advances it. The bucket lets only its head waiter sleep, so the
    sleeps never overlap and the clock reads the time the limit alone has cost."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps = 0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.now += seconds


def _bucket(rate: float, clock: SimClock, **kw) -> TokenBucket:
    return TokenBucket(rate, clock=clock, sleep=clock.sleep, **kw)


def _file(folder, name: str, size: int) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(os.urandom(size))
    return str(path)


def _checkpoint(path: str) -> Checkpoint:
    name = os.path.basename(path)
    return Checkpoint(name=name.rpartition(".")[0], files=(CheckpointFile(path, name),), iteration=None,
                      epoch=None, root=os.path.dirname(path))


@pytest.mark.parametrize("text, rate", [
    ("50MB/s", 50e6), ("16MiB/s", 16 * MiB), ("800KiB/s", 800 * 1024), ("1.5GB/s", 1.5e9),
    ("0", 0.0), ("2048", 2048.0), (" 10 MB ", 10e6), ("3M", 3e6), (0, 0.0), (1000, 1000.0),
])
def test_rates_are_read_in_decimal_and_binary_units(text, rate):
    assert parse_rate(text) == rate


@pytest.mark.parametrize("text", ["fast", "-5MB/s", "50 MB per second", "5iB/s", "", "nan", "MB/s"])
def test_a_rate_that_is_not_one_is_refused_in_one_line(text):
    with pytest.raises(ValueError) as err:
        parse_rate(text)
    assert "\n" not in str(err.value) and "50MB/s" in str(err.value)


def test_64_mib_at_16_mib_per_second_takes_4_seconds_through_the_limiter():
    clock = SimClock()
    bucket = _bucket(16 * MiB, clock)
    waited = sum(bucket.take(MiB) for _ in range(64))  # as a store reports it: a chunk at a time
    assert clock.now == pytest.approx(4.0, rel=0.10)
    assert waited == pytest.approx(clock.now)


def test_a_large_take_is_paid_in_slices_so_a_small_one_waits_one_slice_not_the_whole_file():
    clock = SimClock()
    small: list[float] = []

    def sleep(seconds: float) -> None:  # in the big take's 5th slice, a small upload queues up
        clock.sleep(seconds)
        if clock.sleeps == 5:
            late.start()  # the big taker holds its turn: the small one takes its ticket and waits
            wait_for(lambda: bucket.queued == 2, 10, "the small upload queued behind the large one")

    bucket = TokenBucket(16 * MiB, clock=clock, sleep=sleep, slice_bytes=MiB)
    late = threading.Thread(target=lambda: small.append(bucket.take(MiB)))
    big = bucket.take(64 * MiB)
    late.join()
    one_slice = MiB / (16 * MiB)
    # Its turn came after the big take's current slice (and its next, already queued): two slices.
    assert small[0] <= 2 * one_slice + 1e-9
    assert big == pytest.approx(65 * one_slice)  # the whole stays at the rate: 65 MiB granted in all
    assert clock.now == pytest.approx(65 * one_slice)


def test_a_whole_take_holds_its_turn_so_requests_leave_one_after_another():
    clock = SimClock()
    turns: list[tuple[str, float]] = []  # who slept off a debt, and how long: one turn each

    def sleep(seconds: float) -> None:  # while the first request's tokens come, a second queues
        turns.append((threading.current_thread().name, seconds))
        clock.sleep(seconds)
        if clock.sleeps == 1:
            second.start()
            wait_for(lambda: bucket.queued == 2, 10, "the second request queued behind the first")

    bucket = TokenBucket(8 * MiB, clock=clock, sleep=sleep)
    second = threading.Thread(target=bucket.take, args=(8 * MiB,), kwargs={"whole": True}, name="second")
    bucket.take(8 * MiB, whole=True)
    second.join()
    # Sliced, the two would have taken 0.05 s turns in alternation and both ended near 2 s.
    assert turns == [("MainThread", pytest.approx(1.0)), ("second", pytest.approx(1.0))]
    assert clock.now == pytest.approx(2.0)


def test_three_workers_sharing_the_bucket_get_the_rate_within_10_percent_in_every_10_seconds():
    clock = SimClock()
    rate = 8 * MiB
    bucket = _bucket(rate, clock)
    grants: list[tuple[float, int]] = []
    lock = threading.Lock()

    def worker(chunk: int) -> None:
        for _ in range(60 * MiB // chunk):
            bucket.take(chunk)
            with lock:
                grants.append((clock(), chunk))

    threads = [threading.Thread(target=worker, args=(c,)) for c in (MiB, 2 * MiB, 256 << 10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    end = clock.now
    assert end == pytest.approx(180 * MiB / rate, rel=0.01)
    for start in range(0, int(end) - 10):
        sent = sum(n for at, n in grants if start < at <= start + 10)
        assert 0.9 * rate * 10 <= sent <= 1.1 * rate * 10, (start, sent / MiB)


def test_two_destinations_share_one_limit(tmp_path):
    """Two managers (two stores) on one bucket: together they get the rate, not twice it."""
    clock = SimClock()
    rate = 16 * MiB
    bucket = _bucket(rate, clock)
    managers = [UploadManager(LocalUploader(str(tmp_path / f"store{i}")), run_dir=str(tmp_path / f"run{i}"),
                              run_id="r1", limiter=bucket, clock=clock) for i in (1, 2)]
    try:
        for i, m in enumerate(managers):
            m.submit(_checkpoint(_file(tmp_path / f"ckpt{i}", "model_step_1.pt", 16 * MiB)))
        reports = [m.drain(60) for m in managers]
        progress = [m.progress() for m in managers]
    finally:
        for m in managers:
            m.close()
    assert all(r.pending == () and r.failed == () for r in reports)
    manifests = sum(p.bytes_sent for p in progress) - 32 * MiB  # the two manifests pay too
    assert clock.now == pytest.approx((32 * MiB + manifests) / rate, rel=0.01)
    assert all(p.limiter_wait > 0 for p in progress)
    # Each waited for its own bytes and, while both were sending, for the other's turns.
    assert sum(p.limiter_wait for p in progress) >= clock.now * 0.99


def test_a_file_uploads_through_a_real_store_at_the_limit_in_real_time(tmp_path):
    rate, size = 8 * MiB, 4 * MiB
    src = _file(tmp_path / "ckpt", "model_step_1.pt", size)
    with UploadManager(LocalUploader(str(tmp_path / "store")), run_dir=str(tmp_path / "run"), run_id="r1",
                       limiter=TokenBucket(rate), manifests=False) as m:
        started = time.monotonic()
        m.submit(_checkpoint(src))
        report = m.drain(30)
        elapsed = time.monotonic() - started
        p = m.progress()
    assert report.verified == ("r1/model_step_1.pt",)
    # 0.5 s at the limit, less the 0.1 s of tokens the bucket may gather while the manager starts
    # (its journal is created): never faster, and not held up for long.
    least = size / rate - 0.1
    assert 0.95 <= elapsed / least <= 4.0, elapsed
    assert least * 0.95 <= p.limiter_wait <= size / rate * 1.2
    assert p.bytes_sent <= rate * (p.seconds + 0.1) * 1.02


def test_s3_requests_wait_for_their_tokens_before_they_are_sent_and_pay_once(moto, tmp_path):
    import boto3

    from trainvisor.uploaders.s3 import S3Uploader

    boto3.client("s3", endpoint_url=moto).create_bucket(Bucket="ckpt")
    clock = SimClock()
    rate = 8 * MiB
    up = S3Uploader("ckpt", url="s3://ckpt/p", endpoint_url=moto, concurrency=3)
    src = _file(tmp_path / "ckpt", "model_step_1.pt", 24 * MiB)  # 3 parts of 8 MiB, sent by 3 workers
    sent: list[float] = []
    with UploadManager(up, run_dir=str(tmp_path / "run"), run_id="r1", prefix="p", manifests=False,
                       limiter=_bucket(rate, clock), clock=clock) as m:
        # Registered after the limiter's hook, so called once it let the request go.
        up._client.meta.events.register("before-send.s3.UploadPart", lambda **_: sent.append(clock()))
        m.submit(_checkpoint(src))
        report = m.drain(60)
        p = m.progress()
    assert report.verified == ("p/r1/model_step_1.pt",)
    assert clock.now == pytest.approx(24 * MiB / rate, rel=0.01)  # paid once, not again by the progress callback
    assert p.limiter_wait >= clock.now * 0.99
    # A part left only once its 8 MiB were granted, whole: one after another at 1, 2 and 3 s, not
    # all three at once (paid after sending), nor all at 3 s (granted in slices round-robin).
    assert sorted(sent) == pytest.approx([1.0, 2.0, 3.0], rel=0.01)


def test_a_closed_managers_s3_hook_is_gone_so_the_uploader_serves_the_next_one(moto, tmp_path):
    import boto3

    from trainvisor.uploaders.s3 import S3Uploader

    boto3.client("s3", endpoint_url=moto).create_bucket(Bucket="ckpt")
    up = S3Uploader("ckpt", url="s3://ckpt/p", endpoint_url=moto)
    src = _file(tmp_path / "ckpt", "model_step_1.pt", MiB)
    first = SimClock()
    for run, clock in (("r1", first), ("r2", SimClock())):
        with UploadManager(up, run_dir=str(tmp_path / run), run_id=run, prefix="p", manifests=False,
                           limiter=_bucket(8 * MiB, clock), clock=clock) as m:
            m.submit(_checkpoint(src))
            assert m.drain(60).verified == (f"p/{run}/model_step_1.pt",)  # not cancelled by r1's closed hook
        assert clock.now == pytest.approx(1 / 8)  # each paid its own bytes, once
    assert first.now == pytest.approx(1 / 8)  # nothing of r2's went through r1's bucket
