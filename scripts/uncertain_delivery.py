#!/usr/bin/env python3
"""Uncertain delivery (grant-lifecycle.md "What a client does on uncertain delivery").

For each key: send a submit over a raw socket and close the connection right
after the request is written, before reading any answer (several ways of
closing: FIN, RST, half-close, FIN or RST after a few milliseconds). Then do what the
adapter does: read back the same key (retrying briefly: 404 is allowed, the
server may not have committed), then retry the same key and content. The retry
answers 200 (replay) when the first request committed, else 201; a readback
after it names the same issue; the database holds exactly one issue and one
receipt for the key. The same is done for a few confirms: a dropped confirm is
resolved by reading the grant and confirming again if it is still
awaiting_agent; the grant is confirmed exactly once. The history of every
request (history.py; a dropped one has no answer) must be linearizable
against the per-grant model (linearizability.py).

    scripts/uncertain_delivery.py [--backend sqlite|postgres] [--keys 20] [--confirms 5]

Prints one check per line and, last, `N passed, N failed`; exits 1 on failure.
"""

from __future__ import annotations

import http.client
import random
import socket
import struct
import sys
import time
from collections import Counter
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in scripts/
sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness_lib as h  # noqa: E402
import history as hist  # noqa: E402

CLOSE_MODES = ("fin", "rst", "half-close", "delayed-fin", "delayed-rst")


def send_and_drop(port: int, path: str, token: str, body: bytes, mode: str,
                  call: hist.Call) -> None:
    """Writes the whole request, then drops the connection without reading;
    `call` is recorded without an answer."""
    try:
        _send_and_drop(port, path, token, body, mode)
    except OSError as e:
        call.failed(e)
        raise
    call.failed(ConnectionAbortedError(f"dropped by the harness ({mode})"))


