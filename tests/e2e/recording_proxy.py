"""A recording HTTP proxy in front of a gateway: what a real client sends and what it
was answered, request by request (method, path, headers, JSON body, status), with
the answer's bytes passed through as they come (SSE streams stay streams).

Used to assert what a client does on its own, e.g. that no request of a Claude Code
session was refused (a client that silently retries in another shape after a 400
would pass a test that only looks at its exit status)."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host"}


@dataclass
class Exchange:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    status: int = 0
    answer: bytes = b""


@dataclass
class RecordingProxy:
    """Forwards to ``target`` (``host``, ``port``); ``exchanges`` lists what passed."""

    target_host: str
    target_port: int
    exchanges: list[Exchange] = field(default_factory=list)
    _connections: set[socket.socket] = field(default_factory=set)

    def __post_init__(self) -> None:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                proxy._connections.add(self.connection)

            def finish(self) -> None:
                try:
                    super().finish()
                finally:
                    proxy._connections.discard(self.connection)

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body: Any = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                exchange = Exchange(
                    self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
                proxy.exchanges.append(exchange)
                upstream = http.client.HTTPConnection(
                    proxy.target_host, proxy.target_port, timeout=600
                )
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                upstream.request(self.command, self.path, body=raw, headers=headers)
                answer = upstream.getresponse()
                exchange.status = answer.status
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in _HOP and key.lower() != "content-length":
                        self.send_header(key, value)
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")
                self.end_headers()
                while chunk := answer.read1(65536):
                    exchange.answer += chunk
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                upstream.close()
                self.close_connection = True

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def refused(self) -> list[Exchange]:
        """The exchanges answered with anything but a 2xx."""
        return [e for e in self.exchanges if not 200 <= e.status < 300]

    def assert_none_refused(self) -> None:
        """Fail naming each refused request and the start of its answer."""
        refused = [(e.method, e.path, e.status, e.answer[:500]) for e in self.refused()]
        assert not refused, refused

    def close(self) -> None:
        """Stop serving; connections a client left open (idle keep-alives) are shut."""
        self.server.shutdown()
        self.server.server_close()
        for connection in list(self._connections):
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        self.thread.join(timeout=10)
