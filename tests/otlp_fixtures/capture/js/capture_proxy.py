#!/usr/bin/env python3
"""OTLP/HTTP capture proxy.

POST /cap/<name>/v1/traces: saves the body as captures/<name>/NNN.json|.pb, forwards
it to keelwave ($KW) and relays the answer.
POST /save/<name>/v1/traces: saves the body only, answers an empty export response.
"""

import os
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KW = os.environ.get("KW", "http://127.0.0.1:18931")
ROOT = os.environ.get("CAPTURE_DIR", "captures")
LOCK = threading.Lock()
SEQ = {}


class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        parts = self.path.strip("/").split("/")
        mode, name = parts[0], parts[1]
        if "chunked" in self.headers.get("transfer-encoding", ""):
            body = b""
            while True:
                n = int(self.rfile.readline().strip().split(b";")[0], 16)
                if n == 0:
                    self.rfile.readline()
                    break
                body += self.rfile.read(n)
                self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
        ct = self.headers.get("content-type", "")
        ext = "json" if "json" in ct else "pb"
        d = os.path.join(ROOT, name)
        os.makedirs(d, exist_ok=True)
        with LOCK:
            n = SEQ.get(name)
            if n is None:
                n = len([f for f in os.listdir(d) if f[:3].isdigit()])
            SEQ[name] = n + 1
        if self.headers.get("content-encoding"):
            ext += "." + self.headers["content-encoding"]
        fn = os.path.join(d, f"{n:03d}.{ext}")
        with open(fn, "wb") as out_file:
            out_file.write(body)
        if mode == "save":
            out = b"{}" if ext.startswith("json") else b""
            self.send_response(200)
            self.send_header("content-type", ct)
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            return
        hdrs = {
            k: v
            for k, v in self.headers.items()
            if k.lower() in ("authorization", "content-type", "content-encoding")
        }
        req = urllib.request.Request(KW + "/v1/traces", data=body, headers=hdrs, method="POST")
        try:
            r = urllib.request.urlopen(req, timeout=60)
            code, rb, rct = r.status, r.read(), r.headers.get("content-type", ct)
        except urllib.error.HTTPError as e:
            code, rb, rct = e.code, e.read(), e.headers.get("content-type", ct)
        with open(os.path.join(d, "responses.log"), "a") as f:
            f.write(f"{os.path.basename(fn)} {code} {rb[:300]!r}\n")
        self.send_response(code)
        self.send_header("content-type", rct)
        self.send_header("content-length", str(len(rb)))
        self.end_headers()
        self.wfile.write(rb)


if __name__ == "__main__":
    ThreadingHTTPServer(
        ("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 18999), H
    ).serve_forever()
