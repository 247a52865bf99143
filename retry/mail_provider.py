"""A mail provider's HTTP API that honours the Idempotency-Key header, as a payment or messaging API does.

    python mail_provider.py --port PORT

It stands for the API an e-mail tool's effect lives in (mail_server.py's `send_email`
with `--provider`). What it does with the header follows the IETF HTTPAPI draft
"The Idempotency-Key HTTP Header Field":

    POST /messages {"to", "subject", "body"}     sends one e-mail; 201 and {"id": n}
      with an Idempotency-Key seen before:
        the same body, the first one answered    no e-mail; that first answer again
        the same body, the first one still sending  409 Conflict, nothing sent
        another body                             422 Unprocessable Content, nothing sent
      with no Idempotency-Key                    sends every time
    GET /messages                                every e-mail sent: {"sent": n, "messages": [...]}

The keys are kept for as long as the process runs. Every log line goes to stderr.
"""

import argparse
import hashlib
import json
import logging
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger("mail_provider")

messages: list[dict] = []  # every e-mail sent, in order: the ground truth
answered: dict[str, tuple[str, tuple[int, dict] | None]] = {}  # key -> (the body's digest, its answer; None: sending)
lock = threading.Lock()


def digest(body: bytes) -> str:
    """What makes two requests under one key the same request: their bodies, byte for byte."""
    return hashlib.sha256(body).hexdigest()


def send(message: dict) -> tuple[int, dict]:
    """Send one e-mail: here, keep it."""
    with lock:
        messages.append(message)
        return 201, {"id": len(messages)}


def under_key(key: str, body: bytes, message: dict) -> tuple[int, dict]:
    """The draft's rules for a request carrying an Idempotency-Key."""
    with lock:
        seen = answered.get(key)
        if seen is None:
            answered[key] = (digest(body), None)  # claimed: a concurrent repeat is a 409
        elif seen[0] != digest(body):
            return 422, {"error": "this Idempotency-Key was used with another request"}
        elif seen[1] is None:
            return 409, {"error": "a request with this Idempotency-Key is still being processed"}
        else:
            log.info("replayed: key=%s", key)
            return seen[1]
    answer = send(message)
    with lock:
        answered[key] = (digest(body), answer)
    return answer


class Handler(BaseHTTPRequestHandler):
    """POST /messages and GET /messages; nothing else."""

    def do_POST(self) -> None:
        if self.path != "/messages":
            return self.reply(404, {"error": "not found"})
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        try:
            message = json.loads(body)
        except ValueError:
            return self.reply(400, {"error": "the body is not JSON"})
        key = self.headers.get("Idempotency-Key")
        self.reply(*(send(message) if key is None else under_key(key, body, message)))

    def do_GET(self) -> None:
        if self.path != "/messages":
            return self.reply(404, {"error": "not found"})
        with lock:
            self.reply(200, {"sent": len(messages), "messages": list(messages)})

    def reply(self, status: int, answer: dict) -> None:
        text = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    def log_message(self, format: str, *args: object) -> None:
        log.debug(format, *args)


def main() -> None:
    """Serve on 127.0.0.1 until killed; print the URL once listening."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="on 127.0.0.1 (default: any free port)")
    port = parser.parse_args().port
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(name)s: %(message)s")
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"http://127.0.0.1:{server.server_address[1]}/messages", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
