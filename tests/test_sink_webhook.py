"""The webhook sink against a real HTTP server on 127.0.0.1 (http.server on its own thread): real
logs' records delivered in order and exactly once; the epoch statistics (ABEJA's shape) equal
what the logs print; a receiver that answers 503 and then stops listening, then comes back:
every record within the queue bound delivered once, the drop counter exactly what exceeded it;
the 1 MB split; a record too large alone; the bearer token from the environment and from a
credentials file, never in a message; a real `trainvisor run --sink webhook` over fake-caffe.
Backoff waits run on an injected clock: no test sleeps."""
from __future__ import annotations

import csv
import functools
import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import trainvisor
from trainvisor import Run, RunConfig
from trainvisor.config import ParsingConfig, RunDirConfig, SinksConfig
from trainvisor.errors import ConfigError
from trainvisor.events import Metric, Notice
from trainvisor.sinks.registry import get_sink_info, make_sink
from trainvisor.sinks.webhook import WebhookSink

from .conftest import FAKE_CAFFE, ROOT, real_logs

TOKEN = "tok-3f9a-never-shown"


class Receiver:
    """A webhook receiver: every request's headers and JSON kept; `status` answered (200 unless
    set); `down()` stops listening on its port, `up()` listens on the same port again."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.sizes: list[int] = []
        self.auth: list[str] = []
        self.status = 200
        self.retry_after = ""  # a Retry-After header sent with a refusal
        self.refused = 0  # answers other than 2xx
        self._server = self._thread = None
        self.port = 0
        self.up()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def up(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                data = self.rfile.read(int(self.headers["Content-Length"]))
                if owner.status == 200:
                    owner.bodies.append(json.loads(data))
                    owner.sizes.append(len(data))
                    owner.auth.append(self.headers.get("Authorization", ""))
                else:
                    owner.refused += 1
                self.send_response(owner.status)
                if owner.retry_after and owner.status != 200:
                    self.send_header("Retry-After", owner.retry_after)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="test-webhook-receiver")
        self._thread.start()

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
            self._server = None

    def items(self, kind: str) -> list[dict]:
        return [x for b in self.bodies for x in b[kind]]


class Clock:
    """The sink's clock; its sleep advances it (a backoff wait costs no real time)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def receiver(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)  # the requests go to 127.0.0.1, whatever the machine's proxy
    r = Receiver()
    yield r
    r.down()


def _sink(receiver: Receiver, clock: Clock, **options) -> WebhookSink:
    options.setdefault("environ", {})
    return WebhookSink(receiver.url, clock=clock, sleep=clock.sleep, **options)


@functools.lru_cache(maxsize=None)
def _events(framework: str, log: str) -> tuple:
    """A real log's records, replayed once per session (its wall times then agree between uses)."""
    return trainvisor.replay(real_logs(framework) / log, year=2015).events


def _keras_epochs() -> list[dict]:
    """Each `Epoch N/30` of the esartic log and the values its line prints, read with a regex."""
    epoch, out = 0, []
    values = re.compile(r" - loss: (\S+) - acc: (\S+) - val_loss: (\S+) - val_acc: (\S+)$")
    for line in (real_logs("keras") / "esartic-sound-cnn-30ep.log").read_text().splitlines():
        if line.startswith("Epoch ") and line.endswith("/30"):
            epoch = int(line[len("Epoch "):-len("/30")])
        elif (m := values.search(line)):
            a, b, c, d = map(float, m.groups())
            out.append({"num_epochs": 30, "epoch": epoch, "stages": {"train": {"loss": a, "accuracy": b},
                                                                     "validation": {"loss": c, "accuracy": d}}})
    return out


def test_keras_records_and_epoch_statistics_equal_the_log(receiver):
    events = _events("keras", "esartic-sound-cnn-30ep.log")
    clock = Clock()
    sink = _sink(receiver, clock, num_epochs=30, batch_seconds=2.0, run_id="fold-cv")
    for i in range(0, len(events), 7):
        sink.write(events[i:i + 7])
        clock.now += 1.0
    sink.close()
    assert receiver.items("metrics") == [e.to_json_dict() for e in events]
    assert receiver.items("statistics") == _keras_epochs()
    assert len(receiver.items("statistics")) == 300  # 10 folds of 30 epochs
    assert [b["batch"] for b in receiver.bodies] == list(range(1, len(receiver.bodies) + 1))
    assert {b["run_id"] for b in receiver.bodies} == {"fold-cv"}
    c = sink.stats()
    counted = (c.requests, c.delivered, c.statistics, c.dropped, c.failed, c.held)
    assert counted == (len(receiver.bodies), 1200, 300, 0, 0, 0)
    assert 1 < c.requests < len(events) / 7  # batched: every 2 seconds of writes, not once per write


