"""`SinkContext`: what a sink may know of the run it writes for, handed to a factory that asks.

Why a factory asks by naming a `context` parameter instead of every sink getting the run: most
sinks need nothing but their records, and a sink that holds the Run could reach into its parts.
The context is small and immutable (a NamedTuple: every run makes one, and its class costs the
start a tenth of a frozen dataclass's): the run's identity, its configuration (an MLflow run's params),
and `status`, a callable that returns a `RunStatus` snapshot at the moment a reader asks (a
Prometheus scrape): the run counts nothing extra for it between asks.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, Optional

if TYPE_CHECKING:
    from ..status import RunStatus

__all__ = ["SinkContext"]


class SinkContext(NamedTuple):
    """The run a sink is made for (a replay's: no attempt, status or config). `status()` may be
    called from any thread, at any time after the sink is made (before the child starts it says
    `not-started`). `config` is the run's
    `RunConfig` (None for a replay); show it with `config.convert.to_dict(config, mask_secrets=True)`,
    never as it is: it may hold secrets."""

    run_id: str
    run_dir: str
    attempt: int = 0
    status: Optional[Callable[[], "RunStatus"]] = None
    config: Optional[Any] = None
    identity: Mapping[str, int] = {}
    """Which node and process rank the run is (`identity.NodeIdentity.fields()`: `node`,
    `process_rank`, each only when known; empty on one machine): a sink's labels or body carry it."""
