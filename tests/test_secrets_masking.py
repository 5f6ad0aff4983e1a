"""What `trainvisor.secrets` hides and what it leaves (issue 23), and the places that mask with it
without being told: a TrainvisorError's message, the logging formatters (tracebacks too), a
bug's traceback on the CLI, summary.json, the saved configuration."""
from __future__ import annotations

import logging
import sys

import pytest

from trainvisor.secrets import MASK, mask_text, mask_url, remember

PW = "PW-s3cr3t-XYZ"


@pytest.mark.parametrize("text, shown", [
    ("s3://AKIAUSER:PW-s3cr3t-XYZ@bkt/pw", "s3://AKIAUSER:***@bkt/pw"),
    ("file://user:PW-s3cr3t-XYZ@/", "file://user:***@/"),
    ("kodo://ak:PW-s3cr3t-XYZ@bucket", "kodo://ak:***@bucket"),
    # AWS secret keys hold '/' and '+': the host part of the URL ends early, the password does not
    ("s3://AKIA:wJalr/K7MDENG+bPxRfiCY@bkt/x", "s3://AKIA:***@bkt/x"),
    # anywhere in a message, quoted or not, and every URL of it
    ("upload failed on 'http://u:PW-s3cr3t-XYZ@127.0.0.1:9/b' (refused); see https://h:PW2@x.example",
     "upload failed on 'http://u:***@127.0.0.1:9/b' (refused); see https://h:***@x.example"),
    ("kodo://bkt/p?up_host=http://u:PW-s3cr3t-XYZ@127.0.0.1:9&region=z0",
     "kodo://bkt/p?up_host=http://u:***@127.0.0.1:9&region=z0"),
    # query values named like secrets: a webhook's token, a presigned URL's signature
    ("https://hooks.example/in?team=ml&token=TK-1&X-Amz-Credential=AKIA%2F1&X-Amz-Signature=ab12#top",
     "https://hooks.example/in?team=ml&token=***&X-Amz-Credential=***&X-Amz-Signature=***#top"),
    ("http://h/api?api_key=K1;password=P2", "http://h/api?api_key=***;password=***"),
    # a URL cut at its first ':' (`--callback module:Class` read it as module `http`)
    ("http has no //u:PW-s3cr3t-XYZ@h:Cls", "http has no //u:***@h:Cls"),
])
def test_a_url_shows_its_user_and_host_never_its_password_or_secret_query(text, shown):
    assert mask_url(text) == shown
    assert mask_text(text) == shown


@pytest.mark.parametrize("text", [
    "http://host:8080/path?page=2",  # a port is no password
    "https://TOKEN-AS-USER@github.com/x",  # a user alone is shown: the message names who
    "iteration 100, loss = 0.25 (lr=0.01)",  # '=' outside a URL's query
    "user@example.com wrote s3://bkt/prefix",
])
def test_text_without_a_secret_is_left_as_it_is(text):
    assert mask_text(text) == text


def test_the_values_of_secret_variables_are_masked_where_a_message_repeats_them(monkeypatch):
    monkeypatch.setenv("QINIU_SECRET_KEY", "SK-qiniu-0123456789")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")  # shorter than 8: would mask ordinary words
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIA-not-a-secret")
    said = mask_text("signature of AKIA-not-a-secret with SK-qiniu-0123456789 refused; test bucket")
    assert said == "signature of AKIA-not-a-secret with *** refused; test bucket"


def test_a_credentials_files_secrets_are_masked_once_it_was_read(tmp_path):
    from trainvisor.uploaders.credentials import read_credentials_file

    (tmp_path / "creds.env").write_text("export AWS_ACCESS_KEY_ID=AKIAFILE\nAWS_SECRET_ACCESS_KEY='CF-s3cr3t-77/aa'\n")
    assert mask_text("bad signature for CF-s3cr3t-77/aa") == "bad signature for CF-s3cr3t-77/aa"
    read_credentials_file(tmp_path / "creds.env")
    assert mask_text("bad signature for CF-s3cr3t-77/aa (AKIAFILE)") == "bad signature for *** (AKIAFILE)"


def test_remembered_values_are_masked_the_longest_first():
    remember(["RV-abcdefgh", "RV-abcdefgh-longer", "short"])
    assert mask_text("RV-abcdefgh-longer / RV-abcdefgh / short") == "*** / *** / short"


def test_every_trainvisor_error_is_masked_when_it_is_made():
    from trainvisor.errors import ConfigError
    from trainvisor.uploaders.base import ReadError, UploadError

    for cls, kwargs in ((ConfigError, {}), (UploadError, {"retryable": True}), (ReadError, {"retryable": False})):
        err = cls(f"cannot reach http://eu:{PW}@127.0.0.1:9/bkt", **kwargs)
        assert str(err) == "cannot reach http://eu:***@127.0.0.1:9/bkt" and err.args == (str(err),)


