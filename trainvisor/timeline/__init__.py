"""The training's timeline (train_begin, batch_end, epoch_end, test_end, checkpoint, train_end)
derived from the metric stream, and the callbacks that receive it.

    derive.py     the pure `Timeline`: Metric / CheckpointEvent in, timeline events out
    events.py     one frozen record per kind of event
    callbacks.py  `Callback`, the check at registration, `module:Class` loading
    dispatch.py   every callback called for every event; exceptions counted; stop votes
    runner.py     the callbacks' own thread, the sink that feeds it, the checkpoint consumer
"""
from __future__ import annotations

from .callbacks import Callback, load_callback, register_callback
from .derive import Timeline, timeline_of
from .events import BatchEnd, CheckpointReached, EpochEnd, TestEnd, TimelineEvent, TrainBegin, TrainEnd

__all__ = ["Callback", "register_callback", "load_callback", "Timeline", "timeline_of", "TrainBegin", "BatchEnd",
           "EpochEnd", "TestEnd", "CheckpointReached", "TrainEnd", "TimelineEvent"]
