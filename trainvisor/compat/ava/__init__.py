"""The AVA SDK's module layout on trainvisor's parts: change `from ava...` to
`from trainvisor.compat.ava...` and the calls stay the same.

    from trainvisor.compat.ava.train import base as train     # TrainInstance
    from trainvisor.compat.ava.utils import cmd                # startproc, logproc, runproc
    from trainvisor.compat.ava.params import params            # get_value
    from trainvisor.compat.ava.log.logger import logger, initialize_logger
    from trainvisor.compat.ava.monitor import caffe, mxnet
    from trainvisor.compat.ava.utils.uploader import Uploader
    from trainvisor.compat.ava.utils.fetcher import Fetcher

(`from trainvisor.compat.ava import cmd, params` works too.) Every submodule is imported on its
own and loads neither the parsers nor an SDK: boto3 and qiniu load when a destination is opened.
The workspace root is `AVA_WORKSPACE` (default `/workspace`, the AVA platform's); README's
"Coming from the AVA SDK" lists where the behaviour differs from the original, and why.
"""
__all__ = ["cmd", "params", "train", "monitor", "log", "utils", "workspace"]
