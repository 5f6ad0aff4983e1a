"""Credentials from a file (`upload.credentials`, `--credentials`): read for the destination, its
keys over the environment, never shown (not in errors, `config show`, the run log)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from trainvisor.errors import ConfigError
from trainvisor.uploaders import UploadError, open_uploader
from trainvisor.uploaders.credentials import S3Credentials, read_credentials_file

from tests.conftest import KODO_AK, KODO_SK

QINIU_KEYS = ("QINIU_ACCESS_KEY", "QINIU_SECRET_KEY", "QINIU_UP_HOST", "QINIU_RS_HOST", "QINIU_REGION")


def kodo_file(path, server_url: str, secret: str = KODO_SK) -> str:
    path.write_text(f"# mounted from the platform's secret store\nexport QINIU_ACCESS_KEY={KODO_AK}\n"
                    f"QINIU_SECRET_KEY='{secret}'\n\nQINIU_UP_HOST=\"{server_url}\"\nQINIU_RS_HOST={server_url}\n")
    return str(path)


def test_the_file_forms_are_read_and_bad_lines_are_named_without_their_value(tmp_path):
    path = kodo_file(tmp_path / "c.env", "http://127.0.0.1:9")
    assert read_credentials_file(path) == {"QINIU_ACCESS_KEY": KODO_AK, "QINIU_SECRET_KEY": KODO_SK,
                                           "QINIU_UP_HOST": "http://127.0.0.1:9", "QINIU_RS_HOST": "http://127.0.0.1:9"}
    cases = {"QINIU_SECRETKEY=s3cr3t-value\n": f"{tmp_path / 'bad.env'}:1: unknown key 'QINIU_SECRETKEY'",
             "# c\ns3cr3t-value\n": f"{tmp_path / 'bad.env'}:2: expected KEY=value",
             "AWS_ACCESS_KEY_ID=\n": f"{tmp_path / 'bad.env'}:1: AWS_ACCESS_KEY_ID is empty"}
    for text, message in cases.items():
        (tmp_path / "bad.env").write_text(text)
        with pytest.raises(ConfigError) as err:
            read_credentials_file(tmp_path / "bad.env")
        assert str(err.value).startswith(message) and "s3cr3t" not in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"upload.credentials: cannot read .*nothere.env: No such file"):
        read_credentials_file(tmp_path / "nothere.env")


def test_s3_credentials_keep_their_secrets_out_of_repr():
    creds = S3Credentials.from_env({"AWS_ACCESS_KEY_ID": "AKIA1", "AWS_SECRET_ACCESS_KEY": "topsecret",
                                    "AWS_SESSION_TOKEN": "tok3n", "AWS_REGION": "eu-west-1"})
    assert (creds.access_key_id, creds.secret_access_key, creds.session_token, creds.region) == \
        ("AKIA1", "topsecret", "tok3n", "eu-west-1")
    assert "topsecret" not in repr(creds) and "tok3n" not in repr(creds)


def test_kodo_credentials_and_hosts_from_the_file_alone(kodo, tmp_path, monkeypatch):
    for name in QINIU_KEYS:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match="set QINIU_UP_HOST"):
        open_uploader("kodo://ckpt/p", state_dir=str(tmp_path))
    up = open_uploader("kodo://ckpt/p", state_dir=str(tmp_path), credentials=kodo_file(tmp_path / "c.env", kodo.url))
    up.preflight()
    src = tmp_path / "w.pth"
    src.write_bytes(b"weights" * 1000)
    up.upload(str(src), "p/w.pth")
    assert kodo.read_object("ckpt", "p/w.pth") == src.read_bytes()


def test_the_files_keys_win_over_the_environment(kodo, tmp_path):
    # the environment (set by the fixture) is right; the file's wrong secret is the one used
    creds = kodo_file(tmp_path / "c.env", kodo.url, secret="SK-from-the-file-wrong-5e1")
    with pytest.raises(UploadError) as err:
        open_uploader("kodo://ckpt/p", state_dir=str(tmp_path), credentials=creds).preflight()
    assert "bad credentials" in str(err.value) and "SK-from-the-file" not in str(err.value)


def test_s3_credentials_from_the_file_alone(moto, tmp_path, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    import boto3

    boto3.session.Session(aws_access_key_id="x", aws_secret_access_key="y", region_name="us-east-1").client(
        "s3", endpoint_url=moto).create_bucket(Bucket="credsbucket")
    creds = tmp_path / "aws.env"
    creds.write_text(f"AWS_ACCESS_KEY_ID=AKIAFILE\nAWS_SECRET_ACCESS_KEY=from-the-file\nAWS_ENDPOINT_URL={moto}\n")
    with pytest.raises(UploadError, match="NoCredentialsError"):
        open_uploader("s3://credsbucket/p", state_dir=str(tmp_path), env={**os.environ, "AWS_ENDPOINT_URL": moto}
                      ).preflight()
    up = open_uploader("s3://credsbucket/p", state_dir=str(tmp_path), credentials=str(creds))
    up.preflight()
    src = tmp_path / "w.pth"
    src.write_bytes(b"w" * 5000)
    assert up.upload(str(src), "p/w.pth").size == 5000


def test_cli_upload_and_config_show_take_the_file_and_never_show_a_secret(kodo, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in QINIU_KEYS}
    creds = kodo_file(tmp_path / "c.env", kodo.url)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "e1.pth").write_bytes(b"x" * 3000)
    up = subprocess.run([sys.executable, "-m", "trainvisor", "upload", "ckpt", "--to", "kodo://ckpt/cli",
                         "--credentials", creds, "--run-dir", "ur"], cwd=tmp_path, env=env,
                        capture_output=True, text=True, timeout=60)
    assert up.returncode == 0, up.stderr
    assert kodo.keys("ckpt") == ["cli/e1.pth"] and kodo.read_object("ckpt", "cli/e1.pth") == b"x" * 3000
    show = subprocess.run([sys.executable, "-m", "trainvisor", "config", "show", "--credentials", creds,
                           "--upload-to", "kodo://ckpt/cli", "--", "true"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert show.returncode == 0, show.stderr
    assert f"credentials: \"{creds}\"" in show.stdout and KODO_SK not in show.stdout
    logs = "".join(p.read_text() for p in (tmp_path / "ur").glob("*.log"))
    assert logs and KODO_SK not in logs and KODO_SK not in up.stderr