def test_caffe_statistics_end_an_epoch_at_each_test_and_equal_the_reference_tables(receiver):
    events = _events("caffe", "bearpaw-fork-mnist.log")
    sink = _sink(receiver, Clock(), batch_seconds=0)
    sink.write(events)
    sink.close()
    d = real_logs("caffe")
    tests = list(csv.DictReader(open(d / "bearpaw-fork-mnist.log.test.csv")))
    train = {float(r["NumIters"]): r for r in csv.DictReader(open(d / "bearpaw-fork-mnist.log.train.csv"))}
    stats = receiver.items("statistics")
    assert [s["iteration"] for s in stats] == [int(float(r["NumIters"])) for r in tests]
    assert [s["epoch"] for s in stats] == list(range(len(tests)))  # the test before training is epoch 0
    for s, t in zip(stats, tests):
        assert s["stages"]["validation"] == {"accuracy": float(t["accuracy"]), "loss": float(t["loss"])}
        shown = train.get(float(t["NumIters"]))  # the training loss Caffe prints at the test's iteration
        if shown is not None:
            assert s["stages"]["train"]["loss"] == float(shown["loss"])
    assert receiver.items("metrics") == [e.to_json_dict() for e in events if type(e) is Metric]
    assert len(receiver.items("events")) == 20  # the snapshots the log announces


def test_a_receiver_down_for_a_while_loses_nothing_within_the_queue_and_counts_exactly_what_exceeded_it(receiver):
    events = _events("keras", "esartic-sound-cnn-30ep.log")
    clock = Clock()
    sink = _sink(receiver, clock, num_epochs=30, batch_seconds=0, queue=50, backoff=1.0, backoff_max=4.0)
    epoch = [events[i:i + 4] for i in range(0, len(events), 4)]  # one epoch's line per write
    receiver.status = 503
    for batch in epoch[:15]:  # the first fold's first 15 epochs: answered 503
        sink.write(batch)
        clock.now += 1.0
    answered_503 = receiver.refused
    receiver.down()
    for batch in epoch[15:30]:  # then nobody listening: refused connections
        sink.write(batch)
        clock.now += 1.0
    assert receiver.bodies == [] and answered_503 > 1
    receiver.status = 200
    receiver.up()
    clock.now += 4.0  # the longest backoff is over: the next write sends what was held, then itself
    for batch in epoch[30:]:
        sink.write(batch)
    sink.close()
    # held: 50 items, one epoch's 4 metrics then its statistics when the next epoch's first metric
    # comes: epochs 1-10's 40 metrics and 10 statistics; the first fold's epochs 11-30 found it full
    want = [e.to_json_dict() for e in events[:40] + events[120:]]
    assert receiver.items("metrics") == want  # in order, each once
    stats = receiver.items("statistics")
    epochs = _keras_epochs()
    assert stats == epochs[:10] + epochs[29:]  # epoch 30's statistics came after the receiver did
    c = sink.stats()
    assert (c.dropped, c.dropped_statistics, c.delivered, c.failed, c.held) == (80, 19, 1120, 0, 0)
    assert c.retries >= answered_503 + 1  # each 503 and at least one refused connection, retried
    assert c.requests == len(receiver.bodies)


def test_a_retry_after_is_waited_and_the_retried_request_is_the_same_batch(receiver):
    events = _events("caffe", "bearpaw-fork-mnist.log")
    clock = Clock()
    sink = _sink(receiver, clock, batch_seconds=0, backoff=1.0, backoff_max=30.0)
    receiver.status, receiver.retry_after = 429, "7"
    sink.write(events[:10])
    receiver.status = 200
    clock.now += 6.5
    sink.flush()  # the receiver asked for 7 seconds: not yet
    assert receiver.bodies == [] and receiver.refused == 1
    clock.now += 0.5
    sink.flush()
    assert [b["batch"] for b in receiver.bodies] == [1]  # the retried request keeps its number
    assert receiver.items("metrics") == [e.to_json_dict() for e in events[:10] if type(e) is Metric]
    sink.close()
    assert sink.stats().retries == 1


