"""A fake training's plan changed as a restart changes a real one: resumed from a saved solver
state (what `caffe train -snapshot STATE` prints and skips), or cut where it crashes (right
after the solver state of an iteration). Pure: plans in, plans out; the child plays them unchanged."""
from __future__ import annotations

import re

from .plan import Plan

__all__ = ["resume_plan", "cut_after_state", "iteration_of_state"]

_STATE_ITER = re.compile(r"_iter_(\d+)\.solverstate(?:\.h5)?$")
_GLOG_HEAD = re.compile(rb"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6}\s+\d+ ")
_START = b"Starting Optimization"
_ITERATION = b"] Iteration "
_TESTING = re.compile(rb"\] Iteration (\d+), Testing net")


def iteration_of_state(path: str) -> int:
    """The iteration Caffe saved a solver state at, from its name (`lenet_iter_300.solverstate`);
    0 for a name without one (the whole log is played)."""
    m = _STATE_ITER.search(path)
    return int(m.group(1)) if m else 0


def resume_plan(plan: Plan, state: str) -> Plan:
    """The log's header (the nets built, up to "Starting Optimization"), caffe.cpp's "Resuming
    from STATE" and the solver's restore, then the log from the saved iteration on: real Caffe
    restores `iter_` and goes on from there (its display of that iteration included, and its test
    when one falls on it, "Iteration N, Testing net" first; the snapshot lines that saved it,
    printed before it, are not printed again)."""
    resumed_at = iteration_of_state(state)
    header, kept, current = [], [], None
    for number, raw in enumerate(plan.lines, 1):
        current = plan.iterations.get(number, current)
        testing = _TESTING.search(raw)
        if testing:  # a test's first line names its iteration before any of its metrics does
            current = int(testing.group(1))
        elif current is None and _ITERATION in raw:  # "Iteration 0 (...)": the loop has begun
            current = 0
        if current is None:
            header.append(number)
        elif current >= resumed_at:
            kept.append(number)
    at = next((i for i, n in enumerate(header) if _START in plan.lines[n - 1]), len(header))
    heads = [m.group(0) for n in header[:at] if (m := _GLOG_HEAD.match(plan.lines[n - 1]))]
    head = heads[-1] if heads else b"I0101 00:00:00.000000  4242 "
    told = (head + b"caffe.cpp:251] Resuming from " + state.encode() + b"\n",
            head + b"sgd_solver.cpp:318] SGDSolver: restoring history\n")
    order: list = [*header[:at], *told, *header[at:], *kept]
    return _renumbered(plan, order)


def cut_after_state(plan: Plan, iteration: int) -> Plan:
    """The plan up to and including the line that announces the solver state of `iteration`
    (the file is still written: the crash comes after it); the whole plan if it has none."""
    for number in sorted(plan.saves):
        if any(s.kind == "solverstate" and iteration_of_state(s.path) == iteration for s in plan.saves[number]):
            return _renumbered(plan, list(range(1, number + 1)))
    return plan


def _renumbered(plan: Plan, order: list) -> Plan:
    """A plan of `order`: old line numbers (their saves and iterations kept) or new raw lines."""
    lines, saves, iterations = [], {}, {}
    for new, item in enumerate(order, 1):
        if isinstance(item, bytes):
            lines.append(item)
            continue
        lines.append(plan.lines[item - 1])
        if item in plan.saves:
            saves[new] = plan.saves[item]
        if item in plan.iterations:
            iterations[new] = plan.iterations[item]
    return Plan(tuple(lines), plan.profile, saves, iterations)
