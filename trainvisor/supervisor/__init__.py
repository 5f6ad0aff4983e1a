"""Running the training command: child process, pipe readers, signals, process tree."""
from .process import TREE_TOKEN_ENV, exit_code_of
from .signals import ON_SUPERVISOR_DEATH
from .supervisor import RunResult, Supervisor

__all__ = ["Supervisor", "RunResult", "exit_code_of", "ON_SUPERVISOR_DEATH", "TREE_TOKEN_ENV"]
