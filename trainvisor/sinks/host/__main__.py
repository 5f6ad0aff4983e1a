"""`python -m trainvisor.sinks.host`: the sink host's process (main.py).

It ends without the interpreter's teardown, as the `trainvisor` command does (cli.console_main):
by then every sink is closed (written, flushed) and the counts are sent, while freeing the
thousand modules mlflow and tensorboardX load took a third of a second that the run, waiting
for the host's stdout to end, spent doing nothing at the end of every run with a hosted sink."""
import os
import sys

from .main import main

code = main()
for stream in (sys.stdout, sys.stderr):
    try:
        stream.flush()
    except (OSError, ValueError):  # the run is gone: nothing left to say to it
        pass
os._exit(code)
