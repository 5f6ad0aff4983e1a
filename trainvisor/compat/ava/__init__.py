"""The AVA SDK's module layout on trainvisor's parts: change `from ava...` to
`from trainvisor.compat.ava...` and the calls stay the same.

    from trainvisor.compat.ava import cmd, params
    from trainvisor.compat.ava.train.base import TrainInstance
    from trainvisor.compat.ava.log.logger import initialize_logger
    from trainvisor.compat.ava.utils.uploader import Uploader
    from trainvisor.compat.ava.utils.fetcher import Fetcher

Every submodule is imported on its own: `from trainvisor.compat.ava import cmd` loads neither
the parsers nor the uploaders (boto3 and qiniu load when a destination is opened).
The workspace root is `AVA_WORKSPACE` (default `/workspace`, the AVA platform's); README's
"Coming from the AVA SDK" lists where the behaviour differs from the original, and why.
"""
__all__ = ["cmd", "params", "train", "monitor", "log", "utils"]
