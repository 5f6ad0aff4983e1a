"""MLflow sink: the run's metrics, its configuration and how it ended, in an MLflow tracking store.

(Named `mlflow_sink` so that `import mlflow` inside it finds the library, not this module.)

- Through `MlflowClient` with an explicit run id, never MLflow's fluent API: that one keeps the
  active run in process-wide state, which a library must not touch (a training that uses
  MLflow itself would find trainvisor's run as its own).
- Importing mlflow costs most of a second, so it happens on the sink's own thread (`prepare`,
  run there as soon as the run builds its sinks, before the training's output arrives); making
  the sink checks only that the package is there and the URI is usable.
- Where: option `tracking_uri`, else the `MLFLOW_TRACKING_URI` environment variable, else the
  local store `file:RUN_DIR/mlruns`. MLflow (3.13 on) keeps its file store in maintenance mode
  and refuses it unless `MLFLOW_ALLOW_FILE_STORE=true`; the sink does not set that for you (it
  would leak into the training's environment): it says so in one line before the child starts.
  A password in the URI is masked wherever it is shown.
- Metrics: named and stepped by `sinks/scalars.py` (the TensorBoard sink's rule, but for where a
  rank goes: `metric_key`), sent with `log_batch` at most 1000 at a time (MLflow's limit) at
  each write, from the sink's thread. NaN and infinities are sent as they are: MLflow accepts
  both; its file store gives them back as they are, a database store keeps NaN and stores an
  infinity as the largest float of its sign (its `sanitize_metric_value`).
- Params: the run's configuration (`SinkContext.config`, secrets masked as `trainvisor config
  show` masks them; a password in any URL value masked here too) flattened to `section.key`, 100 per batch, values cut at 6000
  characters (MLflow's limits). Tags: the option `tags`, and `trainvisor.run_id`/`run_dir`.
- Restarts: a trainvisor run restarted on its run directory (attempt 2, 3...) continues the
  MLflow run of its earlier attempts (found by its `trainvisor.run_id` tag), RUNNING again;
  params it has are kept (MLflow never changes a logged param: a changed one is logged as a
  warning), new ones added.
- Status: the Run calls `set_outcome(exit_code, stopped)` before it closes its sinks: FINISHED
  for exit 0, KILLED for a training stopped on request or by a signal trainvisor forwarded,
  FAILED otherwise; FAILED too when trainvisor itself failed after the training started.
  Closed without an outcome (a replayed log), the run is FINISHED.
- Failures: a store that cannot be reached fails the writes, each counted by the run as its
  records failed and logged; creating the MLflow run is tried again at most every
  `retry_seconds` (HTTP requests are already retried by MLflow's own client). Nothing reaches
  the training.
"""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import time
from typing import Any, Callable, Mapping, Optional, Sequence

from ..errors import ConfigError
from ..events import Metric
from ..secrets import mask_url
from .context import SinkContext
from .scalars import DEFAULT_RANK_WAIT, DEFAULT_RANK_WAIT_SECONDS, ScalarNamer, scalar_tag

__all__ = ["MlflowSink", "tracking_uri_for", "flat_params", "run_status", "metric_key", "safe_key"]

log = logging.getLogger("trainvisor.sinks")

# MLflow's limits for one log_batch and for keys and values (mlflow.utils.validation)
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_PER_BATCH = 100
MAX_PARAM_VALUE = 6000
MAX_KEY = 250
_REFUSED = re.compile(r"[^-/\w. :]")  # what MLflow does not take in a key (mlflow.utils.validation)
DEFAULT_EXPERIMENT = "trainvisor"
DEFAULT_RETRY_SECONDS = 30.0
_TRUE = ("1", "true")


def tracking_uri_for(option: str, run_dir: str, environ: Mapping[str, str]) -> str:
    """Where the sink writes (see the module's docstring)."""
    if option:
        return option
    if environ.get("MLFLOW_TRACKING_URI"):
        return environ["MLFLOW_TRACKING_URI"]
    return "file:" + os.path.join(os.path.abspath(run_dir or "."), "mlruns")


def _is_file_store(uri: str) -> bool:
    """A `file:` URI or a path: what MLflow opens as its file store."""
    return uri.startswith(("file:", "/", "./", "../"))


def flat_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """`{"upload": {"to": "s3://b"}}` -> `{"upload.to": "s3://b"}`: strings as they are (a URL's
    password masked), anything else as JSON; an empty table kept as `{}`; keys made safe."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flat_params(value, name + "."))
            continue
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        out[safe_key(name)] = mask_url(text)[:MAX_PARAM_VALUE]
    return out


def _shown_config(config: Any) -> Mapping[str, Any]:
    """The run's configuration as plain data, secrets masked (as `trainvisor config show` prints it)."""
    if config is None:  # a replay: no run configuration
        return {}
    if isinstance(config, Mapping):  # shown already (the sink host's: sinks/host/main.py `ShownConfig`)
        return config
    from ..config.convert import to_dict

    return to_dict(config, mask_secrets=True)


