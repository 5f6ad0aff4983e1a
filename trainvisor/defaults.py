"""The default values of a run, in one place.

`RunConfig`'s schema (config/schema.py) takes its field defaults from here, and so do the keyword
defaults of the classes a Python caller may build without a RunConfig (`CheckpointWatcher`,
`CheckpointTracker`, `UploadManager`, `build_parser`, ...): a default changed here changes for the
command, the config files and the library alike. Constants only, importing nothing, so the lowest
modules may use it without an import circle or a cost at start-up.
"""
from __future__ import annotations

__all__ = [
    "GRACE", "EXIT_CHECKPOINT_WAIT",
    "PARSER", "RANKS", "MAX_LINE_BYTES", "KILL_TIMEOUT", "SETTLE", "PARTIAL_AFTER", "UPLOAD_POLICY",
    "UPLOAD_CONCURRENCY", "UPLOAD_RATE_LIMIT", "UPLOAD_RETRY_MAX_DELAY", "DRAIN_TIMEOUT", "RUNS_ROOT", "STOP_GRACE",
    "SINK_QUEUE", "SINK_CPU_SHARE", "SINK_CLOSE_TIMEOUT", "SINK_BACKLOG",
    "CALLBACK_QUEUE", "CALLBACK_CLOSE_TIMEOUT", "MAX_RESTARTS", "RESTART_BACKOFF",
]

PARSER = "auto"                 # parsing.parser: `auto` chooses the format from the first lines
RANKS = "0"                     # parsing.ranks: with rank prefixes, rank 0's metrics are reported
MAX_LINE_BYTES = 1 << 20        # parsing.max_line_bytes: longer lines are cut for parsing, passed whole
KILL_TIMEOUT = 30.0             # process.kill_timeout: seconds from SIGTERM to SIGKILL at shutdown
STOP_GRACE = 30.0               # process.stop_grace: seconds from a requested stop's SIGINT to SIGTERM
GRACE = 110.0                   # process.grace: seconds from the first SIGTERM to trainvisor's exit (a 120 s platform grace)
EXIT_CHECKPOINT_WAIT = 5.0      # process.exit_checkpoint_wait: seconds for a checkpoint written on the way out
SETTLE = 2.0                    # watch.settle: seconds a polled file must stay unchanged
PARTIAL_AFTER = 120.0           # seconds before a set still missing a file is handed over as it is
UPLOAD_POLICY = "all"           # watch.policy: every complete checkpoint is uploaded
UPLOAD_CONCURRENCY = 2          # upload.concurrency: checkpoint files uploaded at once
UPLOAD_RATE_LIMIT = "0"         # upload.rate_limit: bytes per second for all uploads together; 0: unlimited
UPLOAD_RETRY_MAX_DELAY = 30.0   # upload.retry_max_delay: the longest back-off between a destination's retries
DRAIN_TIMEOUT = 600.0           # upload.drain_timeout: seconds the run waits for uploads at exit
RUNS_ROOT = "trainvisor-runs"   # run.root: where run directories are made
SINK_QUEUE = 10000              # sinks.queue: records a threaded sink may hold unwritten
SINK_CPU_SHARE = 0.2           # sinks.cpu_share: of the interpreter, what the threaded sinks take together
SINK_CLOSE_TIMEOUT = 5.0        # sinks.close_timeout: seconds the threaded sinks get, together, at the end
SINK_BACKLOG = 0.5              # sinks.backlog: seconds of their own writing the threaded sinks may hold, together
SETTINGS_FILE_LIMIT = 1 << 20   # bytes a config or rules file may have: a larger one is an error, not minutes of YAML
CALLBACK_QUEUE = 10000          # callbacks.queue: batch_end events the callbacks may fall behind by
CALLBACK_CLOSE_TIMEOUT = 5.0    # callbacks.close_timeout: seconds the callbacks get at the end
MAX_RESTARTS = 3                # restart.max_restarts: a crashed training started again at most this often
RESTART_BACKOFF = 10.0          # restart.backoff: seconds before the first restart, doubled after each
