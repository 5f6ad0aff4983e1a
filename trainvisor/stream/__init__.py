"""The stream engine: bytes from any source -> lines -> rank router -> parser -> sinks.

One drive loop (`engine.StreamEngine`) takes the items of any source (`source.Chunk`, `Gap`,
`Eof`): a child process's pipes (the Supervisor's readers put them on a `source.Channel`), a
saved log (`replay`), or a followed file. What it feeds is a `pipeline.Pipeline`, which the
owner (a `Run`, a replay) builds once: it outlives one source, so a restarted child writes
into the same sinks.
"""
