"""Running the training command: child process, pipe readers, signals, process tree."""
from .process import exit_code_of
from .supervisor import RunResult, Supervisor

__all__ = ["Supervisor", "RunResult", "exit_code_of"]