def test_a_receiver_that_never_answers_times_out_and_is_retried_then_given_up_at_the_end(caplog):
    events = [e for e in _events("caffe", "bearpaw-fork-mnist.log")[:8] if type(e) is Metric]
    with socket.socket() as silent:  # listens (the kernel accepts) but never reads nor answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        clock = Clock()
        sink = WebhookSink(f"http://127.0.0.1:{silent.getsockname()[1]}/hook", environ={}, batch_seconds=0,
                           timeout=0.2, retries=1, clock=clock, sleep=clock.sleep)
        sink.write(events)
        assert (sink.stats().retries, sink.stats().held) == (1, len(events))
        sink.close()
    assert (sink.stats().retries, sink.stats().failed, sink.stats().delivered) == (2, len(events), 0)
    assert "no answer (TimeoutError: timed out); records held" in caplog.text


def test_a_batch_over_max_bytes_goes_as_several_requests_none_over_it_no_record_cut(receiver):
    events = [e for _ in range(5) for e in _events("keras", "esartic-sound-cnn-30ep.log")]
    clock = Clock()
    sink = _sink(receiver, clock, batch_seconds=3600)  # held until a request is full, or the end
    big = Notice("huge", "x" * 1_000_100, 1, 0.0)  # a record that alone is over 1 MB
    sink.write(events[:3000] + [big] + events[3000:])
    sink.close()
    assert len(receiver.bodies) >= 2 and max(receiver.sizes) <= 1_000_000
    largest = max(len(json.dumps(e.to_json_dict(), separators=(",", ":"))) for e in events)
    assert all(size > 1_000_000 - largest - 1 for size in receiver.sizes[:-1])  # each request filled
    assert receiver.items("metrics") == [e.to_json_dict() for e in events]
    assert receiver.items("events") == []
    c = sink.stats()
    assert (c.too_large, c.failed, c.delivered) == (1, 1, 6000)


def test_bearer_token_from_the_environment_and_from_a_credentials_file_never_logged(receiver, tmp_path, caplog):
    m = _events("caffe", "bearpaw-fork-mnist.log")[:5]
    caplog.set_level(logging.DEBUG)
    env_sink = _sink(receiver, Clock(), batch_seconds=0, environ={"TRAINVISOR_WEBHOOK_TOKEN": TOKEN})
    env_sink.write(m)
    env_sink.close()
    creds = tmp_path / "creds.env"
    creds.write_text(f"# webhook\nexport HOOK_TOKEN='{TOKEN}-file'\nAWS_REGION=eu-west-1\n")
    file_sink = _sink(receiver, Clock(), batch_seconds=0, token_env="HOOK_TOKEN", credentials=str(creds),
                      environ={"HOOK_TOKEN": "from-env-ignored"})
    file_sink.write(m)
    receiver.status = 401  # a refused token: the request is rejected, said, and the token is not
    file_sink.write(m)
    file_sink.close()
    # the env sink: its records, then the last epoch's statistics at close; the file sink: its
    # first records (the second write and its statistics were refused)
    assert receiver.auth == [f"Bearer {TOKEN}"] * 2 + [f"Bearer {TOKEN}-file"]
    assert (file_sink.stats().rejected, file_sink.stats().failed, file_sink.stats().delivered) == (2, 5, 5)
    assert "HTTP 401" in caplog.text and TOKEN not in caplog.text


def test_a_password_in_the_url_is_sent_as_basic_auth_and_masked_in_every_message(receiver, caplog):
    caplog.set_level(logging.DEBUG)
    receiver.status = 503
    clock = Clock()
    sink = WebhookSink(f"http://hook:pw-secret@127.0.0.1:{receiver.port}/hook", environ={}, batch_seconds=0,
                       retries=1, clock=clock, sleep=clock.sleep)
    sink.write(_events("caffe", "bearpaw-fork-mnist.log")[:3])
    sink.close()
    assert sink.stats().failed == 3 and receiver.refused == 2  # the first attempt, and the one retry at the end
    assert "pw-secret" not in caplog.text and "hook:***@127.0.0.1" in caplog.text


