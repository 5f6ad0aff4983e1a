"""The typed S3 resume record: the stored JSON shape is unchanged (records written by an
older trainvisor still resume), and a record it cannot read means starting over."""
from __future__ import annotations

import pytest

from trainvisor.uploaders.records import ResumeRecords, S3ResumeRecord


def test_record_round_trips_through_the_stored_shape(tmp_path):
    records = ResumeRecords(str(tmp_path / "s3-progress"))
    rec = S3ResumeRecord("upload-1", "ckpt", 5 << 20, 1700000000123456789, 8 << 20)
    records.put("p/r1/a.pt", rec.to_json_dict())
    assert records.get("p/r1/a.pt") == {"upload_id": "upload-1",
                                        "version": ["ckpt", 5 << 20, 1700000000123456789, 8 << 20]}
    assert S3ResumeRecord.from_json_dict(records.get("p/r1/a.pt")) == rec


def test_record_is_for_one_version_of_the_file_only():
    rec = S3ResumeRecord("u", "ckpt", 100, 7, 8)
    assert rec.is_for("ckpt", 100, 7, 8)
    assert not rec.is_for("ckpt", 100, 8, 8)      # rewritten since
    assert not rec.is_for("other", 100, 7, 8)
    assert not rec.is_for("ckpt", 100, 7, 16)     # another part size: other part boundaries


@pytest.mark.parametrize("stored", [
    {}, {"upload_id": "u"}, {"upload_id": "u", "version": ["ckpt", 1, 2]},
    {"upload_id": 5, "version": ["ckpt", 1, 2, 3]}, {"upload_id": "u", "version": ["ckpt", "1", 2, 3]},
    {"upload_id": "u", "version": None},
], ids=["empty", "no-version", "short-version", "numeric-id", "string-size", "null-version"])
def test_unreadable_record_reads_as_none(stored):
    assert S3ResumeRecord.from_json_dict(stored) is None
