"""A fake training for any saved log: `trainvisor fake-training LOG` (and the pytest plugin's
`fake_training` fixture) replays the log as the program that wrote it did, writes the checkpoint
files it announces and meets SIGINT/SIGTERM as that framework does. For demos, tests, and trying
trainvisor without a GPU.

profiles.py: per framework, the stream and the signal behaviour; plan.py: the log's lines and
announced saves (from trainvisor's own parser); writers.py: checkpoint files; child.py: the loop."""
from __future__ import annotations

from .child import FakeOptions, run_fake
from .profiles import PROFILES, Profile, profile_for

__all__ = ["FakeOptions", "run_fake", "Profile", "PROFILES", "profile_for"]
