"""A real OpenAI-compatible chat endpoint on a loopback port, scripted: its reply texts, and how fast it sends them.

`ChatServer` answers ``GET /models`` and ``POST /chat/completions`` with
``reply`` as the assistant's text. With ``drip=(n, seconds)`` the body is sent
``n`` bytes at a time, one piece every ``seconds`` (a server that keeps a
connection alive without finishing: every read succeeds, the reply never ends
in time).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ChatServer:
    """A loopback chat-completions server in a thread (use as a context manager); ``base_url`` ends in /v1."""

    def __init__(self, reply: str, *, drip: tuple[int, float] | None = None, pad_to: int = 0) -> None:
        self.reply = reply
        self.drip = drip
        self.pad_to = pad_to  # the body is padded with spaces (valid JSON) to this many bytes
        self.posts: list[dict[str, Any]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> ChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def body(self, request: dict[str, Any]) -> bytes:
        reply = {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": request.get("model", "m"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": self.reply}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5},
        }
        data = json.dumps(reply).encode()
        return data + b" " * max(0, self.pad_to - len(data))

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, data: bytes, drip: tuple[int, float] | None = None) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                step, pause = drip or (len(data), 0.0)
                try:
                    for i in range(0, len(data), step):
                        self.wfile.write(data[i : i + step])
                        self.wfile.flush()
                        time.sleep(pause)
                except OSError:  # the client gave up
                    pass

            def do_GET(self) -> None:
                self._send(json.dumps({"object": "list", "data": [{"id": "m", "owned_by": "vllm"}]}).encode())

            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                server.posts.append(request)
                self._send(server.body(request), server.drip)

        return Handler
