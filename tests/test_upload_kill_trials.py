"""A kill between two store calls leaves no debris (issue 23). Twenty trials: `trainvisor run`
uploads two checkpoint sets to moto S3 through the fault proxy (one set's weights are a
2-part multipart upload), and is SIGKILLed at its Nth request to the store, N = 4..21 (every
moment after the preflight): on even N the store has acted on the request and the reply is
lost (HoldReply), on odd N the request never reaches the store (and two more trials swap them). Then the training is started
again on the same run folder. Each time: every object written once (a whole-object PUT or a
completed multipart upload per key, manifests included), every object equal to its file,
every journal row verified, and no multipart upload left open."""
from __future__ import annotations

import signal
import subprocess

import boto3
import pytest

from tests.conftest import s3_env
from tests.faultproxy import FaultProxy, HoldReply
from tests.killed_runs import (MB, expected_objects, journal_rows, manifests, open_uploads, recorded, run,
                               run_argv, s3_objects, write_log, writes_by_path)
from tests.test_process_tree import wait_for  # the store's counters tell nobody: they are looked at

SETS = ["lenet_iter_10", "lenet_iter_20"]
# A whole first attempt makes 21 requests: the probe's PUT and DELETE, the sweep of open uploads,
# then the uploads (4 small PUTs + HEADs, the large file's ListMultipartUploads, Create, 2 parts,
# Complete, HEAD, each manifest's HEAD, PUT, HEAD), in an order the 2 workers vary.
KILL_POINTS = [(n, n % 2 == 0) for n in range(4, 22)] + [(14, False), (17, True)]


def _all_done(s3, bucket: str) -> bool:
    return len(manifests(s3_objects(s3, bucket))) == len(SETS)


@pytest.mark.parametrize("n, lost_reply", KILL_POINTS, ids=[f"{n}-{'reply lost' if lost else 'never sent'}"
                                                            for n, lost in KILL_POINTS])
def test_sigkill_at_the_nth_store_request_then_a_rerun_leaves_every_object_once_and_nothing_open(
        moto_module_endpoint, tmp_path, n, lost_reply):
    s3 = boto3.client("s3", endpoint_url=moto_module_endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                      region_name="us-east-1")
    bucket = f"trial-{n}-{int(lost_reply)}"
    s3.create_bucket(Bucket=bucket)
    work = tmp_path / "w"
    (work / "snap").mkdir(parents=True)
    log = write_log(work / "train.log", iters=20, snapshot=10)
    with FaultProxy(moto_module_endpoint) as proxy:
        env = s3_env(proxy.url, tmp_path)
        to = f"s3://{bucket}/b"
        proxy.inject_nth(n, HoldReply(600) if lost_reply else 600.0)
        first = subprocess.Popen(run_argv(work, to, log, "--sleep-at-end", "60", "--large-size", str(9 * MB),
                                          "--large-every", "2"),
                                 cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for(lambda: first.poll() is not None or (sorted(recorded(work)) == SETS and (
                proxy.holding >= 1 or _all_done(s3, bucket))),
                60, f"request {n}")
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait(30)
        assert first.returncode == -signal.SIGKILL
        killed_at = len(proxy.requests)

        again = run(run_argv(work, to, log, "--no-snapshots"), work, env)
        assert again.returncode == 0, again.stderr[-3000:]
        # Looked at while the proxy still holds request n: a held request reaches the store
        # when the proxy stops (the first attempt's last word, after these checks).
        objects = s3_objects(s3, bucket)
        writes = writes_by_path(proxy)
        assert open_uploads(s3, bucket) == []
    assert {k: v for k, v in objects.items() if not k.endswith(".manifest.json")} == expected_objects(work, "b/r1")
    assert sorted(m["name"] for m in manifests(objects).values()) == SETS
    assert {f"/{bucket}/{key}": 1 for key in objects} == dict(writes), (n, killed_at, writes)
    assert set(journal_rows(work).values()) == {"verified"}
