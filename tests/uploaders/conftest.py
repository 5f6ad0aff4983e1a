"""Every uploader test runs offline: a destination that is not on 127.0.0.1 is refused."""
import pytest


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("TRAINVISOR_OFFLINE", "1")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
