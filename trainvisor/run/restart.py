"""The restart policy: a crashed training is started again into the same run, resumed from the
newest complete checkpoint (run/resumepoint.py), after a back-off.

What counts as a crash: a non-zero exit or a death by a signal nobody sent. A training stopped on
purpose (`Run.request_stop`: a stop rule, a caller, a shutdown) or by a signal trainvisor forwarded
(a Ctrl-C, a SIGTERM from the platform) is never restarted: `ProcessResult.stop_reason` and
`signalled_by` say so. The back-off sleeps on the Run's stop event by default, so a stop asked for
while waiting ends the run at once; tests pass their own `sleep` and need no time to pass.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Optional

from ..errors import ConfigError
from .resumepoint import check_template, find_resume_point, resume_args

if TYPE_CHECKING:
    from ..supervisor.supervisor import ProcessResult
    from .run import Run
    from .summary import RunSummary

__all__ = ["crash_of", "backoff_delay", "run_restarting", "MAX_BACKOFF"]

log = logging.getLogger("trainvisor")

MAX_BACKOFF = 600.0  # a back-off doubles up to ten minutes: later restarts are not put off for hours


def crash_of(result: "ProcessResult") -> Optional[str]:
    """Why the child's end calls for a restart ("exit code 1", "killed by signal 9"), or None:
    it succeeded, or it was stopped on purpose."""
    if result.stop_reason is not None or result.signalled_by is not None or result.returncode == 0:
        return None
    return f"killed by signal {-result.returncode}" if result.returncode < 0 else f"exit code {result.returncode}"


def backoff_delay(base: float, restart: int) -> float:
    """Seconds before restart number `restart` (1-based): base, 2*base, 4*base ... at most MAX_BACKOFF."""
    return min(MAX_BACKOFF, base * 2 ** max(0, restart - 1))


def run_restarting(run: "Run", *, sleep: Optional[Callable[[float], object]] = None) -> "RunSummary":
    """`run.run()` under the restart policy: attempts until one does not crash, the restarts run
    out, or a stop is asked for; then `finish()`, the summary listing each restart and why."""
    cfg = run.config.restart
    if cfg.resume_arg:
        check_template(cfg.resume_arg)
    if cfg.resume_from:  # a URL no store takes fails before the training starts, in one line
        from ..uploaders.destinations import parse_destination

        if not cfg.resume_arg:
            raise ConfigError("restart.resume_from needs restart.resume_arg (--resume-arg TEMPLATE): how the "
                              "command is told the checkpoint, e.g. '-snapshot {latest.solverstate}'")

        parse_destination(cfg.resume_from, setting="restart.resume_from")
    wait = sleep if sleep is not None else run.wait_for_stop
    restarts: list[str] = []
    command = _resume_command(run, (cfg.resume_from,)) if cfg.resume_from else None
    result = run.run_attempt(command=command)
    while True:
        why = crash_of(result)
        if why is None or cfg.policy != "on-failure":
            break
        if len(restarts) >= cfg.max_restarts:
            log.warning("the training crashed (%s) after %d restart(s): restart.max_restarts %d reached, not "
                        "restarted", why, len(restarts), cfg.max_restarts)
            break
        delay = backoff_delay(cfg.backoff, len(restarts) + 1)
        log.warning("the training crashed (%s) in attempt %d: restarting in %gs (restart %d of at most %d)",
                    why, run.attempt, delay, len(restarts) + 1, cfg.max_restarts)
        wait(delay)
        if run.stop_requested:
            log.info("a stop was asked for during the back-off: not restarted")
            break
        crashed = run.attempt
        # Its own uploads first (newer), then the store it was seeded from (nothing uploaded yet).
        command = _resume_command(run, tuple(u for u in (run.own_store(), cfg.resume_from) if u))
        resumed = " ".join(command[len(run.config.command):]) if command else ""
        restarts.append(f"attempt {crashed} {why}; restarted" + (f" with {resumed}" if resumed else " from the start"))
        result = run.run_attempt(command=command)
    return run.finish(restarts=tuple(restarts))


def _resume_command(run: "Run", stores: tuple[str, ...]) -> Optional[tuple[str, ...]]:
    """The command with the resume arguments for the newest complete checkpoint, or None (the
    command as configured: no template, or nothing to resume from). Every decision is logged."""
    cfg = run.config
    if not cfg.restart.resume_arg:
        return None
    run.settle_checkpoints(uploads=False)  # the sets the crashed child completed are recorded first
    decision = find_resume_point(run.run_dir, stores=stores, credentials=cfg.upload.credentials,
                                 before_store=lambda: run.settle_checkpoints(uploads=True), node=run.identity.node)
    for line in decision.said:
        log.warning("%s", line)
    if decision.point is None:
        return None
    try:
        words = resume_args(cfg.restart.resume_arg, decision.point)
    except ConfigError as exc:
        log.error("%s: restarted without it", exc)
        return None
    if cfg.process.shell:  # the shell reads one line: a path with a space stays one word
        import shlex

        words = [shlex.quote(w) for w in words]
    return tuple(cfg.command) + tuple(words)
