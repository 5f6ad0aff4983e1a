"""trainvisor's testing kit: the pytest plugin (plugin.py, registered as ``trainvisor`` through
the ``pytest11`` entry point), the records of a replayed log with series helpers (replaying.py),
golden metric files (golden.py), a supervised run in one call (supervised.py) and a fake training
for any saved log (faketrain/). Nothing here is imported by a run."""
