"""Loaded ledgers kept on disk, so that replaying the same file again skips validation.

`boe replay`, `boe report` and `boe calibrate` load a ledger file through
`boe.core.loading.load_ledgers`, which keys a file by the hash of its bytes
and of the loader's code: an edited file, or another version of `boe`, is a
miss and never reads a stale entry. Entries live in ``$BOE_LEDGER_CACHE``
(a folder; ``off`` turns the cache off), else ``$XDG_CACHE_HOME/boe/ledgers``,
else ``~/.cache/boe/ledgers``; the least recently used go beyond 2 GiB. A
folder that cannot be written is no error: loading just does not get faster.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from functools import cache
from pathlib import Path

__all__ = ["ENV", "FileLedgerCache", "content_key", "default_ledger_cache"]

#: The environment variable naming the cache folder (or ``off``).
ENV = "BOE_LEDGER_CACHE"
LIMIT_BYTES = 2 * 2**30
_OFF = ("0", "off", "no", "false", "none")


class FileLedgerCache:
    """Packed ledgers as ``<key>.npz`` files in one folder, the least recently used removed beyond a limit.

    A ledger's key is the hash of its bytes and of the loader's code (`content_key`); `get` remembers the key and
    the file's size, time and inode, and `put` stores only when the file still has them (it was not rewritten
    while it was read, so the stored load belongs to the hashed bytes).
    """

    def __init__(self, folder: str | Path, limit_bytes: int = LIMIT_BYTES) -> None:
        self.folder = Path(folder)
        self.limit_bytes = limit_bytes
        self._seen: dict[Path, tuple[str, tuple[int, int, int]]] = {}

    def get(self, path: Path) -> bytes | None:
        """The entry for the file's current contents (marked as used), or None."""
        try:
            stamp = _stamp(path)
            key = content_key(path)
        except OSError:
            return None
        self._seen[path] = (key, stamp)
        entry = self._path(key)
        try:
            data = entry.read_bytes()
            os.utime(entry)
        except OSError:
            return None
        return data

    def put(self, path: Path, data: bytes) -> None:
        """Store an entry (written whole, then renamed into place); nothing happens when the folder is unwritable."""
        key, stamp = self._seen.pop(path, (None, None))
        try:
            if key is None or _stamp(path) != stamp:
                return
        except OSError:
            return
        tmp = None
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".", suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, self._path(key))
            tmp = None
            self._prune(keep=self._path(key))
        except OSError:
            pass
        finally:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.npz"

    def _prune(self, keep: Path) -> None:
        """Remove the least recently used entries beyond the limit, never the one just stored."""
        entries = []
        for path in self.folder.glob("*.npz"):
            try:
                st = path.stat()
            except OSError:
                continue
            entries.append((st.st_mtime, st.st_size, path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.limit_bytes:
                break
            if path == keep:
                continue
            path.unlink(missing_ok=True)
            total -= size


def default_ledger_cache() -> FileLedgerCache | None:
    """The cache `boe` commands load ledger files through (None when ``BOE_LEDGER_CACHE=off``)."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() in _OFF:
        return None
    if value:
        return FileLedgerCache(value)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return FileLedgerCache(Path(base) / "boe" / "ledgers")


def content_key(path: Path) -> str:
    """The hash of a file's bytes and of the loader's code: equal keys, equal loads (`OSError` when unreadable)."""
    h = hashlib.sha256(_loader_fingerprint())
    with path.open("rb") as fh:
        h.update(hashlib.file_digest(fh, "sha256").digest())
    return h.hexdigest()


@cache
def _loader_fingerprint() -> bytes:
    """Everything besides a file's bytes that decides what it loads as: the code of the core and of the built-in
    kinds, and the kind codes (a record with plugin kinds is never cached: its plugin may come and go)."""
    import boe.core
    import boe.core.graph
    import boe.kinds

    h = hashlib.sha256(repr(sorted(boe.core.graph.KIND_CODES.items())).encode())
    for pkg in (boe.core, boe.kinds):
        for src in sorted(Path(str(pkg.__file__)).parent.glob("*.py")):
            h.update(src.name.encode() + b"\0" + src.read_bytes())
    return h.digest()


def _stamp(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return (st.st_size, st.st_mtime_ns, st.st_ino)
