"""A run as a library object: `Run(RunConfig(...)).run() -> RunSummary`."""
from .run import Run, new_run_id
from .summary import FaultCount, RunSummary, UploadTotals

__all__ = ["Run", "RunSummary", "FaultCount", "UploadTotals", "new_run_id"]
