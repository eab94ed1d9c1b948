"""A TCP relay that can cut the network between a client and a server (tests only)."""

import socket
import threading
from contextlib import suppress


class DroppableProxy:
    """A TCP relay in front of the server that can cut the network, like a dropped Wi-Fi.

    Chromium's offline emulation leaves open WebSockets alone, so a real drop is made here:
    `down()` shuts every relayed connection (the browser sees close code 1006, abnormal) and
    refuses new ones until `up()`.
    """

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.lock = threading.Lock()
        self.open: set[socket.socket] = set()
        self.accepting = True
        self.dropped = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def down(self) -> None:
        with self.lock:
            self.accepting = False
            for sock in self.open:
                self.dropped += 1
                _shut(sock)
            self.open.clear()

    def up(self) -> None:
        with self.lock:
            self.accepting = True

    def close(self) -> None:
        self.down()
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            with self.lock:
                accepting = self.accepting
            if not accepting:
                _shut(client)
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self.lock:
                self.open.update((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _shut(dst)
            _shut(src)
            src.close()  # the opposite relay closes dst
            with self.lock:
                self.open.discard(src)
                self.open.discard(dst)


def _shut(sock: socket.socket) -> None:
    # shutdown() (not close()) wakes the relay thread blocked in recv() on this socket.
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
