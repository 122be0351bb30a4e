"""A small HTTP server for hostfirst's remote-source tests (tests/it/remote.rs): serves the files of a folder
with Range support and ETags, and misbehaves on purpose by the first segment of the path. Loopback only.

    python3 fault_server.py FOLDER       prints the port it listens on (127.0.0.1), then serves until killed

Paths: /ok/NAME (a good server), /full/NAME (answers every range request with 200 and the whole body),
/flaky/NAME (503 SlowDown for the first 2 tries of each range), /reset/NAME (closes the connection without an
answer on the first try of each range), /cut/NAME (sends half the body of the first try of each range, then
closes), /down/NAME (always 503), /forbidden/NAME (403), /replaced/NAME (the first request sees NAME with
ETag "v1"; every later one sees NAME.v2 with ETag "v2", honouring If-Match with 412), /gate/NAME (a good
server that holds every ranged GET not starting at byte 0 until GATE of them wait together, or 10 s have passed;
then lets every request through). /_stats/PREFIX answers "requests bytes most" counted over the paths starting
with /PREFIX/, `most` being how many requests waited at the gate together when it opened (a client that keeps
fewer than GATE requests in flight shows its depth there); /_reset_stats clears the counts.
"""

import hashlib
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = sys.argv[1]
LOCK = threading.Lock()
TRIES = {}  # (path, range) -> tries so far
SEEN = set()  # paths of /replaced/ served once
STATS = {}  # prefix -> [requests, body bytes, requests at the gate when it opened]
GATE = 8
GATE_COND = threading.Condition(LOCK)
WAITING = {}  # prefix -> requests that reached the gate before it opened
OPENED = set()  # prefixes whose gate is open


def count(prefix, nbytes, requests=1):
    with LOCK:
        s = STATS.setdefault(prefix, [0, 0, 0])
        s[0] += requests
        s[1] += nbytes


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def plain(self, code, text=b""):
        self.send_response(code)
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def do_GET(self):
        path = self.path.split("?")[0]
        if path.startswith("/_stats/"):
            s = STATS.get(path[len("/_stats/"):], [0, 0, 0])
            return self.plain(200, f"{s[0]} {s[1]} {s[2]}".encode())
        if path == "/_reset_stats":
            with LOCK:
                STATS.clear()
                TRIES.clear()
                SEEN.clear()
                WAITING.clear()
                OPENED.clear()
            return self.plain(200)
        parts = path.strip("/").split("/", 1)
        if len(parts) != 2:
            return self.plain(404)
        mode, name = parts
        rng = self.headers.get("Range")
        with LOCK:
            key = (path, rng)
            tries = TRIES.get(key, 0)
            TRIES[key] = tries + 1
        count(mode, 0)
        if mode == "gate" and rng and not rng.startswith("bytes=0-"):
            with GATE_COND:
                if mode not in OPENED:
                    WAITING[mode] = WAITING.get(mode, 0) + 1
                    GATE_COND.notify_all()
                    GATE_COND.wait_for(lambda: WAITING[mode] >= GATE or mode in OPENED, timeout=10)
                    if mode not in OPENED:
                        OPENED.add(mode)
                        STATS[mode][2] = WAITING[mode]
                        GATE_COND.notify_all()
        file = os.path.join(ROOT, name)
        etag = None
        if mode == "replaced":
            with LOCK:
                first = path not in SEEN
                SEEN.add(path)
            if not first:
                file += ".v2"
            etag = '"v1"' if first else '"v2"'
        if mode == "down" or (mode == "flaky" and tries < 2):
            return self.plain(503, b"<Error><Code>SlowDown</Code></Error>")
        if mode == "forbidden":
            return self.plain(403, b"<Error><Code>AccessDenied</Code></Error>")
        if mode == "reset" and tries == 0:
            self.close_connection = True
            self.connection.shutdown(2)
            return None
        if not os.path.isfile(file):
            return self.plain(404)
        with open(file, "rb") as f:
            data = f.read()
        etag = etag or '"' + hashlib.md5(data).hexdigest() + '"'
        want = self.headers.get("If-Match")
        if want is not None and want != etag:
            return self.plain(412)
        body, code, crange = data, 200, None
        if rng and mode != "full":
            lo, hi = rng.split("=", 1)[1].split("-")
            lo = int(lo)
            hi = min(int(hi), len(data) - 1) if hi else len(data) - 1
            if lo >= len(data):
                return self.plain(416)
            body, code, crange = data[lo:hi + 1], 206, f"bytes {lo}-{hi}/{len(data)}"
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", etag)
        self.send_header("Accept-Ranges", "bytes")
        if crange:
            self.send_header("Content-Range", crange)
        self.end_headers()
        if mode == "cut" and tries == 0:
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return None
        # Counted before it is sent: a client that has the bytes must see them in /_stats (counted after the
        # write, a stats query right after the client's read could run before this thread got here).
        count(mode, len(body), requests=0)
        self.wfile.write(body)
        return None

    def do_HEAD(self):
        self.plain(405)


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever()
