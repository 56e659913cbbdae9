#!/usr/bin/env python3
"""A real HTTP server standing in for Telegram's Bot API and for the
protocol's issue-reporting service, for tests and devnet drills.

    telegram_standin.py STORE_DIR [--port N]

Prints "listening on PORT". Every request it accepts is appended to
STORE_DIR/requests.jsonl as {"path", "body"}. While down it answers 502 with
an HTML page, as a proxy in front of a down API does. Bot API: POST /bot<token>/<method>
(sendMessage in any case) answers a Message like Telegram does. Reporting
service: POST /reportSnapshotIssue and /reportEpochProcessingIssue.

Refused requests (502 while down, 429, 401) go to STORE_DIR/refused.jsonl.
A token containing "invalid" is refused with 401, as Telegram does.

Control (not recorded): POST /control/down makes every other request fail
with 502 until POST /control/up; POST /control/ratelimit?n=N&retry_after=S
answers the next N Bot API calls with 429 and parameters.retry_after = S.
"""
import json
import os
import sys
import threading
import time
import http.server
import urllib.parse

STATE = {"down": False, "limit": 0, "retry_after": 1, "next_id": 1}
LOCK = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    def answer(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        url = urllib.parse.urlparse(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if url.path.startswith("/control/"):
            query = urllib.parse.parse_qs(url.query)
            with LOCK:
                if url.path == "/control/down":
                    STATE["down"] = True
                elif url.path == "/control/up":
                    STATE["down"] = False
                elif url.path == "/control/ratelimit":
                    STATE["limit"] = int(query.get("n", ["1"])[0])
                    STATE["retry_after"] = int(query.get("retry_after", ["1"])[0])
            self.answer(200, {"ok": True})
            return
        with LOCK:
            bot_call = url.path.startswith("/bot")
            refusal = None
            if STATE["down"]:
                refusal = (502, {"ok": False, "error_code": 502, "description": "Bad Gateway"})
            elif bot_call and "invalid" in url.path:
                refusal = (401, {"ok": False, "error_code": 401, "description": "Unauthorized"})
            elif bot_call and STATE["limit"] > 0:
                STATE["limit"] -= 1
                after = STATE["retry_after"]
                refusal = (429, {"ok": False, "error_code": 429,
                                 "description": f"Too Many Requests: retry after {after}",
                                 "parameters": {"retry_after": after}})
            if refusal:
                with open(os.path.join(STORE, "refused.jsonl"), "a") as f:
                    f.write(json.dumps({"path": url.path, "status": refusal[0], "at": time.time()}) + "\n")
                if refusal[0] == 502:
                    # What a proxy in front of a down API answers: a page, not JSON.
                    page = b"<html><head><title>502 Bad Gateway</title></head><body>502 Bad Gateway</body></html>"
                    self.send_response(502)
                    self.send_header("Content-Type", "text/html")
                    self.send_header("Content-Length", str(len(page)))
                    self.end_headers()
                    self.wfile.write(page)
                else:
                    self.answer(*refusal)
                return
            try:
                parsed = json.loads(body or b"{}")
            except ValueError:
                parsed = {"raw": body.decode(errors="replace")}
            with open(os.path.join(STORE, "requests.jsonl"), "a") as f:
                f.write(json.dumps({"path": url.path, "body": parsed}) + "\n")
            message_id = STATE["next_id"]
            STATE["next_id"] += 1
        if bot_call:
            method = url.path.rsplit("/", 1)[-1].lower()
            if method != "sendmessage":
                self.answer(404, {"ok": False, "error_code": 404, "description": "Not Found: method not found"})
                return
            chat_id = parsed.get("chat_id")
            try:
                chat_id = int(chat_id)
            except (TypeError, ValueError):
                self.answer(400, {"ok": False, "error_code": 400, "description": "Bad Request: chat not found"})
                return
            message = {"message_id": message_id, "date": int(time.time()),
                       "chat": {"id": chat_id, "type": "private", "first_name": "operator"},
                       "text": parsed.get("text", "")}
            if parsed.get("message_thread_id") is not None:
                message["message_thread_id"] = parsed["message_thread_id"]
            self.answer(200, {"ok": True, "result": message})
        elif url.path in ("/reportSnapshotIssue", "/reportEpochProcessingIssue"):
            self.answer(200, {"message": "Reported Issue."})
        else:
            self.answer(404, {"detail": "Not Found"})

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    STORE = sys.argv[1]
    port = int(sys.argv[sys.argv.index("--port") + 1]) if "--port" in sys.argv else 0
    os.makedirs(STORE, exist_ok=True)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()
