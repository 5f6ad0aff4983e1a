"""`python -m trainvisor.sinks.host`: the sink host's process (main.py)."""
import sys

from .main import main

sys.exit(main())
