#!/usr/bin/env python3
"""A real JSON-RPC proxy in front of a chain's RPC that refuses chosen calls,
as a flaky or pruned provider would: every request is forwarded to UPSTREAM,
except an `eth_call` whose data starts with a refused 4-byte selector, which
gets a JSON-RPC error, and any call of a method named `method:NAME` (a
receipt that cannot be read, as a provider behind on its index answers).
With `geth:estimate`, `eth_estimateGas` is asked of the latest block,
whatever block the caller named, as geth estimates (anvil estimates against
its pending block, which sees the caller's own waiting transactions).

    rpc_filter.py STORE_DIR UPSTREAM_URL SELECTOR|method:NAME|geth:estimate [...]

Prints "listening on PORT". Each refused call is counted in STORE_DIR/refused.
"""
import http.server
import json
import os
import sys
import urllib.request

STORE, UPSTREAM = sys.argv[1], sys.argv[2]
METHODS = [s[len("method:"):] for s in sys.argv[3:] if s.startswith("method:")]
GETH_ESTIMATE = "geth:estimate" in sys.argv[3:]
SELECTORS = [s.lower() for s in sys.argv[3:] if not s.startswith(("method:", "geth:"))]


def rewritten(call):
    if GETH_ESTIMATE and isinstance(call, dict) and call.get("method") == "eth_estimateGas":
        params = call.get("params") or [{}]
        return dict(call, params=[params[0], "latest"])
    return call


def refused(call):
    if isinstance(call, dict) and call.get("method") in METHODS:
        return True
    if not isinstance(call, dict) or call.get("method") != "eth_call":
        return False
    params = call.get("params") or [{}]
    data = (params[0].get("data") or params[0].get("input") or "").lower()
    return any(data.startswith(s) for s in SELECTORS)


def answer(call):
    with open(os.path.join(STORE, "refused"), "a") as f:
        f.write(call.get("method", "") + "\n")
    return {"jsonrpc": "2.0", "id": call.get("id"), "error": {"code": -32000, "message": "execution reverted (refused by rpc_filter)"}}


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        request = json.loads(body)
        calls = [rewritten(c) for c in (request if isinstance(request, list) else [request])]
        if GETH_ESTIMATE or any(refused(c) for c in calls):
            replies = [answer(c) if refused(c) else forward(c) for c in calls]
            out = json.dumps(replies if isinstance(request, list) else replies[0]).encode()
        else:
            out = forward_raw(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


def forward_raw(body):
    req = urllib.request.Request(UPSTREAM, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read()


def forward(call):
    return json.loads(forward_raw(json.dumps(call).encode()))


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"listening on {server.server_address[1]}", flush=True)
server.serve_forever()
