"""Run a `nexus serve` app on a loopback port in a background thread: for embedding it in a Python program
(a notebook, a benchmark, a test) where `nexus serve` in another terminal is not wanted."""

from __future__ import annotations

import socket
import threading
import time


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class BackgroundServer:
    def __init__(self, engine, api_key: str | None = None, host: str = "127.0.0.1", port: int | None = None):
        import uvicorn

        from nexus.serve.app import create_app

        self.engine, self.api_key = engine, api_key
        self.port = port or free_port(host)
        self.root = f"http://{host}:{self.port}"
        self.base_url = self.root + "/v1"
        self._server = uvicorn.Server(uvicorn.Config(create_app(engine, api_key=api_key), host=host,
                                                     port=self.port, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, name="nexus-serve-http", daemon=True)

    def start(self, timeout: float = 30) -> "BackgroundServer":
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"nexus serve did not start on {self.root}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=15)
