"""Secret bytes handed to libraries by path: readable by this process only, never left on disk."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from multikueue.runtime.privatefiles import MEMORY_FILES, material_directory, private_file, transient_file

pytestmark = pytest.mark.unit


def test_a_private_file_holds_the_bytes_and_the_same_bytes_give_the_same_path() -> None:
    path = private_file(b"KEY-1")
    assert Path(path).read_bytes() == b"KEY-1"
    assert Path(path).read_bytes() == b"KEY-1", "read again from the start, as kopf re-reads its files"
    assert private_file(b"KEY-1") == path
    assert private_file(b"KEY-2") != path
    assert Path(path).parent == material_directory()
    assert material_directory().stat().st_mode & 0o077 == 0


def test_a_transient_file_is_gone_when_its_block_ends() -> None:
    with transient_file(b"NEXT-KEY") as path:
        assert Path(path).read_bytes() == b"NEXT-KEY"
        if material_directory() == MEMORY_FILES:
            assert os.readlink(path).startswith("/memfd:multikueue-")
    if material_directory() == MEMORY_FILES:
        # The descriptor is closed: the number may be reused, but never for these bytes.
        assert not Path(path).exists() or Path(path).read_bytes() != b"NEXT-KEY"
    else:
        assert not Path(path).exists()


def test_a_killed_webhook_server_leaves_no_key_on_disk(tmp_path: Path) -> None:
    """The webhook's certificate and key (loaded, reloaded, and the files kopf reads) die with the process."""
    script = tmp_path / "serve.py"
    script.write_text(
        "import os, signal\n"
        "from multikueue.runtime import certificates as pki\n"
        "from multikueue.operator.webhook_tls import ReloadableContext\n"
        "tls = ReloadableContext()\n"
        "tls.load(pki.issue_webhook_certificate(['127.0.0.1']))\n"
        "cert, key = tls.initial_files()\n"
        "tls.load(pki.issue_webhook_certificate(['127.0.0.1']))\n"
        "assert key.read_bytes().startswith(b'-----BEGIN')\n"
        "print(os.readlink(key), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    temp = Path(tempfile.gettempdir())
    before = set(temp.glob("multikueue-*"))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    if not done.stdout.startswith("/memfd:"):
        pytest.skip("no anonymous memory files on this platform: the files go to a directory removed at exit")
    assert set(temp.glob("multikueue-*")) == before, "a key was left in the temporary directory"
