"""`RunConfig`: everything a run is, as one frozen, typed, nested value.

The defaults here are the only defaults: the CLI's flags, `Run(...)` and the config files all
start from them. Their values are constants of `trainvisor.defaults`, which the classes a Python
caller builds directly (watcher, tracker, upload manager, parser selection) take as keyword
defaults too, so both agree. Each section is a frozen dataclass; a new feature (a sink, a stop
rule, a daemon mode) adds a field or a section here and an entry where the run is built, not another
wiring change in the CLI.

Every optional value defaults to None, so a file that leaves a key out means the same as one
that writes it (TOML has no null).
"""
# No `from __future__ import annotations` here: evaluated once when the classes are made, the
# annotations are real types, which dataclasses reads without string matching and
# `typing.get_type_hints` (every section is checked when built) returns without an eval:
# ~1 ms less of every start (bench/startup.py).
from dataclasses import field, fields, replace
from types import MappingProxyType
from typing import Any, ClassVar, Mapping, Optional, Union

from .._frozen import frozen
from .. import defaults  # the values; these fields are where they are documented and checked
from .convert import Section, from_dict, to_dict
from .files import load_file, load_layers
from .settings import (at_least, best_by_metric, byte_rate, destination_list, finite_non_negative, globs,
                       non_negative, one_of, positive, rank_selection, resume_template, setting, share, stop_rules,
                       upload_policy)

__all__ = [
    "RunConfig",
    "ProcessConfig",
    "ParsingConfig",
    "SinksConfig",
    "WatchConfig",
    "UploadConfig",
    "HealthConfig",
    "LoggingConfig",
    "RunDirConfig",
    "StopConfig",
    "CallbacksConfig",
    "RestartConfig",
    "DEFAULT_RUNS_ROOT",
    "DEFAULT_MAX_LINE_BYTES",
]

DEFAULT_RUNS_ROOT = defaults.RUNS_ROOT
DEFAULT_RANKS = defaults.RANKS
DEFAULT_MAX_LINE_BYTES = defaults.MAX_LINE_BYTES
_EMPTY: Mapping[str, str] = MappingProxyType({})


@frozen
class ProcessConfig(Section):
    """How the training command is started and stopped."""

    section_key: ClassVar[str] = "process"

    shell: bool = setting(False, help="Run the command through /bin/sh -c.")
    pty: bool = setting(False, help="Run the child on a pseudo-terminal, so it prints live progress bars as for a "
                                    "person; both streams arrive as stdout, bytes unchanged.")
    cwd: Optional[str] = setting(None, help="The child's working directory (default: the current one).")
    env: Mapping[str, str] = setting(_EMPTY, help="Extra environment variables for the child.")
    kill_timeout: float = setting(defaults.KILL_TIMEOUT, check=finite_non_negative,
                                  help="Seconds between SIGTERM and SIGKILL of the whole process tree at shutdown.")
    stop_grace: float = setting(defaults.STOP_GRACE, check=finite_non_negative,
                                help="When trainvisor stops the training (Run.request_stop, a stop rule): seconds "
                                     "between SIGINT (Caffe snapshots, Python raises KeyboardInterrupt) and SIGTERM.")
    output_log: Optional[str] = setting(None, help="Also write the child's output, both streams as received, here; "
                                                         "appended to (a restart or a resumed run adds to it, never truncates).")
    on_supervisor_death: str = setting("term", check=one_of("term", "keep"),
                                       help="If trainvisor is killed: 'term' sends the child SIGTERM, 'keep' leaves it.")
    grace: float = setting(defaults.GRACE, check=finite_non_negative,
                           help="From the first SIGTERM (or SIGINT, SIGHUP) trainvisor gets: seconds for the whole "
                                "shutdown (the child's exit, its exit checkpoint, the sinks, the uploads) before it "
                                "exits with the child's status; what did not fit is listed. Below the platform's "
                                "grace (terminationGracePeriodSeconds).")
    term_signal: str = setting("SIGTERM", check=one_of("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"),
                               help="What a SIGTERM trainvisor gets is forwarded to the training as (SIGINT for Caffe, "
                                    "which snapshots on it).")
    exit_checkpoint_wait: float = setting(defaults.EXIT_CHECKPOINT_WAIT, check=finite_non_negative,
                                          help="In a shutdown, after the child exits: seconds to wait for the files "
                                               "of a checkpoint written on the way out to stop changing.")


