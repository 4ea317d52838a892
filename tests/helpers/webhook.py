"""A webhook receiver on 127.0.0.1: what the alert automations send (tests/e2e/test_alert_runs.py,
tests/e2e/test_deployments.py's canary)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextlib.contextmanager
def webhook_receiver() -> Iterator[tuple[str, list[dict]]]:
    """(URL, messages): every request to the URL appended as {"at" (epoch s), "method", "path",
    "content_type", "json"}. Own code: the standard library's HTTP server, a receiver this small
    needs nothing more."""
    received: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            received.append({"at": time.time(), "method": self.command, "path": self.path,
                             "content_type": self.headers.get("Content-Type"), "json": json.loads(body)})
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):  # keep the test output to the test's own lines
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/nightly-alerts", received
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
