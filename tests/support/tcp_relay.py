"""A TCP relay on loopback that keeps every byte it forwards: what a wire capture would see."""

import selectors
import socket
import threading


class Relay:
    """Listen on a free loopback port and forward each connection to `target` ("host:port")."""

    def __init__(self, target: str):
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.seen = bytearray()
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self._server.getsockname()[1]}"
        self._stop = threading.Event()
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._server, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._run, name="relay", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._sel.select(0.05):
                if key.fileobj is self._server:
                    client, _ = self._server.accept()
                    upstream = socket.create_connection(self.target)
                    self._sel.register(client, selectors.EVENT_READ, upstream)
                    self._sel.register(upstream, selectors.EVENT_READ, client)
                    continue
                data = b""
                try:
                    data = key.fileobj.recv(65536)
                except OSError:
                    pass
                if not data:
                    self._close(key.fileobj, key.data)
                    continue
                with self._lock:
                    self.seen += data
                try:
                    key.data.sendall(data)
                except OSError:
                    self._close(key.fileobj, key.data)

    def _close(self, *socks) -> None:
        for s in socks:
            try:
                self._sel.unregister(s)
            except (KeyError, ValueError):
                pass
            s.close()

    def captured(self) -> bytes:
        with self._lock:
            return bytes(self.seen)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        for key in list(self._sel.get_map().values()):
            key.fileobj.close()
        self._sel.close()
