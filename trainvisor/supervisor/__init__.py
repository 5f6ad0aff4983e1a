"""Running the training command: child process, pipe readers, signals, process tree. A source
of bytes and a process manager: it parses nothing (see `trainvisor.stream`)."""
from .process import TREE_TOKEN_ENV, exit_code_of
from .signals import ON_SUPERVISOR_DEATH
from .supervisor import ProcessResult, Supervisor

__all__ = ["Supervisor", "ProcessResult", "exit_code_of", "ON_SUPERVISOR_DEATH", "TREE_TOKEN_ENV"]
