"""The AVA SDK's monitors: `caffe` (line hooks for `cmd.logproc`) and `mxnet` (the callbacks
`Module.fit` calls), reporting through trainvisor's sinks (reporting.py) and uploading each
epoch's snapshot through its upload manager (snapshots.py)."""
__all__ = ["caffe", "mxnet"]
