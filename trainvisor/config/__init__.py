"""Configuration of a run: `RunConfig` and its sections, read from YAML, TOML, the environment
and the CLI's flags, checked where it is built, printed with secrets masked."""
from .schema import (
    DEFAULT_RUNS_ROOT,
    LoggingConfig,
    ParsingConfig,
    ProcessConfig,
    RunConfig,
    RunDirConfig,
    SinksConfig,
    UploadConfig,
    WatchConfig,
)

from .schema import __all__