@frozen
class ParsingConfig(Section):
    """Which parser reads the output, and how."""

    section_key: ClassVar[str] = "parsing"

    parser: str = setting(defaults.PARSER, help="Log format parser (see `trainvisor parsers`); auto chooses.")
    rules: Optional[str] = setting(None, help="YAML or TOML file of regex rules that add to or replace the parser.")
    year: Optional[int] = setting(None, check=at_least(1970, 9999),
                                  help="Year of the log's first timestamp (glog lines carry none); default: now.")
    iters_per_epoch: Optional[int] = setting(None, check=positive,
                                             help="Iterations per epoch, for formats that only count iterations.")
    max_line_bytes: int = setting(DEFAULT_MAX_LINE_BYTES, check=positive,
                                  help="Longer lines are cut (and flagged) for parsing; bytes pass through whole.")
    ranks: str = setting(DEFAULT_RANKS, check=rank_selection,
                         help="With a launcher's rank prefixes ([default0]:, [1,0]<stdout>:, srun's 0: ), whose "
                              "metrics are reported: a rank (0), ranks (0,3) or all; each record says its rank.")


@frozen
class SinksConfig(Section):
    """Where parsed events go: the run's JSONL file, and the registered sinks named in `use`
    (`--sink NAME`), each made with its `options` table; a sink that is not cheap runs on its
    own thread behind a queue of `queue` records."""

    section_key: ClassVar[str] = "sinks"

    jsonl: Optional[str] = setting(None, help="JSONL metrics file (default: RUN_DIR/metrics.jsonl).")
    use: tuple[str, ...] = setting((), help="More sinks, by registered name: built-in (jsonl, caffe-csv, csv, stats, "
                                            "prometheus, tensorboard, webhook, mlflow) or an installed package's (entry point group "
                                            "trainvisor.sinks).")
    options: Mapping[str, Mapping[str, Any]] = setting(
        _EMPTY, help="Keyword arguments of each sink in `use`, by its name (e.g. jsonl: {path: copy.jsonl}).")
    queue: int = setting(defaults.SINK_QUEUE, check=positive, help="Records a threaded sink may hold unwritten; when full, a new "
                                                     "batch is dropped and counted: parsing never waits for a sink.")
    cpu_share: float = setting(defaults.SINK_CPU_SHARE, check=share,
                               help="Of Python's one interpreter, the share the threaded sinks take together "
                                    "while the training runs (each an equal part: it pauses after each batch in "
                                    "proportion); in the sink host, the share of one core the host takes. What "
                                    "they cannot take in it is dropped, counted: parsing keeps its pace. "
                                    "1 = no limit.")
    backlog: float = setting(defaults.SINK_BACKLOG, check=finite_non_negative,
                             help="Seconds of their own writing (CPU, measured per record as they go) the threaded "
                                  "sinks may hold unwritten, together (each an equal part), besides `queue`: so "
                                  "the end of a run waits about this long for what they hold, however slow a "
                                  "sink's records are (MLflow's file store: ~60 us each). 0 = `queue` alone.")
    close_timeout: float = setting(defaults.SINK_CLOSE_TIMEOUT, check=finite_non_negative,
                                   help="At the end, seconds the run waits for threaded sinks to write what they "
                                        "hold; a sink still busy then is abandoned (its records counted as dropped).")
    host: str = setting("auto", check=one_of("auto", "on", "off"),
                        help="Run the sinks that only report (tensorboard, mlflow, webhook, csv, caffe-csv) in a "
                             "process of their own fed from the metrics file: auto (when one is named and the C "
                             "formatter is built), on, off (in the run's process).")

    def with_sink(self, name: str, options: Mapping[str, Any]) -> "SinksConfig":
        """This section with sink `name` in `use` (added once) and `options` set over its own."""
        use = self.use if name in self.use else self.use + (name,)
        merged = {**self.options.get(name, {}), **options}
        return replace(self, use=use, options={**self.options, name: merged})


