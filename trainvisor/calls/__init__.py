"""The CLI's other commands as library calls: what `trainvisor replay`, `parse` and `upload` do,
callable from Python without click (the commands are flags -> these calls -> print).

logs.py: `replay` (a saved log's events) and `parse_tables` (Caffe's tables); uploads.py: `upload`
(files once, verified, resumable). `trainvisor.replay`, `trainvisor.parse_tables` and
`trainvisor.upload` are these. Nothing is exported here: a module and a call of the same name in
one namespace would hide each other.
"""
