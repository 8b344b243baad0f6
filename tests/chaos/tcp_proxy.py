"""A TCP forwarder between worker processes and a database server, for outages on demand.

Workers are pointed at the proxy's port. While the proxy is down nothing listens there,
so connecting is refused exactly as with a server that is not running; ``up()`` starts
forwarding to the real server; ``down()`` refuses new connections again and resets the
live ones, as a crashed server or a broken network would. The real server is never
touched, so other users of it notice nothing.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class TcpProxy:
    def __init__(self, target: tuple[str, int], host: str = "127.0.0.1") -> None:
        self.target = target
        self.host = host
        self.port = free_port(host)
        self.accepted = 0
        self._lock = threading.Lock()
        self._live: set[socket.socket] = set()
        self._stop = threading.Event()
        self._acceptor: threading.Thread | None = None

    @property
    def is_up(self) -> bool:
        return self._acceptor is not None

    def up(self) -> None:
        """Listen on the port and forward every connection to the target."""
        if self._acceptor is not None:
            return
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind((self.host, self.port))
        server.listen(128)
        server.settimeout(0.05)
        self._stop.clear()
        self._acceptor = threading.Thread(target=self._accept, args=(server,),
                                          name="proxy-accept", daemon=True)
        self._acceptor.start()

    def down(self) -> None:
        """Stop listening (new connections are refused) and reset the live ones."""
        if self._acceptor is not None:
            self._stop.set()
            self._acceptor.join(5)
            self._acceptor = None
        self.cut()

    def cut(self) -> None:
        """Reset every forwarded connection (the client sees its connection drop)."""
        with self._lock:
            live = list(self._live)
        for sock in live:
            with contextlib.suppress(OSError):
                # Linger 0: closing sends a reset, not an orderly end of stream.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.down()

    def _accept(self, server: socket.socket) -> None:
        try:
            while not self._stop.is_set():
                try:
                    client, _ = server.accept()
                except TimeoutError:
                    continue
                except OSError:
                    return
                client.settimeout(None)
                try:
                    upstream = socket.create_connection(self.target, timeout=5)
                except OSError:
                    client.close()
                    continue
                upstream.settimeout(None)
                with self._lock:
                    self._live.update((client, upstream))
                    self.accepted += 1
                threading.Thread(target=self._pump, args=(client, upstream),
                                 name="proxy-pump", daemon=True).start()
        finally:
            server.close()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        pair = (a, b)
        try:
            while True:
                ready, _, _ = select.select(pair, [], [], 1.0)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    (b if sock is a else a).sendall(data)
        except OSError:
            return
        finally:
            with self._lock:
                self._live.difference_update(pair)
            for sock in pair:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()
