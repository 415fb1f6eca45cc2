"""Who a worker is: a name that survives a restart on the same machine, held by an OS file lock.

A worker is ``HOST/SLOT``. The slot is the first of ``1``, ``2``, ... whose
lock file (one per store, run and slot, in ``BOE_WORKER_LOCKS`` or the
temporary directory) no live process holds, or the name given with
``--worker``. The lock is an ``flock``: the kernel drops it when the process
dies, even by ``kill -9``. So a worker that starts and gets slot 1 knows the
previous holder of slot 1 on this machine is dead, and may take back the
questions that holder had claimed instead of waiting for their leases to run
out. Two live workers never share a slot; workers on other machines differ
by host name (give ``--worker`` where host names repeat, e.g. cloned
containers).
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from boe.errors import ConfigError

__all__ = ["LOCK_DIR_ENV", "WorkerIdentity", "acquire_identity"]

LOCK_DIR_ENV = "BOE_WORKER_LOCKS"
MAX_SLOTS = 1024
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]


@dataclass
class WorkerIdentity:
    """A worker's id and the lock that makes it this process's alone."""

    worker_id: str
    host: str
    slot: str
    reclaim: bool  # whether the questions an earlier holder of this id claimed are ours to take back
    lock_path: Path | None = None
    _handle: IO[str] | None = field(default=None, repr=False)

    def release(self) -> None:
        """Give the slot up (the kernel also does this when the process dies)."""
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def _lock_dir() -> Path:
    env = os.environ.get(LOCK_DIR_ENV)
    uid = os.getuid() if hasattr(os, "getuid") else 0
    d = Path(env) if env else Path(tempfile.gettempdir()) / f"boe-workers-{uid}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _try_lock(path: Path) -> IO[str] | None:
    assert fcntl is not None
    handle = path.open("a+", encoding="utf-8")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def acquire_identity(store_url: str, run: str, name: str | None = None) -> WorkerIdentity:
    """This process's worker id for ``run`` in the store at ``store_url`` (the first free slot, or ``name``)."""
    host = socket.gethostname() or "localhost"
    if name is not None and not _NAME.match(name):
        raise ConfigError(f"--worker: {name!r} is not a worker name (letters, digits, '.', '_', '-'; up to 64)")
    if fcntl is None:  # pragma: no cover - no file locks: a fresh id, crashed workers' leases simply expire
        slot = name or uuid.uuid4().hex[:8]
        return WorkerIdentity(f"{host}/{slot}", host, slot, reclaim=False)
    scope = hashlib.sha256(f"{store_url}\0{run}\0{host}".encode()).hexdigest()[:16]
    folder = _lock_dir()
    for slot in [name] if name is not None else [str(i) for i in range(1, MAX_SLOTS + 1)]:
        assert slot is not None
        path = folder / f"{scope}-{slot}.lock"
        handle = _try_lock(path)
        if handle is not None:
            return WorkerIdentity(f"{host}/{slot}", host, slot, reclaim=True, lock_path=path, _handle=handle)
    if name is not None:
        raise ConfigError(f"a worker named {name!r} is already running run {run!r} on {host}")
    raise ConfigError(f"{MAX_SLOTS} workers already run {run!r} on {host}")
