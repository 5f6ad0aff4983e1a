"""watchdog's events as the watcher's typed events: one table, every kind the watcher uses."""
from __future__ import annotations

import pytest
from watchdog.events import (DirCreatedEvent, DirMovedEvent, FileClosedEvent, FileCreatedEvent, FileDeletedEvent,
                             FileModifiedEvent, FileMovedEvent, FileOpenedEvent)

from trainvisor.watch.fsevents import DirAppeared, FileChanged, FileClosed, FileDeleted, FileMoved
from trainvisor.watch.observe import translate

TABLE = [
    ("closed", FileClosedEvent("/c/a.pt"), True, FileClosed("/c/a.pt")),
    ("modified", FileModifiedEvent("/c/a.pt"), True, FileChanged("/c/a.pt")),
    ("created", FileCreatedEvent("/c/a.pt"), True, FileChanged("/c/a.pt")),
    ("renamed", FileMovedEvent("/c/a.tmp", "/c/a.pt"), True, FileMoved("/c/a.tmp", "/c/a.pt")),
    ("moved-in", FileMovedEvent("", "/c/a.pt"), True, FileMoved(None, "/c/a.pt")),
    ("moved-out", FileMovedEvent("/c/a.pt", ""), True, FileDeleted("/c/a.pt")),
    ("polling-move", FileMovedEvent("/c/a.pt", "/c/b.pt"), False, FileMoved("/c/a.pt", "/c/b.pt", by_rename=False)),
    ("deleted", FileDeletedEvent("/c/a.pt"), True, FileDeleted("/c/a.pt")),
    ("dir-created", DirCreatedEvent("/c/sub"), True, DirAppeared("/c/sub")),
    ("dir-moved", DirMovedEvent("/c/tmp-1", "/c/ckpt-1"), True, DirAppeared("/c/ckpt-1")),
    ("dir-moved-out", DirMovedEvent("/c/ckpt-1", ""), True, None),
    ("opened", FileOpenedEvent("/c/a.pt"), True, None),
]


@pytest.mark.parametrize("event,renames_are_proof,expected", [t[1:] for t in TABLE], ids=[t[0] for t in TABLE])
def test_translate(event, renames_are_proof, expected):
    assert translate(event, renames_are_proof=renames_are_proof) == expected