@frozen
class WatchConfig(Section):
    """Which directories are watched for checkpoints, and when a file counts as complete."""

    section_key: ClassVar[str] = "watch"

    dirs: tuple[str, ...] = setting((), help="Directories to watch (recursively; may not exist yet).")
    poll: bool = setting(False, help="Poll instead of inotify: a file is complete when unchanged for `settle` s.")
    settle: float = setting(defaults.SETTLE, check=non_negative, help="Seconds a polled file must stay unchanged.")
    checkpoint_patterns: tuple[str, ...] = setting((), help="More checkpoint file names: GLOB or re:REGEX.")
    policy: str = setting(defaults.UPLOAD_POLICY, check=upload_policy,
                          help="Which checkpoints to upload: all, epoch-end, every-N, last.")
    solver_watch: bool = setting(True, help="With `caffe train -solver FILE`, watch its snapshot_prefix directory.")
    announced: bool = setting(True, help="Watch the directories the training's log announces checkpoints in "
                                         "(Keras, Trainer, Lightning, detectron2, mmdet, Caffe, ...).")
    defaults: bool = setting(True, help="With upload.to and no watched directory, watch the frameworks' default "
                                        "checkpoint locations (lightning_logs, checkpoints, --output_dir, the working "
                                        "directory's own files); needs `announced`.")
    follow: tuple[str, ...] = setting((), check=globs,
                                      help="Metric files the training writes beside its log, followed as sources "
                                           "(GLOB, relative to the working directory): JSON lines, CSV with a "
                                           "header, trainer_state.json; each record's stream is file:PATH.")


@frozen
class UploadConfig(Section):
    """Where complete checkpoints are copied, and how long the run waits for that at exit."""

    section_key: ClassVar[str] = "upload"

    to: Union[str, tuple[str, ...], None] = setting(
        None, check=destination_list, shows_value=True,
        help="file:///path, s3://bucket/prefix or kodo://bucket/prefix; a list (or --upload-to repeated) uploads to "
             "each: its own journal, retries, verification and retention, a destination that is down holding back "
             "no other.")
    drain_timeout: float = setting(defaults.DRAIN_TIMEOUT, check=finite_non_negative,
                                   help="At exit, wait this long for pending uploads; what is left is listed.")
    delete_after_upload: bool = setting(False, help="Delete local checkpoint files once verified (never before; with "
                                                    "keep_last/keep_best, once a newer set is verified too).")
    concurrency: int = setting(defaults.UPLOAD_CONCURRENCY, check=at_least(1, 64),
                               help="Checkpoint files uploaded at once.")
    rate_limit: str = setting(defaults.UPLOAD_RATE_LIMIT, check=byte_rate,
                              help="Bytes per second for all uploads together (50MB/s, 800KiB/s; MB = 10^6 bytes, "
                                   "MiB = 2^20), shared by every worker and destination; 0: unlimited.")
    retry_max_delay: float = setting(defaults.UPLOAD_RETRY_MAX_DELAY, check=positive,
                                     help="The longest wait between retries of an upload a destination refused "
                                          "(back-off doubles up to it, jittered): how soon a store that was down "
                                          "is tried again once it is back.")
    credentials: Optional[str] = setting(
        None, help="A file of KEY=value lines (QINIU_ACCESS_KEY, AWS_SECRET_ACCESS_KEY, ...) read for the "
                   "destination; its keys win over the environment. Only the path is kept in the config.")
    keep_last: Optional[int] = setting(None, check=at_least(1),
                                       help="Retention: keep the N newest verified checkpoint sets in the store, "
                                            "delete older ones (only sets whose manifests this run wrote).")
    keep_best: Optional[int] = setting(None, check=at_least(1),
                                       help="Retention: keep the K sets best by upload.best_by too (with keep_last: "
                                            "a set either keeps stays). The newest verified set always stays.")
    best_by: Optional[str] = setting(None, check=best_by_metric,
                                     help="The metric that ranks sets for keep_best: 'METRIC max|min' (e.g. "
                                          "'val/accuracy max'; no phase: val or test), its value at the set's step.")

    @property
    def destinations(self) -> tuple[str, ...]:
        """Every destination `to` names, in order: one string is one destination, as it always was."""
        if not self.to:
            return ()
        return (self.to,) if isinstance(self.to, str) else tuple(self.to)


