"""trainvisor: wrap a training command, pass its output through, parse its metrics,
back up its checkpoints.

    from trainvisor import Run, RunConfig
    summary = Run(RunConfig(command=("python", "train.py"))).run()

    from trainvisor import replay, upload           # the other commands, as calls
    events = replay("train.log", parser="caffe").events
    report = upload(["snapshots/"], to="s3://bucket/prefix")
    plot("runs/exp1", "exp1.png")                   # needs matplotlib: the `plot` extra
    fetched = download("s3://bucket/prefix/RUN_ID", "ckpt/")   # the newest complete set

Names are imported on first use, so `import trainvisor` stays cheap: a supervised run must not
pay for the parsers, the uploaders or psutil before it needs them.
"""
from __future__ import annotations

__version__ = "0.1.0"

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

if TYPE_CHECKING:
    from .config import RunConfig
    from .errors import TrainvisorError
    from .events import CheckpointEvent, LineRecord, Metric
    from .events import LineBlock
    from .stream.lines import LineSplitter
    from .parsers import ParserInfo, ParserOptions, available_parsers, create_parser, get_parser_info, parser_infos
    from .parsers import register_parser
    from .stream.pipeline import Pipeline
    from .calls.logs import Replayed, parse_tables, replay
    from .calls.uploads import UploadReport, upload
    from .plotting import Plotted, plot
    from .calls.download import DownloadReport, download
    from .sinks.registry import available_sinks, register_sink
    from .run import Run, RunSummary
    from .run.live import RunResult, supervise
    from .supervisor import ProcessResult, Supervisor
    from .timeline import Callback, timeline_of

_EXPORTS = {
    "TrainvisorError": "errors",
    "CheckpointEvent": "events",
    "LineRecord": "events",
    "Metric": "events",
    "LineBlock": "events",
    "LineSplitter": "stream.lines",
    "ParserOptions": "parsers",
    "ParserInfo": "parsers",
    "parser_infos": "parsers",
    "get_parser_info": "parsers",
    "available_parsers": "parsers",
    "create_parser": "parsers",
    "register_parser": "parsers",
    "Pipeline": "stream.pipeline",
    "replay": "calls.logs",
    "Replayed": "calls.logs",
    "parse_tables": "calls.logs",
    "upload": "calls.uploads",
    "UploadReport": "calls.uploads",
    "plot": "plotting",
    "Plotted": "plotting",
    "download": "calls.download",
    "DownloadReport": "calls.download",
    "register_sink": "sinks.registry",
    "available_sinks": "sinks.registry",
    "Run": "run",
    "RunSummary": "run",
    "RunConfig": "config",
    "RunResult": "run.live",
    "supervise": "run.live",
    "ProcessResult": "supervisor",
    "Supervisor": "supervisor",
    "Callback": "timeline",
    "timeline_of": "timeline",
}

__all__ = ["__version__", *_EXPORTS]


__getattr__ = lazy_exports(__name__, globals(), _EXPORTS)


def __dir__() -> list[str]:
    return sorted(__all__)
