"""What plugs into a run's metric stream besides its sinks: the stop rules (an inline sink that
calls `Run.request_stop` once) and the callbacks (their own thread, fed by the timeline of the
stream), and the timeline's two ends (train_begin, train_end). A mixin of `_Parts`: the fields
it uses (`run`, `sinks`, `stop_rules`, `callbacks`) are `_Parts`'s."""
from __future__ import annotations

import contextlib
import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..stoprules import Firing
    from ..supervisor.supervisor import ProcessResult

__all__ = ["_Plugins"]

log = logging.getLogger("trainvisor")


class _Plugins:
    """Stop rules and callbacks of a started run."""

    def _build_stop_rules(self) -> None:
        """The stop rules, last among the sinks (a metric is written before it stops the run)."""
        from .build import build_stop_rules

        run = self.run

        def fire(firing: "Firing") -> None:  # the pipeline thread; request_stop only records and wakes
            reason = firing.describe()
            log.warning("%s: stopping the training", reason)
            run.request_stop(reason)

        self.stop_rules = build_stop_rules(run.config.stop, fire)
        if self.stop_rules is not None:
            self.sinks.append(self.stop_rules)

    def _build_callbacks(self, stack: contextlib.ExitStack) -> None:
        """The callbacks `callbacks.use` names (imported, made, checked) and the caller's, on their own
        thread, fed by the timeline of the metric stream (an inline sink: it sees every record)."""
        run, cfg = self.run, self.run.config.callbacks
        if not (cfg.use or cfg.options or run._callbacks):
            return
        from ..errors import ConfigError
        from ..timeline.callbacks import load_callback
        from ..timeline.dispatch import Dispatcher
        from ..timeline.runner import CallbackThread, TimelineSink

        for spec in cfg.options:
            if spec not in cfg.use:
                raise ConfigError(f"callbacks.options.{spec}: no callback {spec!r} in callbacks.use "
                                  f"(--callback {spec})")
        registered = [load_callback(spec, cfg.options.get(spec, {})) for spec in cfg.use] + run._callbacks
        self.callbacks = CallbackThread(Dispatcher(registered, request_stop=run.request_stop), capacity=cfg.queue)
        stack.callback(self._close_timeline)  # also when the run fails before its end
        self.sinks.append(TimelineSink(self.callbacks.put))

    def begin_timeline(self) -> None:
        if self.callbacks is not None:
            from ..timeline.events import TrainBegin

            self.callbacks.put([TrainBegin(self.run.run_id, tuple(self.run.config.command), time.time())])
            self._timeline_begun = True

    def end_timeline(self, result: "ProcessResult") -> None:
        """train_end (after the pipeline's last events and the uploads' outcomes), then the callbacks
        get `callbacks.close_timeout` to finish."""
        if self.callbacks is None:
            return
        from ..timeline.events import TrainEnd

        stopped = result.stop_reason is not None
        reason = result.stop_reason if stopped else (
            f"killed by signal {-result.returncode}" if result.returncode < 0 else f"exit code {result.exit_code}")
        self.callbacks.put([TrainEnd(result.exit_code, reason, stopped, time.time())])
        self._timeline_ended = True
        self.callbacks.close(self.run.config.callbacks.close_timeout)

    def _close_timeline(self) -> None:
        """A run that raised after train_begin (the command could not be started) still ends its
        callbacks' timeline, with no exit code."""
        if self._timeline_begun and not self._timeline_ended:
            from ..timeline.events import TrainEnd

            self._timeline_ended = True
            self.callbacks.put([TrainEnd(None, "the run failed before the training ended", False, time.time())])
        self.callbacks.close(self.run.config.callbacks.close_timeout)
