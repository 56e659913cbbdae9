#!/usr/bin/env python3
"""A real HTTP server standing in for kubo's /api/v0/add (kubo itself cannot
be installed offline here). It parses the multipart upload, stores the bytes,
and answers the CID it computes itself: CIDv1, raw codec, sha2-256, base32.

    kubo_standin.py STORE_DIR [--wrong-cid]

Prints "listening on PORT". Each upload is saved as STORE_DIR/<cid> and its
query string appended to STORE_DIR/queries.log. --wrong-cid answers another
(valid-looking) CID, as a misconfigured IPFS node would.
"""
import base64
import email.parser
import email.policy
import hashlib
import http.server
import json
import os
import sys


def cid_of(data: bytes) -> str:
    raw = bytes([0x01, 0x55, 0x12, 0x20]) + hashlib.sha256(data).digest()
    return "b" + base64.b32encode(raw).decode().lower().rstrip("=")


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        path, _, query = self.path.partition("?")
        if path != "/api/v0/add":
            self.send_error(404, "no such endpoint")
            return
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        head = f"Content-Type: {self.headers.get('Content-Type')}\r\n\r\n".encode()
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
        parts = [p for p in message.iter_parts() if p.get_param("name", header="content-disposition") == "file"]
        if len(parts) != 1:
            self.send_error(400, "expected one file part")
            return
        data = parts[0].get_payload(decode=True)
        cid = cid_of(data)
        with open(os.path.join(STORE, cid), "wb") as f:
            f.write(data)
        with open(os.path.join(STORE, "queries.log"), "a") as f:
            f.write(query + "\n")
        if WRONG:
            cid = cid_of(data + b"\n")
        answer = json.dumps({"Name": parts[0].get_filename() or cid, "Hash": cid, "Size": str(len(data))})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(answer.encode() + b"\n")

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    STORE = sys.argv[1]
    WRONG = "--wrong-cid" in sys.argv[2:]
    os.makedirs(STORE, exist_ok=True)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()