def run_status(exit_code: int, stopped: bool) -> str:
    """MLflow's name for how a training ended."""
    if stopped:
        return "KILLED"
    return "FINISHED" if exit_code == 0 else "FAILED"


def metric_key(m: Metric, with_rank: bool) -> str:
    """The MLflow key of `m`: `scalar_tag`'s name, but a rank goes in front (`rank1/train/loss`,
    not `train/loss/rank1`): MLflow's file store keeps a key as a file path, and `train/loss`
    (the rank seen alone first) cannot be both a file and the folder of `train/loss/rank1`. The
    ranks get a section each in MLflow's UI."""
    tag = scalar_tag(m, False)
    if with_rank and m.rank is not None:
        tag = f"rank{m.rank}/{tag}"
    return safe_key(tag)


def safe_key(text: str) -> str:
    """`text` as a key MLflow takes (a metric's, a param's, a tag's): a character it refuses
    becomes `_`, an empty path part is dropped, a `.` or `..` one becomes `_` (its file store
    makes a path of a key), and the key is cut at 250 characters."""
    parts = ["_" if p in (".", "..") else p for p in _REFUSED.sub("_", text).split("/") if p]
    return "/".join(parts)[:MAX_KEY] or "_"


class MlflowSink:
    """One MLflow run per trainvisor run, its restarts included. Not thread-safe but for
    `set_outcome`: the registry runs it on a thread of its own."""

    name = "mlflow"

    def __init__(self, *, tracking_uri: str = "", experiment: str = "", run_name: str = "",
                 tags: Optional[Mapping[str, Any]] = None, context: Optional[SinkContext] = None,
                 rank_wait: int = DEFAULT_RANK_WAIT, rank_wait_seconds: float = DEFAULT_RANK_WAIT_SECONDS,
                 retry_seconds: float = DEFAULT_RETRY_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        if importlib.util.find_spec("mlflow") is None:
            raise ConfigError("sink 'mlflow' needs the mlflow-skinny package: pip install 'trainvisor[mlflow]'")
        env = os.environ  # MLflow's client reads it too: one environment for both
        ctx = context or SinkContext(run_id="", run_dir="")
        self.tracking_uri = tracking_uri_for(str(tracking_uri), ctx.run_dir, env)
        if _is_file_store(self.tracking_uri) and env.get("MLFLOW_ALLOW_FILE_STORE", "").lower() not in _TRUE:
            raise ConfigError(f"sink 'mlflow': MLflow writes its local store ({mask_url(self.tracking_uri)}) only "
                              "with MLFLOW_ALLOW_FILE_STORE=true in the environment (its file store is in "
                              "maintenance mode); set it, or name a tracking server (sinks.options.mlflow."
                              "tracking_uri or MLFLOW_TRACKING_URI)")
        self.experiment = str(experiment or env.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT)
        self.run_name = str(run_name or ctx.run_id)
        self.tags = {safe_key(str(k)): mask_url(str(v)) for k, v in (tags or {}).items()}
        if ctx.run_id:
            self.tags.update({"trainvisor.run_id": ctx.run_id, "trainvisor.run_dir": ctx.run_dir,
                              "trainvisor.attempt": str(ctx.attempt),
                              **{f"trainvisor.{k}": str(v) for k, v in (ctx.identity or {}).items()}})
        self.resumes = ctx.run_id if ctx.attempt > 1 else ""  # the trainvisor run whose MLflow run to continue
        self.identity = dict(ctx.identity or {})  # several nodes of one run: each continues its own MLflow run
        self.params = flat_params(_shown_config(ctx.config))
        self.retry_seconds = float(retry_seconds)
        self.mlflow_run_id: Optional[str] = None  # known once the run is created, on the sink's thread
        self.status: Optional[str] = None  # set by set_outcome (any thread); read at close
        self._clock = clock
        self._scalars = ScalarNamer(self._add, rank_wait=rank_wait, rank_wait_seconds=rank_wait_seconds,
                                    clock=clock, tag=metric_key)
        self._batch: list = []  # (key, value, timestamp ms, step) not yet sent
        self._client: Any = None
        self._failed: Optional[BaseException] = None  # why the run could not be created
        self._retry_at = 0.0
        self._closed = False

    def set_outcome(self, exit_code: int, stopped: bool = False) -> None:
        """How the training ended, from the Run before it closes its sinks (see `run_status`)."""
        self.status = run_status(int(exit_code), bool(stopped))

    def prepare(self) -> None:
        """The import, on the sink's thread before any record (see `ThreadedSink`)."""
        import mlflow.entities  # noqa: F401
        import mlflow.tracking  # noqa: F401

    def write(self, events: Sequence[object]) -> None:
        for m in events:
            if type(m) is Metric:
                self._scalars.add(m)
        self._send()

    def flush(self) -> None:
        self._scalars.tick()
        self._send()

    def close(self) -> None:
        """Send what is held, then end the MLflow run with its status. Created now if no metric
        came but the outcome did (a training that printed none still has its run, params and
        status); with neither (a run that failed its checks before the training), none is made."""
        if self._closed:
            return
        self._closed = True
        self._scalars.release()
        self._retry_at = 0.0  # the last chance to reach the store: no waiting for the retry time
        try:
            self._send()
        finally:
            if self.mlflow_run_id is not None or self.status is not None:
                run_id = self._ensure_run()
                self._client.set_terminated(run_id, self.status or "FINISHED")

    # -- on the sink's thread ---------------------------------------------------------------
    def _add(self, tag: str, step: int, m: Metric) -> None:
        stamp = int((m.wall_time if m.wall_time > 0 else time.time()) * 1000)
        self._batch.append((tag, float(m.value), stamp, step))

    def _send(self) -> None:
        if not self._batch:
            return
        batch, self._batch = self._batch, []  # a failed batch is counted as failed, not sent twice
        run_id = self._ensure_run()
        from mlflow.entities import Metric as MlflowMetric

        for i in range(0, len(batch), MAX_METRICS_PER_BATCH):
            chunk = [MlflowMetric(*record) for record in batch[i:i + MAX_METRICS_PER_BATCH]]
            self._client.log_batch(run_id, metrics=chunk, synchronous=True)

    def _ensure_run(self) -> str:
        """The MLflow run, created at the first need; after a failure, tried again no sooner
        than `retry_seconds` later (until then each write fails at once, counted)."""
        if self.mlflow_run_id is not None:
            return self.mlflow_run_id
        if self._failed is not None and self._clock() < self._retry_at:
            raise RuntimeError(f"no MLflow run at {mask_url(self.tracking_uri)} (retried after "
                               f"{self.retry_seconds:g}s): {type(self._failed).__name__}: {self._failed}")
        try:
            return self._create_run()
        except Exception as exc:
            self._failed, self._retry_at = exc, self._clock() + self.retry_seconds
            raise

    def _create_run(self) -> str:
        from mlflow.entities import Param, RunTag
        from mlflow.tracking import MlflowClient

        self._client = client = MlflowClient(tracking_uri=self.tracking_uri)
        found = client.get_experiment_by_name(self.experiment)
        experiment_id = found.experiment_id if found is not None else self._create_experiment()
        earlier = self._earlier_run(experiment_id)
        if earlier is None:
            run_id, logged = client.create_run(experiment_id, run_name=self.run_name or None,
                                               tags=self.tags).info.run_id, {}
        else:  # a restart on the same run directory: the same MLflow run, running again
            run_id, logged = earlier.info.run_id, earlier.data.params
            client.update_run(run_id, status="RUNNING")
            client.log_batch(run_id, tags=[RunTag(k, v) for k, v in self.tags.items()], synchronous=True)
        self.mlflow_run_id = run_id
        log.info("mlflow sink: run %s in experiment %r at %s%s", run_id, self.experiment, mask_url(self.tracking_uri),
                 " (continued)" if earlier is not None else "")
        changed = sorted(k for k, v in self.params.items() if logged.get(k, v) != v)
        if changed:  # MLflow never changes a logged param: the first attempt's value stays
            log.warning("mlflow sink: params changed since the run's first attempt, kept as they were: %s",
                        ", ".join(changed))
        params = [Param(k, v) for k, v in self.params.items() if k not in logged]
        for i in range(0, len(params), MAX_PARAMS_PER_BATCH):
            client.log_batch(run_id, params=params[i:i + MAX_PARAMS_PER_BATCH], synchronous=True)
        return run_id

    def _earlier_run(self, experiment_id: str) -> Any:
        """The MLflow run an earlier attempt of this trainvisor run made, if any (newest first)."""
        if not self.resumes or "'" in self.resumes:  # an id a filter string cannot quote: a new run
            return None
        query = f"tags.`trainvisor.run_id` = '{self.resumes}'" + "".join(
            f" and tags.`trainvisor.{k}` = '{v}'" for k, v in sorted(self.identity.items()))
        found = self._client.search_runs([experiment_id], query, max_results=1,
                                         order_by=["attributes.start_time DESC"])
        return found[0] if found else None

    def _create_experiment(self) -> str:
        from mlflow.exceptions import MlflowException

        try:
            return self._client.create_experiment(self.experiment)
        except MlflowException:  # another process created it since we looked
            found = self._client.get_experiment_by_name(self.experiment)
            if found is None:
                raise
            return found.experiment_id
