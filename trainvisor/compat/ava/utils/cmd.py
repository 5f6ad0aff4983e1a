"""`from ava.utils import cmd`: the AVA SDK's path to `startproc`, `logproc`, `runproc`."""
from ..cmd import logproc, runproc, startproc

__all__ = ["startproc", "logproc", "runproc"]
