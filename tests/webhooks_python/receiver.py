"""A webhook receiver on loopback for Writ's tests.

Listens on 127.0.0.1 (a free port, printed as "PORT <n>" on stdout), checks
every request's Standard Webhooks signature with the `standardwebhooks`
package against each secret in --secrets (a file, one secret per line, read
at every request, so a test can write it once Writ has made the secret), and
writes one JSON line per request to --log: the headers that matter, the body,
the indexes of the secrets that verified it, and the status it answered.

It answers --fail-first N requests with 500, then 2xx (--status). With
--slow SECONDS it sleeps that long before answering (to make Writ time out).
With --tls-cert and --tls-key it speaks HTTPS.
"""

import argparse
import json
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--secrets", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--fail-first", type=int, default=0)
    parser.add_argument("--status", type=int, default=204)
    parser.add_argument("--slow", type=float, default=0.0)
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    args = parser.parse_args()
    lock = threading.Lock()
    seen = {"n": 0}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_):
            pass

        def do_POST(self):
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            verified_by = []
            try:
                with open(args.secrets) as f:
                    secrets = [line.strip() for line in f if line.strip()]
            except FileNotFoundError:
                secrets = []
            for i, secret in enumerate(secrets):
                try:
                    Webhook(secret).verify(body, headers)
                    verified_by.append(i)
                except Exception:
                    pass
            with lock:
                seen["n"] += 1
                n = seen["n"]
            status = 500 if n <= args.fail_first else args.status
            if args.slow:
                time.sleep(args.slow)
            record = {
                "n": n,
                "path": self.path,
                "webhook_id": headers.get("webhook-id"),
                "webhook_timestamp": headers.get("webhook-timestamp"),
                "webhook_signature": headers.get("webhook-signature"),
                "content_type": headers.get("content-type"),
                "user_agent": headers.get("user-agent"),
                "verified_by": verified_by,
                "body": json.loads(body) if body else None,
                "answered": status,
            }
            with lock, open(args.log, "a") as log:
                log.write(json.dumps(record) + "\n")
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

    # http.server's listen backlog is 5; Writ attempts 16 deliveries at once.
    ThreadingHTTPServer.request_queue_size = 128
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if args.tls_cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls_cert, args.tls_key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    print(f"PORT {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()


if __name__ == "__main__":
    sys.exit(main())