def _record_with_traceback() -> logging.LogRecord:
    try:
        raise RuntimeError(f"POST to https://hook:{PW}@127.0.0.1:9/in?token=TK-1 failed")
    except RuntimeError:
        return logging.LogRecord("trainvisor.sinks", logging.ERROR, __file__, 1, "sink %s failed at %s",
                                 ("webhook", f"https://hook:{PW}@127.0.0.1:9/in"), sys.exc_info())


def test_the_run_logs_formatter_masks_the_message_and_the_traceback():
    from trainvisor.run.logsetup import MaskingFormatter

    text = MaskingFormatter("%(levelname)s %(name)s: %(message)s").format(_record_with_traceback())
    assert PW not in text and "TK-1" not in text
    assert text.startswith("ERROR trainvisor.sinks: sink webhook failed at https://hook:***@127.0.0.1:9/in\nTraceback")
    assert text.endswith("RuntimeError: POST to https://hook:***@127.0.0.1:9/in?token=*** failed")


def test_the_stderr_formatter_masks_the_line_it_makes_of_a_record_with_an_exception():
    from trainvisor.run.logsetup import OneLineFormatter

    text = OneLineFormatter("trainvisor: %(message)s").format(_record_with_traceback())
    assert text == ("trainvisor: sink webhook failed at https://hook:***@127.0.0.1:9/in (RuntimeError: POST to "
                    "https://hook:***@127.0.0.1:9/in?token=*** failed) (traceback in the run log)")


def test_a_bugs_traceback_on_the_cli_is_printed_whole_and_masked(capsys):
    from trainvisor.cli import _masked_traceback

    try:
        raise KeyError(f"s3://AKIA:{PW}@bkt")
    except KeyError:
        _masked_traceback(*sys.exc_info())
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):\n") and err.endswith("KeyError: 's3://AKIA:***@bkt'\n")
    assert PW not in err


def test_summary_json_and_the_printed_summary_mask_what_the_run_ended_on(tmp_path):
    from trainvisor.run.summary import RunSummary, UploadTotals
    from trainvisor.run.summaryfile import read_summary, write_summary
    from trainvisor.summary import format_summary

    summary = RunSummary(run_id="r1", attempt=1, run_dir=str(tmp_path), exit_code=0, returncode=0, lines=1,
                         events=0, command=("python", "train.py", f"--db=postgres://ml:{PW}@db:5432/runs"),
                         warnings=(f"nothing uploaded to https://u:{PW}@store.example/ckpt",),
                         uploads=UploadTotals.from_report(f"myfs://u:{PW}@nas/ckpt", _NoSets()))
    write_summary(summary, tmp_path)
    assert PW not in (tmp_path / "summary.json").read_text()
    back = read_summary(tmp_path)
    assert back.command[-1] == "--db=postgres://ml:***@db:5432/runs"
    assert back.warnings == ("nothing uploaded to https://u:***@store.example/ckpt",)
    assert back.uploads.destination == "myfs://u:***@nas/ckpt"
    printed = format_summary(summary)
    assert PW not in printed and "https://u:***@store.example/ckpt" in printed


class _NoSets:
    """A DrainReport that drained nothing (UploadTotals.from_report reads these fields)."""

    class sets:  # noqa: N801 - the attribute's name
        verified = pending = failed = ()

    verified = pending = failed = ()


def test_the_saved_configuration_masks_a_password_in_the_commands_arguments(tmp_path):
    from trainvisor.config import RunConfig
    from trainvisor.config.dump import dump

    config = RunConfig.from_dict({"command": ["python", "train.py", "--db", f"postgres://ml:{PW}@db/runs"],
                                  "upload": {"to": f"file://{tmp_path}/store"}})
    shown = dump(config, "yaml")
    assert PW not in shown and "postgres://ml:***@db/runs" in shown and MASK in shown


def test_a_webhooks_bearer_token_under_any_variable_is_masked_once_the_sink_is_made():
    from trainvisor.sinks.webhook import WebhookSink

    token = "WT-hook-token-5150"
    assert mask_text(f"401: bad token {token}") == f"401: bad token {token}"
    sink = WebhookSink("http://127.0.0.1:9/in", token_env="MY_HOOK_TOKEN", environ={"MY_HOOK_TOKEN": token})
    sink.close()
    assert mask_text(f"401: bad token {token}") == "401: bad token ***"


def test_a_threads_traceback_on_the_cli_is_masked_and_its_exit_silent(capsys):
    import threading

    from trainvisor.cli import _masked_thread_traceback

    thread = threading.Thread(name="trainvisor-upload-1")
    try:
        raise ConnectionError(f"reset by http://eu:{PW}@127.0.0.1:9")
    except ConnectionError:
        _masked_thread_traceback(threading.ExceptHookArgs((*sys.exc_info(), thread)))
    _masked_thread_traceback(threading.ExceptHookArgs((SystemExit, SystemExit(0), None, thread)))
    err = capsys.readouterr().err
    assert err.startswith("Exception in thread trainvisor-upload-1:\nTraceback (most recent call last):\n")
    assert err.endswith("ConnectionError: reset by http://eu:***@127.0.0.1:9\n") and PW not in err
