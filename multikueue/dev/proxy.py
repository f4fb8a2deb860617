"""A loopback TCP proxy that can be cut: a network partition between two local clusters.

The fault suite points the manager's kubeconfig for a worker at this proxy
instead of the worker's apiserver. :meth:`TcpProxy.cut` then closes every
connection through it and refuses new ones (the manager cannot reach the
worker), while the worker itself, its controller and its nodes go on as
before: the one fault that only fencing (``multikueue.core.fencing``) can
keep from running a job on two workers at once. :meth:`TcpProxy.heal` lets
traffic through again. TLS passes through untouched.
"""

from __future__ import annotations

import socket
import threading

BUFFER = 65536


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to ``target`` until closed; one thread per direction per connection."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(128)
        self.port: int = self._server.getsockname()[1]
        self._cut = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        #: Connections forwarded so far (to tell that a client switched to the proxy).
        self.connections = 0
        threading.Thread(target=self._accept, name=f"proxy :{self.port}", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            if self._cut.is_set():
                conn.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                conn.close()
                continue
            with self._lock:
                self._open.update((conn, upstream))
                self.connections += 1
            for src, dst in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self._cut.is_set():
                data = src.recv(BUFFER)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            self._drop(src, dst)

    def _drop(self, *socks: socket.socket) -> None:
        with self._lock:
            for sock in socks:
                self._open.discard(sock)
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()

    def cut(self) -> None:
        """Close every connection and refuse new ones until :meth:`heal`."""
        self._cut.set()
        with self._lock:
            socks = list(self._open)
        self._drop(*socks)

    def heal(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        self._closed.set()
        self.cut()
        self._server.close()
