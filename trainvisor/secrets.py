"""How a secret is shown: never. `MASK` stands for a secret value wherever a configuration or a
message is printed. `mask_url` hides what a URL carries of a secret, wherever URLs stand in a
text: the password of its user (`s3://AKIA:pw@bucket` -> `s3://AKIA:***@bucket`) and the values of
query parameters named like secrets (`?token=`, `X-Amz-Signature=`). `mask_text` also hides the
values of the known secret variables (`AWS_SECRET_ACCESS_KEY`, `QINIU_SECRET_KEY`...) and of
those `remember` was given (a credentials file's), where a message repeats one verbatim.

Messages are masked where they leave the process (the CLI's error lines and tracebacks, the
logging formatters, summary.json) and where they are made (every TrainvisorError's message; a
destination's `shown`), so an error path nobody thought of is covered by default. One small
module that imports only the standard library, so the configuration can mask what it logs at a
run's start without loading the uploaders. Cheap: a substring test before each pattern, since it
runs on every warning line (never on the data path: the training's own bytes pass through as
they are)."""
from __future__ import annotations

import functools
import os
import re
import threading
from typing import Iterable, Mapping

__all__ = ["MASK", "SECRET_VARIABLES", "mask_url", "mask_text", "remember", "remember_from"]

MASK = "***"

SECRET_VARIABLES = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "QINIU_SECRET_KEY",
                    "TRAINVISOR_WEBHOOK_TOKEN", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")
"""Variables whose values are secrets: masked where a message repeats one (the environment's, or
a credentials file's once `remember_from` read it)."""

MIN_REMEMBERED = 8
"""A shorter value is not masked verbatim: it would mask ordinary words (a test's `test` key)."""

# The user part stops at `/` or `:`; the password runs to the next `@` and may hold a `/` (AWS
# secret keys do), but no space or quote: a URL quoted in a message ends there. The scheme may be
# missing: a URL cut at its first `:` (`module:attribute`) is quoted as `//user:pw@host`.
_URL_PASSWORD = r"((?:[a-z][a-z0-9+.-]*:)?//[^\s/@:'\"<>]*):[^\s@'\"<>]*@"
_SECRET_PARAMETER = (
    r"([?&;][\w.-]*?(?:token|key|secret|passw(?:or)?d|pwd|sig|signature|credential|auth)[\w.-]*=)[^&;#\s'\"<>]+")


@functools.lru_cache(maxsize=None)
def _pattern(source: str) -> "re.Pattern[str]":
    """Compiled when a text first passes its substring test: most runs log no URL and no `=`, and
    the two patterns cost ~1 ms of a start to compile (bench/startup.py)."""
    return re.compile(source, re.IGNORECASE)


_remembered: set[str] = set()
_lock = threading.Lock()


def mask_url(text: str) -> str:
    """Every URL in `text` with its password and its secret-named query values masked:
    `s3://AKIA:secret@bucket/p?token=t` -> `s3://AKIA:***@bucket/p?token=***`; the rest unchanged."""
    if "@" in text and "//" in text:
        text = _pattern(_URL_PASSWORD).sub(lambda m: f"{m.group(1)}:{MASK}@", text)
    if "=" in text:
        text = _pattern(_SECRET_PARAMETER).sub(lambda m: m.group(1) + MASK, text)
    return text


def mask_text(text: str) -> str:
    """`mask_url`, and every known secret value (see `SECRET_VARIABLES`, `remember`) replaced by `***`."""
    text = mask_url(text)
    for value in _known_values():
        if value in text:
            text = text.replace(value, MASK)
    return text


def remember(values: Iterable[str]) -> None:
    """Mask these values in every later message (a credentials file's secrets); short ones are skipped."""
    with _lock:
        _remembered.update(v for v in values if isinstance(v, str) and len(v) >= MIN_REMEMBERED)


def remember_from(variables: Mapping[str, str]) -> None:
    """Remember the values of the secret variables among `variables` (a credentials file read)."""
    remember(variables[k] for k in SECRET_VARIABLES if k in variables)


def _known_values() -> list[str]:
    # The environment is read each time (a library caller may set a key after import); the
    # longest first, so a value that contains another is masked whole.
    values = {v for v in (os.environ.get(k) for k in SECRET_VARIABLES) if v and len(v) >= MIN_REMEMBERED}
    if _remembered:
        with _lock:
            values |= _remembered
    return sorted(values, key=len, reverse=True)
