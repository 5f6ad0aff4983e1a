"""What the curve sinks (TensorBoard, MLflow) must hold for a run's metrics, by the naming README's
"Sinks" section documents: written here from the documentation, not from sinks/scalars.py, so
a test compares the sink with the rule rather than with itself."""
from __future__ import annotations

import re
from collections import defaultdict
from typing import Callable


def expected_scalars(metrics: list, value: Callable[[float], float] = float) -> dict:
    """{name: [(step, value)...]} for `metrics`, unranked; `value`: what the store keeps of a value."""
    want: dict = defaultdict(list)
    for m in metrics:
        phase = m.phase + (str(m.test_net) if m.test_net else "")
        tag = re.sub(r"[^-/\w.]", "_", ("running/" if m.running else "") + f"{phase}/{m.name}")
        if m.iteration is not None:
            step = m.iteration
        else:  # the epoch; where there is none either, how many values the name had before
            step = int(m.epoch) if m.epoch is not None else len(want[tag])
        want[tag].append((step, value(m.value)))
    return want
