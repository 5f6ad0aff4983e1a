"""A failed preflight tells an outage (retryable: a run starts without the store, startgate.py)
from a refusal (not: the run stops before the training), by the judgement an upload is retried
by; a destination's manager built while its store is down holds its sets, and asks that store
nothing but the probe, until it answers. Real stores: moto's S3 server behind the fault proxy,
the Kodo-protocol test server, a file:// directory."""
from __future__ import annotations

import random
import time

import boto3
import pytest

from tests.faultproxy import FaultProxy
from tests.test_process_tree import wait_for
from trainvisor.config import UploadConfig
from trainvisor.events import Checkpoint, CheckpointFile
from trainvisor.run.build import build_manager
from trainvisor.uploaders import UploadError, open_uploader
from trainvisor.uploaders.journal import QUEUED, SKIPPED, VERIFIED
from trainvisor.uploaders.outcomes import RetryPolicy
from trainvisor.uploaders.s3 import S3Uploader

PROBE = r"/pre/p/\.trainvisor-probe-"


@pytest.fixture
def proxied(moto):
    """moto's S3 server (bucket `pre`) behind the fault proxy."""
    boto3.client("s3", endpoint_url=moto).create_bucket(Bucket="pre")
    with FaultProxy(moto) as proxy:
        yield proxy


def _refused(uploader) -> UploadError:
    with pytest.raises(UploadError) as err:
        uploader.preflight()
    return err.value


def _snapshot(tmp_path, step: int) -> Checkpoint:
    path = tmp_path / "ckpt" / f"model_step_{step}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(range(256)) * 64)
    return Checkpoint(name=path.name, files=(CheckpointFile(str(path), path.name),), iteration=step, epoch=None,
                      root=str(path.parent), framework="pytorch")


def _manager(url: str, uploader, tmp_path, **upload):
    """What a run builds for the destination (defer_unreachable: a run's way), retries at 0.2 s."""
    return build_manager(UploadConfig(to=url, retry_max_delay=0.2, **upload), uploader, run_dir=str(tmp_path / "run"),
                         run_id="gate", defer_unreachable=True)


def test_s3_preflight_says_an_outage_is_retryable_and_a_refusal_is_not(proxied):
    up = S3Uploader("pre", url="s3://pre/p", endpoint_url=proxied.url)
    proxied.down(3600)
    down = _refused(up)
    assert down.retryable and str(down) == "cannot write a probe object on s3://pre/p: ConnectionClosedError"
    proxied.down(0)
    proxied.inject("PUT", PROBE, 503, times=10)  # botocore tries 3 times itself
    busy = _refused(up)
    assert busy.retryable and str(busy) == "cannot write a probe object on s3://pre/p: ServiceUnavailable"
    proxied.clear_faults()
    proxied.inject("PUT", PROBE, 403, times=1)  # a 403 whose code is no known refusal: still a refusal
    denied = _refused(up)
    assert not denied.retryable and str(denied) == "cannot write a probe object on s3://pre/p: InternalError"
    up.preflight()  # and the store, answering, passes


def test_kodo_and_file_preflights_tell_an_outage_from_a_refusal(kodo, tmp_path):
    up = open_uploader("kodo://ckpt/p", state_dir=str(tmp_path))
    kodo.down(3600)
    down = _refused(up)
    assert down.retryable and str(down).startswith("cannot write a probe object on kodo://ckpt/p: connection failed")
    kodo.down(0)
    kodo.inject("POST", r"^/$", 503)
    assert _refused(up).retryable
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way")
    in_the_way = _refused(open_uploader(f"file://{blocker}/store"))
    assert not in_the_way.retryable and str(in_the_way).endswith(": Not a directory")


def test_the_backoff_stays_at_its_cap_however_long_the_outage():
    """2 ** attempt past 1023 no longer converts to a float: hours at a 30 s cap got there."""
    rng = random.Random(7)
    assert all(0 <= RetryPolicy(cap=30.0).delay(attempt, rng) <= 30.0 for attempt in (0, 10, 1100, 100_000))


