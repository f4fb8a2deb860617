"""Secret bytes that a library insists on reading from a path, held where only this process can read them.

Python's ``ssl`` loads a certificate and its key only from files (a worker
connection's client certificate, the webhook server's own certificate), and
kopf's webhook server re-reads its files to notice a change. Writing a key
to a temporary directory leaves it on disk whenever the process does not
reach its clean-up: every SIGKILL, every crash, every test process that
simply ends. So on Linux each file here is an anonymous memory file
(``memfd_create``) named by ``/proc/self/fd/N``: it is on no file system,
only this process (or one allowed to trace it) can open it, and it is gone
when the process ends, however it ends. Elsewhere the files go to one
private directory (mode 0700, files 0600) removed at exit.

Two lifetimes:

- :func:`private_file`: kept until the process ends; the same bytes give
  the same path (a worker's client certificate is asked for at every
  reconnection, the webhook's first certificate is re-read by kopf).
- :func:`transient_file`: for a single load (a reloaded certificate goes
  into the ``SSLContext`` and is not read again); closed or removed when the
  ``with`` block ends.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_lock = threading.Lock()
_directory: Path | None = None
_kept: dict[str, int] = {}
MEMORY_FILES = Path("/proc/self/fd")


def _memory_files_work() -> bool:
    return hasattr(os, "memfd_create") and MEMORY_FILES.is_dir()


def material_directory() -> Path:
    """The directory the paths given out here are in: ``/proc/self/fd`` on Linux, else a private one."""
    global _directory
    if _memory_files_work():
        return MEMORY_FILES
    with _lock:
        if _directory is None:
            _directory = Path(tempfile.mkdtemp(prefix="multikueue-tls-"))
            atexit.register(shutil.rmtree, _directory, ignore_errors=True)
        return _directory


def _memory_file(content: bytes, label: str) -> int:
    fd = os.memfd_create(label, os.MFD_CLOEXEC)
    view = memoryview(content)
    while view:
        view = view[os.write(fd, view) :]
    return fd


def _write_private(path: Path, content: bytes) -> None:
    partial = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}")
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as out:
        out.write(content)
    partial.replace(path)


def private_file(content: bytes) -> str:
    """A path to ``content`` that only this process can read, valid until the process ends."""
    digest = hashlib.sha256(content).hexdigest()
    if _memory_files_work():
        with _lock:
            fd = _kept.get(digest)
            if fd is None:
                fd = _kept[digest] = _memory_file(content, f"multikueue-{digest[:12]}")
        return str(MEMORY_FILES / str(fd))
    path = material_directory() / digest
    with _lock:
        if not path.exists():
            _write_private(path, content)
    return str(path)


@contextmanager
def transient_file(content: bytes) -> Iterator[str]:
    """A path to ``content`` that only this process can read, gone when the block ends."""
    if _memory_files_work():
        fd = _memory_file(content, "multikueue-transient")
        try:
            yield str(MEMORY_FILES / str(fd))
        finally:
            os.close(fd)
        return
    path = material_directory() / f"transient-{os.getpid()}-{threading.get_ident()}-{os.urandom(6).hex()}"
    _write_private(path, content)
    try:
        yield str(path)
    finally:
        path.unlink(missing_ok=True)