@frozen
class HealthConfig(Section):
    """`GET /healthz` for a container's probes (run/health.py): off unless a port is given."""

    section_key: ClassVar[str] = "health"

    port: Optional[int] = setting(None, check=at_least(0, 65535),
                                  help="Serve /healthz on this port (0: any free one, logged); off when not given.")
    host: str = setting("127.0.0.1", help="The address /healthz listens on (0.0.0.0 for a kubelet's httpGet probe).")
    max_metric_age: Optional[float] = setting(None, check=positive,
                                              help="Answer 503 when no metric came for this many seconds (before "
                                                   "the first: since the start); not checked when not given.")


@frozen
class LoggingConfig(Section):
    """trainvisor's own messages and the end-of-run summary."""

    section_key: ClassVar[str] = "logging"

    quiet: bool = setting(False, help="No trainvisor warnings on stderr (they still go to the run log).")
    summary: Optional[bool] = setting(None, help="Print a summary at the end (default: when stderr is a terminal).")


@frozen
class RunDirConfig(Section):
    """The run's identity and directory."""

    section_key: ClassVar[str] = "run"

    id: Optional[str] = setting(None, help="Run id (default: time + random suffix).")
    dir: Optional[str] = setting(None, help="Run directory (default: ROOT/RUN_ID).")
    root: str = setting(DEFAULT_RUNS_ROOT, help="Where run directories are made when `dir` is not given.")
    node: Optional[int] = setting(None, check=at_least(0),
                                  help="This machine's index in a multi-node run (default: NODE_RANK, GROUP_RANK, "
                                       "SLURM_NODEID, JOB_COMPLETION_INDEX, or a pod's RANK): its checkpoints go to "
                                       "RUN/node-N/ in the store, its records and labels say `node`.")
    process_rank: Optional[int] = setting(None, check=at_least(0),
                                          help="This trainvisor process's world rank when one is started per rank "
                                               "(default: RANK, SLURM_PROCID); records and labels say `process_rank`.")
    local_rank: Optional[int] = setting(None, check=at_least(0),
                                        help="This process's rank on its node (default: LOCAL_RANK, SLURM_LOCALID); "
                                             "only local rank 0 uploads checkpoints, so a node uploads each set once.")


@frozen
class StopConfig(Section):
    """When trainvisor stops the training itself: stop rules (`loss is nan`, `val/accuracy no
    improvement in 5 evals`, `no metric for 30 min`; the README has the grammar), checked when
    the configuration is loaded, evaluated on the metrics as they are parsed."""

    section_key: ClassVar[str] = "stop"

    when: tuple[str, ...] = setting((), check=stop_rules, shows_value=True,
                                    help="Stop rules: when one holds, the training gets SIGINT (then SIGTERM after "
                                         "process.stop_grace) and the run exits 4, naming the rule, line and value.")


