"""Configuration of a run: `RunConfig` and its sections, read from YAML, TOML, the environment
and the CLI's flags, checked where it is built, printed with secrets masked."""
from .schema import (  # noqa: F401  (the public names; __all__ is the schema's)
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_RUNS_ROOT,
    LoggingConfig,
    ParsingConfig,
    ProcessConfig,
    RunConfig,
    RunDirConfig,
    CallbacksConfig,
    RestartConfig,
    SinksConfig,
    StopConfig,
    UploadConfig,
    HealthConfig,
    WatchConfig,
    __all__,
)