def test_a_manager_built_while_its_store_is_down_holds_its_sets_until_it_answers(proxied, tmp_path, caplog):
    """Two sets queued while S3 is down: nothing but the probe reaches the store meanwhile; once it
    answers, the backlog goes, judged as any queue is (--keep-last 1: the older set, which
    retention would delete at once, is skipped)."""
    caplog.set_level("INFO", logger="trainvisor.upload")
    proxied.down(3600)
    m = _manager("s3://pre/p", S3Uploader("pre", url="s3://pre/p", endpoint_url=proxied.url), tmp_path,
                 keep_last=1)
    try:
        first, second = m.submit(_snapshot(tmp_path, 1)), m.submit(_snapshot(tmp_path, 2))
        wait_for(lambda: proxied.count("PUT") >= 2, 30, "the preflight tried again")
        assert not first.done() and m.report().sets.pending == (
            "p/gate/model_step_1.pt.manifest.json", "p/gate/model_step_2.pt.manifest.json")
        asked = {path.rpartition("/")[0] + "/" + path.rpartition("/")[2][:18] for _m, path, _q, _s in proxied.requests}
        assert asked == {"/pre/p/.trainvisor-probe-"}  # the probe alone: no upload, no listing, no deletion
        proxied.down(0)
        assert [first.result(timeout=30).state, second.result(timeout=30).state] == [SKIPPED, VERIFIED]
    finally:
        m.close()
    said = caplog.text
    assert said.count("cannot be reached") == 1 and "upload destination s3://pre/p answers now" in said


def test_a_store_that_answers_with_a_refusal_keeps_its_sets_queued(proxied, tmp_path, caplog):
    """Down at start, then back with credentials that no longer reach the prefix (403): retrying
    ends, said once; the set stays queued (pending) for `trainvisor resume`, never failed."""
    proxied.down(3600)
    m = _manager("s3://pre/p", S3Uploader("pre", url="s3://pre/p", endpoint_url=proxied.url), tmp_path)
    try:
        future = m.submit(_snapshot(tmp_path, 1))
        proxied.scope("pre", "elsewhere/")
        proxied.down(0)
        wait_for(lambda: "refuses now" in caplog.text, 30, "the refusal said")
        assert m.report().sets.pending == ("p/gate/model_step_1.pt.manifest.json",) and not future.done()
    finally:
        m.close()
    assert future.result(timeout=10).state == QUEUED
    assert ("upload destination s3://pre/p refuses now (cannot write a probe object on s3://pre/p: AccessDenied): "
            "its checkpoint sets stay queued for `trainvisor resume`") in caplog.text


def test_a_kodo_destination_down_at_start_catches_up(kodo, tmp_path):
    kodo.down(3600)
    m = _manager("kodo://ckpt/p", open_uploader("kodo://ckpt/p", state_dir=str(tmp_path)), tmp_path)
    try:
        future = m.submit(_snapshot(tmp_path, 3))
        assert not future.done()
        kodo.down(0)
        assert future.result(timeout=30).state == VERIFIED
    finally:
        m.close()
    assert kodo.read_object("ckpt", "p/gate/model_step_3.pt") == bytes(range(256)) * 64


def test_closing_never_waits_longer_than_its_timeout_on_a_preflight_in_flight(proxied, tmp_path):
    """The store came back too slow to answer: a retried probe hangs. Closing (the run's end)
    returns within its timeout all the same; the set stays queued for the next start."""
    proxied.down(3600)
    m = _manager("s3://pre/p", S3Uploader("pre", url="s3://pre/p", endpoint_url=proxied.url), tmp_path)
    future = m.submit(_snapshot(tmp_path, 4))
    proxied.inject("PUT", PROBE, 20.0, times=100)  # held 20 s, or until the proxy stops
    proxied.down(0)
    wait_for(lambda: proxied.holding >= 1, 30, "a probe held")
    began = time.monotonic()
    m.close(0.5)
    assert time.monotonic() - began < 3.0
    assert future.result(timeout=5).state == QUEUED
