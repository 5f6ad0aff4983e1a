"""Assertions for tests, rewritten by pytest (the plugin registers this module for it before
it is imported), so a failure shows pytest's own comparison of the values."""
from __future__ import annotations

import os
from typing import Any

__all__ = ["check_golden"]


def check_golden(events: Any, path: "str | os.PathLike[str]", *, update: bool = False) -> None:
    """Assert that `events` (a sequence of events, or anything with `.events`) give the metric stream
    of the golden file at `path`; `update` writes them there instead. The failure shows pytest's
    own comparison of the first differing records, under the readable account of the difference."""
    from .golden import compare_golden, format_diff, golden_records, read_golden, write_golden

    __tracebackhide__ = True
    now = golden_records(getattr(events, "events", events))
    if update:
        write_golden(path, now)
        return
    diff = compare_golden(read_golden(path), now)
    if not diff.equal:
        # the first differing records, compared by pytest's assertion rewriting (field by field)
        assert diff.now == diff.golden, format_diff(diff, os.fspath(path))