@frozen
class CallbacksConfig(Section):
    """Callbacks of the training's timeline (train_begin, batch_end, epoch_end, test_end,
    checkpoint, train_end), on their own thread: `use` names them as module:Class, each made
    with its `options` table."""

    section_key: ClassVar[str] = "callbacks"

    use: tuple[str, ...] = setting((), help="Callbacks as module:Class (a class, factory or object with "
                                            "on_<event> methods), checked before the training starts.")
    options: Mapping[str, Mapping[str, Any]] = setting(
        _EMPTY, help="Keyword arguments of each callback in `use`, by its module:Class spec.")
    queue: int = setting(defaults.CALLBACK_QUEUE, check=positive,
                         help="batch_end events the callbacks may fall behind by; more are dropped and counted "
                              "(no other event is dropped).")
    close_timeout: float = setting(defaults.CALLBACK_CLOSE_TIMEOUT, check=finite_non_negative,
                                   help="At the end, seconds the run waits for the callbacks; a callback still "
                                        "busy then is abandoned.")


@frozen
class RestartConfig(Section):
    """A training that crashed started again into the same run (never one stopped by a rule, a
    caller or a signal), after a back-off, resumed from the newest complete checkpoint: the local
    copy when it still matches its manifest, else the one in the store, verified first."""

    section_key: ClassVar[str] = "restart"

    policy: str = setting("never", check=one_of("never", "on-failure"),
                          help="on-failure: start the training again when it exits non-zero or dies of a signal "
                               "nobody sent it.")
    max_restarts: int = setting(defaults.MAX_RESTARTS, check=at_least(0, 1000),
                                help="Restarts at most; the run ends with the last attempt's exit code after them.")
    backoff: float = setting(defaults.RESTART_BACKOFF, check=finite_non_negative,
                             help="Seconds before the first restart, doubled for each next one (at most 10 minutes).")
    resume_arg: Optional[str] = setting(
        None, check=resume_template, help="Arguments appended to the command to resume, {latest} the newest complete checkpoint's file, "
                   "{latest.EXT} its file ending in .EXT, {latest_dir} its folder (e.g. '-snapshot "
                   "{latest.solverstate}'). Left out when there is no checkpoint yet.")
    resume_from: Optional[str] = setting(
        None, help="A store (file://, s3://, kodo://, down to one run's folder) whose newest complete checkpoint set "
                   "the first attempt resumes from (a fresh machine), downloaded and verified into the run directory.")


@frozen
class RunConfig(Section):
    """One run. `RunConfig()` has today's CLI defaults; `RunConfig.from_file(path)` reads YAML or
    TOML; `RunConfig.from_dict(d)` takes the same shape as a dict. Values are checked where the
    config is built (`ConfigError` naming the key and, for files, the file and line)."""

    command: tuple[str, ...] = setting((), help="The training command, as an argv list.")
    process: ProcessConfig = field(default_factory=ProcessConfig)
    parsing: ParsingConfig = field(default_factory=ParsingConfig)
    sinks: SinksConfig = field(default_factory=SinksConfig)
    watch: WatchConfig = field(default_factory=WatchConfig)
    upload: UploadConfig = field(default_factory=UploadConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    run: RunDirConfig = field(default_factory=RunDirConfig)
    stop: StopConfig = field(default_factory=StopConfig)
    callbacks: CallbacksConfig = field(default_factory=CallbacksConfig)
    restart: RestartConfig = field(default_factory=RestartConfig)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: Optional[str] = None) -> "RunConfig":
        return from_dict(cls, data, source=source)

    @classmethod
    def from_file(cls, path: str) -> "RunConfig":
        return load_file(cls, path)

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> "RunConfig":
        """`TRAINVISOR_CONFIG` names a file; `TRAINVISOR__SECTION__KEY=value` sets one value."""
        return load_layers(cls, environ=environ)

    def to_dict(self, *, mask_secrets: bool = True) -> dict[str, Any]:
        return to_dict(self, mask_secrets=mask_secrets)

    def with_command(self, command: "tuple[str, ...] | list[str]") -> "RunConfig":
        return replace(self, command=tuple(command))

    def with_sinks(self, sinks: SinksConfig) -> "RunConfig":
        return replace(self, sinks=sinks)


SECTIONS = tuple(f.name for f in fields(RunConfig) if f.name != "command")
