"""How a secret is shown: never. `MASK` stands for a secret value wherever a configuration or a
message is printed, and `mask_url` hides the password of a URL (`s3://AKIA:pw@bucket`). One small
module with no imports of its own, so the configuration can mask what it logs at a run's start
without loading the uploaders."""
from __future__ import annotations

import re

__all__ = ["MASK", "mask_url"]

MASK = "***"

_URL_PASSWORD = re.compile(r"^([a-z][a-z0-9+.-]*://[^/@:]*):[^/@]*@", re.IGNORECASE)


def mask_url(text: str) -> str:
    """`s3://AKIA:secret@bucket/p` -> `s3://AKIA:***@bucket/p`; anything else unchanged."""
    return _URL_PASSWORD.sub(lambda m: f"{m.group(1)}:{MASK}@", text)
