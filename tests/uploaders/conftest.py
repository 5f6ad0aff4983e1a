"""Every uploader test runs offline: a destination that is not on 127.0.0.1 is refused."""
import pytest


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("TRAINVISOR_OFFLINE", "1")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


@pytest.fixture
def moto(moto_endpoint, tmp_path, monkeypatch):
    """The shared moto server, with dummy credentials in this process's environment."""
    for name in ("AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        empty = tmp_path / name
        empty.write_text("")
        monkeypatch.setenv(name, str(empty))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    return moto_endpoint
