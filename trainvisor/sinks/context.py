"""`SinkContext`: what a sink may know of the run it writes for, handed to a factory that asks.

Why a factory asks by naming a `context` parameter instead of every sink getting the run: most
sinks need nothing but their records, and a sink that holds the Run could reach into its parts.
The context is small and immutable: the run's identity and its configuration (an MLflow run's
params).
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

__all__ = ["SinkContext"]


class SinkContext(NamedTuple):
    """The run a sink is made for. `attempt`: the starts on the run directory (above 1, a sink
    may continue what it began). `config` is the run's `RunConfig` (None for a replay); show it
    with `config.convert.to_dict(config, mask_secrets=True)`, never as it is: it may hold secrets."""

    run_id: str
    run_dir: str
    attempt: int = 1
    config: Optional[Any] = None
