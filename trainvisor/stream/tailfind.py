"""Finding a followed log's files by what they are, not by name: the open file with its identity
(`OpenFile`), a file renamed or copied beside the path (`find_sibling`), and the files rotated
after one (`newer_rotations`, logrotate's and RotatingFileHandler's numbering: NAME.1 is the
newest rotated file, NAME.2 the one before it...)."""
from __future__ import annotations

import os
import re
from typing import Optional

from .tailpos import fingerprint, same_start

__all__ = ["OpenFile", "find_sibling", "newer_rotations"]


class OpenFile:
    """One open file being read: its identity, fingerprint and how far it was read."""

    def __init__(self, name: str, fd: int, offset: int = 0) -> None:
        st = os.fstat(fd)
        self.name, self.fd, self.dev, self.ino = name, fd, st.st_dev, st.st_ino
        self.offset = offset
        self.fp, self.fp_len = fingerprint(fd)

    @classmethod
    def at(cls, path: str) -> Optional["OpenFile"]:
        try:
            return cls(path, os.open(path, os.O_RDONLY | os.O_CLOEXEC))
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            return None

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def rewritten(self) -> bool:
        """Truncated since it was read (shorter, or its first bytes changed)."""
        return self.size() < self.offset or (self.fp_len > 0 and not same_start(self.fd, self.fp, self.fp_len))

    def close(self) -> None:
        os.close(self.fd)


def _siblings(path: str) -> tuple[str, list[str]]:
    """The path's directory and the names in it that start as the path's does."""
    directory, base = os.path.split(os.path.abspath(path))
    try:
        return directory, sorted(n for n in os.listdir(directory) if n.startswith(base))
    except OSError:
        return directory, []


def find_sibling(path: str, fp: str, fp_len: int, offset: int, *, ino: Optional[tuple[int, int]] = None,
                 exclude: Optional[tuple[int, int]] = None) -> Optional[OpenFile]:
    """A file beside `path` (the path itself included) that starts with the fingerprinted bytes
    and is at least `offset` long: the one with inode `ino` if it is given (a renamed file), else
    any but `exclude` (a copy)."""
    directory, names = _siblings(path)
    for name in names:
        found = OpenFile.at(os.path.join(directory, name))
        if found is None:
            continue
        ident = (found.dev, found.ino)
        if ((ino is None or ident == ino) and ident != exclude and found.size() >= offset
                and fp_len <= found.fp_len and same_start(found.fd, fp, fp_len)):
            return found
        found.close()
    return None


def newer_rotations(path: str, dev: int, ino: int) -> list[str]:
    """When the file (dev, ino) is now PATH.K: PATH.K-1 ... PATH.1 (those there), the files
    rotated after it, oldest first. Empty when it is PATH.1, or not a numbered sibling."""
    directory, names = _siblings(path)
    base = os.path.basename(path)
    numbered = {int(m.group(1)): n for n in names if (m := re.fullmatch(re.escape(base) + r"\.(\d+)", n))}
    for k, name in numbered.items():
        try:
            st = os.stat(os.path.join(directory, name))
        except FileNotFoundError:
            continue
        if (st.st_dev, st.st_ino) == (dev, ino):
            return [os.path.join(directory, numbered[j]) for j in range(k - 1, 0, -1) if j in numbered]
    return []
