"""A failed preflight tells an outage (retryable) from a refusal (not), by the judgement an
upload is retried by. Real stores: moto's S3 server behind the fault proxy, the Kodo-protocol
test server, a file:// directory."""
from __future__ import annotations

import random

import boto3
import pytest

from tests.faultproxy import FaultProxy
from trainvisor.uploaders import UploadError, open_uploader
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
