"""A Caffe training script as the AVA SDK's documentation wrote them (start the training with
`startproc`, read its log with `logproc` and the monitor and epoch-end callbacks, `wait`,
`done`), run by tests/test_ava_example.py. Only the import lines differ from an AVA script:
`from ava...` became `from trainvisor.compat.ava...`. The job's parameters come from the
workspace's params/default.json, as on the AVA platform."""
import sys
import traceback

from trainvisor.compat.ava.train import base as train
from trainvisor.compat.ava.log.logger import logger
from trainvisor.compat.ava.params import params
from trainvisor.compat.ava.utils import cmd


def start_new_training():
    train_ins = None
    try:
        train_ins = train.TrainInstance()
        solver = params.get_value("solver", is_required=True)
        batch_of_epoch = params.get_value("train.batch_of_epoch", default=1000)
        training_cmd = params.get_value("train.command", is_required=True) + ["-solver", solver]

        monitor_cb = train_ins.get_monitor_callback("caffe")
        epoch_end_cb = train_ins.get_epoch_end_callback("caffe", batch_of_epoch=batch_of_epoch,
                                                        other_files=[solver])
        proc = cmd.startproc(training_cmd)
        logger.info("Started %s", proc)
        cmd.logproc(proc, [monitor_cb, epoch_end_cb])
        exit_code = proc.wait()
        logger.info("Finished proc with code %s", exit_code)
        if exit_code != 0:
            raise Exception("training exit code [%d] != 0" % (exit_code))
        train_ins.done()
    except Exception as err:
        err_msg = "training failed, err: %s" % (err)
        logger.info(err_msg)
        traceback.print_exc(file=sys.stderr)
        if train_ins is None:
            return 1
        train_ins.done(err_msg=err_msg)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(start_new_training())