@pytest.mark.parametrize("options, says", [
    ({}, "needs option `url`"),
    ({"url": "ftp://h/x"}, "not an http:// or https:// URL"),
    ({"url": "http://u:pw@h:port/x"}, "u:***@h"),
    ({"url": "http://h/x", "max_bytes": 50}, "leaves no room for a record"),
    ({"url": "http://h/x", "queue": 0}, "queue must be an integer >= 1"),
    ({"url": "http://h/x", "token_env": "NO_SUCH_TOKEN_VAR_3F9A"}, "NO_SUCH_TOKEN_VAR_3F9A"),
    ({"url": "http://h/x", "colour": "red"}, "unexpected keyword argument 'colour'"),
])
def test_bad_options_are_one_line_config_errors(options, says):
    with pytest.raises(ConfigError) as err:
        make_sink("webhook", options)
    assert says in str(err.value) and "\n" not in str(err.value) and "pw" not in str(err.value).replace("***", "")
    assert not get_sink_info("webhook").inline


def test_trainvisor_run_posts_the_runs_records_to_the_configured_url(receiver, tmp_path):
    cfg = tmp_path / "run.yaml"
    url = receiver.url.replace("//", "//hook:pw-secret@")  # the bearer token wins over the URL's pair
    cfg.write_text(f"sinks:\n  use: [webhook]\n  options:\n    webhook: {{url: '{url}', token_env: HOOK_T}}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINVISOR") and "proxy" not in k.lower()}
    env.update(PYTHONPATH=str(ROOT), LC_ALL="C.UTF-8", TRAINVISOR_OFFLINE="1", HOOK_T=TOKEN, COLUMNS="120")
    proc = subprocess.run([sys.executable, "-m", "trainvisor", "run", "--config", str(cfg), "--summary",
                           "--year", "2026", "--parser", "caffe", "--run-dir", str(tmp_path / "run"), "--",
                           sys.executable, str(FAKE_CAFFE), "train", "--generate", "600", "--no-snapshots"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    metrics = [{k: v for k, v in r.items() if k != "attempt"} for r in records if "event" not in r]
    got = [{k: v for k, v in r.items() if k not in ("wall_time", "stream")} for r in receiver.items("metrics")]
    assert got == [{k: v for k, v in r.items() if k not in ("wall_time", "stream")} for r in metrics]
    assert len(got) == 91
    tests = [r for r in metrics if r["phase"] == "test" and r["name"] == "accuracy"]
    assert [s["stages"]["validation"]["accuracy"] for s in receiver.items("statistics")] == [r["value"] for r in tests]
    assert set(receiver.auth) == {f"Bearer {TOKEN}"}
    assert re.search(rf"sink webhook\s+{len(records)} written\n", proc.stderr), proc.stderr[-600:]
    shown = proc.stdout + proc.stderr + "".join(p.read_text() for p in (tmp_path / "run").glob("*.*")
                                                if p.suffix in (".log", ".yaml"))
    assert "hook:***@127.0.0.1" in shown and "pw-secret" not in shown and TOKEN not in shown


def test_a_receiver_down_for_the_whole_run_never_stops_the_training_and_the_summary_counts_the_loss(receiver, tmp_path):
    url = receiver.url
    receiver.down()
    config = RunConfig(
        command=(sys.executable, str(FAKE_CAFFE), "train", "--generate", "600", "--no-snapshots"),
        parsing=ParsingConfig(parser="caffe", year=2026), run=RunDirConfig(dir=str(tmp_path / "run")),
        sinks=SinksConfig(use=("webhook",), options={"webhook": {"url": url, "backoff": 0.0, "retries": 2,
                                                                 "queue": 60, "batch_seconds": 0.0}}))
    with Run(config, stdout_fd=None, stderr_fd=None) as run:
        run.run_attempt()
        summary = run.finish()
    records = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert summary.exit_code == 0
    (c,) = [c for c in summary.sinks if c.name == "webhook"]
    assert (c.written, c.dropped + c.failed) == (0, len(records))  # every record accounted for, none sent
    # what the queue of 60 held, given up at the end: 58 records and the statistics of the two
    # epochs they close (the tests at iterations 0 and 150; the one at 300 is the 57th record's)
    tests = {r["iteration"] for r in map(json.loads, records[:58]) if r.get("phase") == "test"}
    assert tests == {0, 150, 300} and c.failed == 58 and not c.abandoned
    log = "".join(p.read_text() for p in (tmp_path / "run").glob("*.log"))
    assert f"webhook {url}: no answer" in log and "undelivered at the end of the run" in log
