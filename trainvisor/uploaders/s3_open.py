"""An S3 bucket's housekeeping (a mixin of S3Uploader): open multipart uploads, so none is left
behind, and deleting an object (retention, `delete_object`).

An upload a killed trainvisor created but never recorded (killed between CreateMultipartUpload
and writing its record), or one created twice (the reply lost, the call retried), would keep its
parts billed in the bucket for ever: nothing would resume or abort it. Before a new multipart
upload of a key, the open ones of that key are aborted (a recorded one would have been resumed);
`abort_unowned(prefix)` aborts every open upload under a run's keys that no resume record owns.
Uses the host's `_client`, `bucket`, `_recorded(key)` and `_error(what, exc)`.
"""
from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError

__all__ = ["OpenUploads"]


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class OpenUploads:
    """The housekeeping of S3Uploader (apart so the adapter stays under 400 lines)."""

    def delete_object(self, key: str) -> None:
        """Delete `key` (retention); S3 answers a key already gone as deleted too."""
        try:
            self._client.delete_object(Bucket=self.bucket, Key=key)
        except (ClientError, BotoCoreError) as exc:
            raise self._error(f"deleting {key}", exc) from exc

    def _open_uploads(self, prefix: str) -> list[tuple[str, str]]:
        """(key, UploadId) of the multipart uploads open in the store under `prefix`."""
        pages = self._client.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket, Prefix=prefix)
        return [(u["Key"], u["UploadId"]) for page in pages for u in page.get("Uploads", ())]

    def _abort_open(self, key: str) -> None:
        """Abort the open uploads of exactly `key` (none is recorded: it would have been resumed)."""
        for found, upload_id in self._open_uploads(key):
            if found == key:
                self._abort_id(key, upload_id)

    def _abort_id(self, key: str, upload_id: str) -> None:
        try:
            self._client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
        except ClientError as exc:
            if _code(exc) != "NoSuchUpload":  # gone already: what was wanted
                raise

    def abort_unowned(self, prefix: str) -> list[str]:
        """Abort the multipart uploads open under `prefix` that no resume record owns (the keys,
        one per upload aborted). Their parts would otherwise stay billed in the bucket."""
        aborted = []
        try:
            for key, upload_id in self._open_uploads(prefix):
                record = self._recorded(key)
                if record is None or record.upload_id != upload_id:
                    self._abort_id(key, upload_id)
                    aborted.append(key)
        except (ClientError, BotoCoreError) as exc:
            raise self._error(f"listing the open uploads under {prefix}", exc) from exc
        return aborted