def _send_and_drop(port: int, path: str, token: str, body: bytes, mode: str) -> None:
    head = (f"POST {path} HTTP/1.1\r\nHost: {h.LOOPBACK}:{port}\r\n"
            f"Authorization: token {token}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    s = socket.create_connection((h.LOOPBACK, port), timeout=10)
    try:
        s.sendall(head + body)
        if mode.startswith("delayed"):
            # Somewhere inside the handler's transaction (a few milliseconds).
            time.sleep(random.uniform(0.0, 0.02))
        if mode.endswith("rst"):
            # SO_LINGER with timeout 0: close() sends RST instead of FIN.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif mode == "half-close":
            s.shutdown(socket.SHUT_WR)
    finally:
        s.close()


def main(checks: h.Checks) -> None:
    p = h.common_args(__doc__.split("\n\n")[0])
    p.add_argument("--keys", type=int, default=20, help="request keys to try (default 20)")
    p.add_argument("--confirms", type=int, default=5,
                   help="grants whose confirm is dropped the same way (default 5)")
    p.add_argument("--readback-timeout", type=float, default=1.0,
                   help="seconds to keep reading back a 404 before retrying (default 1)")
    args = p.parse_args()
    h.seed_random(args.seed)
    started = time.monotonic()
    with h.Run(args, args.backend, checks) as run:
        w = h.setup_world(run.binary, run.db, run.workdir, 1)
        bot = w.bots[0]
        history = h.open_history(args, "uncertain-delivery", args.backend)
        bot.history = history
        server = h.Server(run.binary, run.db.url, h.free_port(), run.workdir)
        ok, detail = server.start()
        if not checks.check("server ready", ok, detail):
            return
        port = server.port
        browser = h.Browser(port, history)
        browser.login(w.owner, w.password)
        gid, pdigest = h.create_active_grant(w, port, browser, bot)
        before = h.snapshot_static(run.db)
        path = bot.submit_path(w.owner, w.repo, gid)

        sent: dict[tuple[int, str], str] = {}
        acked: dict[tuple[int, str], h.Ack] = {}
        stats: Counter = Counter()
        for i in range(1, args.keys + 1):
            mode = CLOSE_MODES[(i - 1) % len(CLOSE_MODES)]
            key = h.new_key()
            title, body = h.random_content(f"uncertain-{i}")
            digest = h.content_digest(pdigest, title, body)
            sent[(gid, key)] = digest
            name = f"key {i} ({mode})"
            call = history.begin("submit", gid, bot.submit_args(pdigest, key, title, body),
                                 hist.client_name(bot.login), port)
            send_and_drop(port, path, bot.token, bot.submit_body(pdigest, key, title, body), mode, call)

            # The adapter's first move: read back the same key.
            first = None
            statuses = Counter()
            deadline = time.monotonic() + args.readback_timeout
            while time.monotonic() < deadline:
                r = bot.readback(port, w.owner, w.repo, gid, key)
                statuses[r.status] += 1
                if r.status == 200:
                    first = r.json()["submission"]
                    break
                if r.status != 404:
                    break
                time.sleep(0.05)
            checks.check(f"{name}: readback answers only 200 or 404", set(statuses) <= {200, 404},
                         f"{dict(statuses)}")
            stats["committed before retry" if first else "not committed before retry"] += 1

            # Then the same-key retry, with the same content.
            try:
                r = bot.submit(port, w.owner, w.repo, gid, pdigest, key, title, body)
            except (OSError, http.client.HTTPException) as e:
                checks.check(f"{name}: same-key retry answered", False, f"{type(e).__name__}: {e}")
                continue
            if first is not None:
                ok = (r.status == 200 and r.header("idempotent-replayed") == "true"
                      and int(r.json()["submission"]["issue"]["id"]) == int(first["issue"]["id"]))
                checks.check(f"{name}: retry after a found readback is a 200 replay of that issue",
                             ok, f"{r.status} {r.text[:200]}" if not ok else
                             f"issue {first['issue']['id']}")
            else:
                ok = r.status in (200, 201)
                checks.check(f"{name}: retry after a 404 readback answers 201 (or 200 if the first "
                             f"committed meanwhile)", ok, f"{r.status}" if ok else
                             f"{r.status} {r.text[:200]}")
            if r.status not in (200, 201):
                continue
            stats[f"retry {r.status}"] += 1
            sub = r.json()["submission"]
            acked[(gid, key)] = h.Ack(gid, key, sub["content_digest"], int(sub["issue"]["id"]),
                                      int(sub["issue"]["index"]))

            # A readback after the retry names the same issue.
            rb = bot.readback(port, w.owner, w.repo, gid, key)
            ok = (rb.status == 200 and int(rb.json()["submission"]["issue"]["id"]) == int(sub["issue"]["id"])
                  and rb.json()["submission"]["content_digest"] == digest)
            checks.check(f"{name}: readback after the retry matches it", ok,
                         f"{rb.status} {rb.text[:200]}" if not ok else "")

            # Exactly one issue for the key.
            n_receipts = run.db.scalar(f"SELECT count(*) AS n FROM submissions WHERE grant_id = {gid} "
                                       f"AND request_key = '{key}'")
            n_issues = run.db.scalar(f"SELECT count(*) AS n FROM issues WHERE id IN (SELECT issue_id "
                                     f"FROM submissions WHERE grant_id = {gid} AND request_key = '{key}')")
            checks.check(f"{name}: exactly one receipt and one issue", n_receipts == 1 and n_issues == 1,
                         f"receipts {n_receipts}, issues {n_issues}")

        # The server survived all of it, and the whole database is consistent.
        ready = h.request(port, "GET", "/readyz").status
        checks.check("server still ready after all dropped connections", ready == 200, f"{ready}")
        h.check_submission_invariants(checks, run.db, acked, sent, [gid], before)

        # A lost confirm is resolved by reading the grant, then confirming again if needed:
        # the grant ends awaiting the human, confirmed exactly once.
        for i in range(1, args.confirms + 1):
            mode = CLOSE_MODES[(i - 1) % len(CLOSE_MODES)]
            cgid = browser.prepare_grant(w.owner, w.repo, bot.login, task=f"confirm drop {i}",
                                         summary="uncertain confirm", max_submissions=10)
            cdigest = bot.get_grant(port, w.owner, w.repo, cgid).json()["grant"]["proposal_digest"]
            history.grant(cgid, cdigest, 10)
            call = history.begin("confirm", cgid, {"proposal_digest": cdigest},
                                 hist.client_name(bot.login), port)
            send_and_drop(port, f"/api/v1/repos/{w.owner}/{w.repo}/agent-work-grants/{cgid}/confirm",
                          bot.token, bot.confirm_body(cdigest), mode, call)
            time.sleep(0.05)
            seen = bot.get_grant(port, w.owner, w.repo, cgid).json()["grant"]["state"]
            r = bot.confirm(port, w.owner, w.repo, cgid, cdigest) if seen == "awaiting_agent" else None
            g = bot.get_grant(port, w.owner, w.repo, cgid).json()["grant"]
            confirmed = run.db.scalar(f"SELECT count(*) AS n FROM grant_events WHERE grant_id = {cgid} "
                                      f"AND event = 'confirmed'")
            ok = ((r is None or r.status == 200) and g["state"] == "awaiting_human"
                  and confirmed == 1 and seen in ("awaiting_agent", "awaiting_human"))
            stats[f"confirm first {'committed' if seen == 'awaiting_human' else 'lost'}"] += 1
            checks.check(f"confirm {i} ({mode}): dropped confirm, grant read, re-confirm if needed: "
                         f"confirmed exactly once", ok,
                         f"grant read as {seen}" + (f", re-confirm {r.status}" if r else "")
                         if ok else f"read {seen}, re-confirm {r.status if r else '-'}, now "
                         f"{g['state']}, {confirmed} confirmed events")

        server.stop()
        h.check_server_logs(checks, [server])
        h.check_history(checks, history)
        h.log(f"SUMMARY backend={args.backend} keys={args.keys} {dict(stats)} "
              f"elapsed={time.monotonic() - started:.1f}s")


if __name__ == "__main__":
    h.run_main(main, h.Checks())
