#!/usr/bin/env python3
"""Crash harness (quality.md "Reliability harnesses" → Crash).

Concurrent bots submit continuously with fresh request keys; after any error or
connection failure a client retries the SAME key with the same content (as the
adapter would) until it gets 200/201. Meanwhile the driver SIGKILLs the server
at random moments and restarts it, for --cycles cycles. Afterwards, with the
server stopped, the database must satisfy the receipt invariants, every
acknowledged key must read back the issue the client was told, and the history
of every request (history.py; a request cut by a kill has no answer) must be
linearizable against the per-grant model (linearizability.py).

Webhooks ride along: one subscription matches every event, delivered to a
receiver in this process that, cycle by cycle, answers 204, answers 500,
is down (connections refused) or answers only after Writ's 10 s timeout,
with retries after 1-3 s. Once the receiver is up again, every event of
every acknowledged submission (indeed every event) must be delivered at
least once, and its delivery row must say so. On PostgreSQL a second
`writ serve` on the same database delivers too and is SIGKILLed and
restarted every other cycle, so leases are left behind by both; no
delivery may reach the receiver twice within 0.5 s (two processes
attempting it at once; Writ's own retries come at least 0.8 s apart and a
lease left by a killed process runs 60 s).

    scripts/crash_harness.py [--backend sqlite|postgres] [--cycles 20] [--bots 4]

Prints one check per line and, last, `N passed, N failed`; exits 1 on failure.
"""

from __future__ import annotations

import http.client
import json
import random
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in scripts/
sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness_lib as h  # noqa: E402


class Client(threading.Thread):
    """One bot thread on one grant: fresh keys, same-key retries until 200/201."""

    def __init__(self, name: str, w: h.World, bot: h.Bot, gid: int, digest: str, port: int,
                 stop: threading.Event, state: "Shared", max_attempts: int, key_deadline: float):
        super().__init__(name=name, daemon=True)
        self.w, self.bot, self.gid, self.digest, self.port = w, bot, gid, digest, port
        self.stop_flag, self.state = stop, state
        self.max_attempts, self.key_deadline = max_attempts, key_deadline
        self.max_http_errors = 20

    def run(self) -> None:
        try:
            for _ in range(1_000_000):
                if self.stop_flag.is_set() or not self.one_key():
                    return
        except Exception as e:  # noqa: BLE001 - report, never hang the driver
            self.state.note(f"client {self.name} crashed: {type(e).__name__}: {e}")

    def one_key(self) -> bool:
        """Submits one fresh key until acknowledged; False to stop the thread."""
        key = h.new_key()
        title, body = h.random_content(self.name)
        digest = h.content_digest(self.digest, title, body)
        self.state.record_sent((self.gid, key), digest)
        began = time.monotonic()
        http_errors = 0
        for attempt in range(1, self.max_attempts + 1):
            if time.monotonic() - began > self.key_deadline:
                break
            if self.state.abort.is_set():
                return False  # the server could not be restarted: nothing left to test
            try:
                r = self.bot.submit(self.port, self.w.owner, self.w.repo, self.gid, self.digest,
                                    key, title, body, timeout=15)
            except (OSError, http.client.HTTPException) as e:
                self.state.count(f"connection:{type(e).__name__}")
                time.sleep(random.uniform(0.02, 0.1))
                continue
            if r.status in (200, 201):
                sub = r.json()["submission"]
                replayed = r.header("idempotent-replayed") == "true"
                if (r.status == 200) != replayed:
                    self.state.note(f"{key}: status {r.status} with Idempotent-Replayed={replayed}")
                if sub["content_digest"] != digest or sub["request_key"] != key:
                    self.state.note(f"{key}: answer names digest {sub['content_digest']} / key "
                                    f"{sub['request_key']}, sent {digest}")
                self.state.ack(h.Ack(self.gid, key, sub["content_digest"], int(sub["issue"]["id"]),
                                     int(sub["issue"]["index"])), r.status, attempt)
                return True
            # Any HTTP error answer is unexpected in this run: note it, retry the same key.
            code = ""
            try:
                code = r.json().get("code", "")
            except ValueError:
                pass
            self.state.count(f"http:{r.status}:{code}")
            self.state.note(f"{key} attempt {attempt}: HTTP {r.status} {code} {r.text[:200]}")
            if r.status == 409 and code == "request_key_conflict":
                return True  # the same content never conflicts: a bug, noted; next key
            http_errors += 1
            if http_errors >= self.max_http_errors:
                # Writ answers (it is up) but keeps refusing: retrying longer tests nothing.
                self.state.note(f"{key}: gave up after {http_errors} HTTP error answers")
                return False
            time.sleep(random.uniform(0.02, 0.1))
        self.state.note(f"{key}: never acknowledged after {self.max_attempts} attempts / "
                        f"{self.key_deadline}s")
        return False


class Shared:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent: dict[tuple[int, str], str] = {}
        self.acked: dict[tuple[int, str], h.Ack] = {}
        self.outcomes: Counter = Counter()
        self.anomalies: list[str] = []
        self.abort = threading.Event()

    def record_sent(self, k, digest) -> None:
        with self.lock:
            self.sent[k] = digest

    def ack(self, a: h.Ack, status: int, attempt: int) -> None:
        with self.lock:
            self.acked[(a.grant_id, a.key)] = a
            self.outcomes[f"ack:{status}"] += 1
            if attempt > 1:
                self.outcomes[f"ack-after-retry:{status}"] += 1

    def count(self, what: str) -> None:
        with self.lock:
            self.outcomes[what] += 1

    def note(self, anomaly: str) -> None:
        with self.lock:
            self.anomalies.append(anomaly)
            n = len(self.anomalies)
        if n <= 20:
            h.log(f"ANOMALY {anomaly}")
        elif n == 21:
            h.log("ANOMALY ... (further anomalies counted, not logged)")


class Backlogged(ThreadingHTTPServer):
    """http.server's listen backlog is 5: a worker's 16 concurrent attempts
    would overflow it, and each dropped SYN costs a 1 s retransmit."""

    request_queue_size = 128


class Receiver:
    """A webhook receiver on loopback whose behaviour the driver changes:
    `ok` (204), `fail` (500), `slow` (204 after 11 s, past Writ's timeout) or
    `down` (not listening: connections refused). Records every request."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.lock = threading.Lock()
        # (webhook-id, event id, status, arrival time.monotonic())
        self.requests: list[tuple[str, int, int, float]] = []
        self.server: ThreadingHTTPServer | None = None
        self.port = h.free_port()
        self.listen()

    def handler(self):
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_):
                pass

            def do_POST(self):
                arrived = time.monotonic()
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                mode = receiver.mode
                if mode == "slow":
                    time.sleep(11)
                status = 500 if mode == "fail" else 204
                try:
                    event = json.loads(body)["id"]
                except (ValueError, KeyError, TypeError):
                    event = -1
                with receiver.lock:
                    receiver.requests.append((self.headers.get("webhook-id", ""), event, status,
                                              arrived))
                try:
                    self.send_response(status)
                    self.send_header("content-length", "0")
                    self.end_headers()
                except OSError:
                    pass  # Writ gave up waiting (slow)

        return Handler

    def listen(self) -> None:
        self.server = Backlogged((h.LOOPBACK, self.port), self.handler())
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def set(self, mode: str) -> None:
        if mode == "down" and self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        elif mode != "down" and self.server is None:
            self.listen()
        self.mode = mode

    def delivered(self) -> dict[str, int]:
        """webhook-id -> 2xx answers given."""
        with self.lock:
            out: Counter = Counter()
            for wid, _, status, _ in self.requests:
                if 200 <= status < 300:
                    out[wid] += 1
            return dict(out)

    def overlaps(self, within: float) -> list[tuple[str, float]]:
        """(webhook-id, gap) for every two arrivals of one delivery less than
        `within` seconds apart."""
        with self.lock:
            arrivals: dict[str, list[float]] = {}
            for wid, _, _, at in self.requests:
                arrivals.setdefault(wid, []).append(at)
        out = []
        for wid, times in arrivals.items():
            times.sort()
            out += [(wid, b - a) for a, b in zip(times, times[1:]) if b - a < within]
        return out


def check_seals(checks: h.Checks, run) -> None:
    """The seals made while servers were killed (every second, by each
    process) hold: each record sealed exactly once, in seals that neither
    overlap nor leave gaps, and `writ audit verify` passes."""
    sealed_before = int(run.db.scalar("SELECT COALESCE(SUM(record_count), 0) FROM audit_seals"))
    h.writ_cli(run.binary, run.db.url, "audit", "seal")
    records = int(run.db.scalar("SELECT count(*) FROM tool_calls"))
    seals = run.db.rows("SELECT seq, first_position, record_count, call_ids FROM audit_seals "
                        "ORDER BY seq")
    seen, position, gaps = [], 1, []
    for row in seals:
        if int(row["first_position"]) != position:
            gaps.append(int(row["seq"]))
        position += int(row["record_count"])
        seen += json.loads(row["call_ids"])
    h.log(f"SEALS {len(seals)} seals, {sealed_before} records sealed while the servers ran, "
          f"{records} records in all")
    checks.check("seals made under SIGKILL cover every record exactly once, in order",
                 len(seen) == len(set(seen)) == records and not gaps,
                 f"{len(seen)} sealed ({len(set(seen))} distinct) of {records}; gaps at {gaps}")
    try:
        verified = h.writ_cli(run.binary, run.db.url, "audit", "verify")
        checks.check("writ audit verify passes", verified.startswith("ok"), verified)
    except RuntimeError as e:
        checks.check("writ audit verify passes", False, str(e))


def main(checks: h.Checks) -> None:
    p = h.common_args(__doc__.split("\n\n")[0])
    p.add_argument("--cycles", type=int, default=20, help="kill/restart cycles (default 20)")
    p.add_argument("--bots", type=int, default=4, help="bot accounts, one grant each (default 4)")
    p.add_argument("--threads-per-bot", type=int, default=2,
                   help="client threads per bot, sharing its grant (default 2)")
    p.add_argument("--min-interval", type=float, default=0.3, help="seconds before a kill, min")
    p.add_argument("--max-interval", type=float, default=1.5, help="seconds before a kill, max")
    p.add_argument("--max-down", type=float, default=0.3, help="seconds the server stays down, max")
    args = p.parse_args()
    h.seed_random(args.seed)
    started = time.monotonic()
    with h.Run(args, args.backend, checks) as run:
        w = h.setup_world(run.binary, run.db, run.workdir, args.bots)
        history = h.open_history(args, "crash", args.backend)
        for bot in w.bots:
            bot.history = history
        config = run.workdir / "writ.toml"
        config.write_text("[webhooks]\nallow_private_targets = true\nresolver = \"static\"\n"
                          "retry_schedule_seconds = [1, 2, 3]\ngive_up_after_seconds = 3600\n"
                          "[audit]\nseal_interval_seconds = 1\n")
        server = h.Server(run.binary, run.db.url, h.free_port(), run.workdir, config=config)
        ok, detail = server.start()
        if not checks.check("server ready at first start", ok, detail):
            return
        browser = h.Browser(server.port, history)
        browser.login(w.owner, w.password)
        grants = [(bot, *h.create_active_grant(w, server.port, browser, bot)) for bot in w.bots]
        grant_ids = [g for _, g, _ in grants]
        h.log(f"active grants {grant_ids}")
        before = h.snapshot_static(run.db)

        receiver = Receiver()
        hook = json.loads(h.writ_cli(run.binary, run.db.url, "--config", str(config), "admin",
                                     "webhook", "create", "--url",
                                     f"http://{h.LOOPBACK}:{receiver.port}/hook",
                                     "--description", "crash harness"))
        first_event = int(run.db.scalar("SELECT COALESCE(MAX(id), 0) FROM events")) + 1
        h.log(f"webhook subscription {hook['id']} to port {receiver.port}")
        # PostgreSQL: a second process delivers from the same outbox.
        replica = None
        if args.backend == "postgres":
            replica = h.Server(run.binary, run.db.url, h.free_port(), run.workdir,
                               name="replica", config=config)
            ok, detail = replica.start()
            if not checks.check("the delivering replica is ready", ok, detail):
                return

        state = Shared()
        stop = threading.Event()
        clients = [Client(f"{bot.login}-t{t}", w, bot, gid, digest, server.port, stop, state,
                          max_attempts=3000, key_deadline=180.0)
                   for bot, gid, digest in grants for t in range(args.threads_per_bot)]
        for c in clients:
            c.start()

        ready_times = []
        acked_before = 0
        modes = Counter()
        for cycle in range(1, args.cycles + 1):
            mode = random.choice(["ok", "ok", "fail", "down", "slow"])
            receiver.set(mode)
            modes[mode] += 1
            time.sleep(random.uniform(args.min_interval, args.max_interval))
            server.kill()
            if replica is not None and cycle % 2 == 0:
                replica.kill()
            time.sleep(random.uniform(0.0, args.max_down))
            if replica is not None and not replica.alive():
                ok, detail = replica.start()
                checks.check(f"cycle {cycle}: replica ready after SIGKILL and restart", ok, detail)
            ok, detail = server.start()
            ready_times.append(detail)
            checks.check(f"cycle {cycle}: server ready after SIGKILL and restart", ok,
                         f"{detail}; {len(state.acked)} acknowledged so far "
                         f"(+{len(state.acked) - acked_before} this cycle)")
            acked_before = len(state.acked)
            if not ok:
                state.abort.set()
                break
        # Let the clients run on the last restart, then finish their in-flight key.
        time.sleep(1.0)
        stop.set()
        deadline = time.monotonic() + 240
        for c in clients:
            c.join(timeout=max(0.0, deadline - time.monotonic()))
        hung = [c.name for c in clients if c.is_alive()]
        checks.check("every client finished its last key (no hang)", not hung,
                     f"{len(clients)} clients" if not hung else f"still running: {hung}")

        acked = dict(state.acked)
        sent = dict(state.sent)
        unacked = [k for k in sent if k not in acked]
        checks.check("every key sent was eventually acknowledged (same-key retries)", not unacked,
                     f"{len(sent)} keys" if not unacked else f"{len(unacked)} never acknowledged")
        checks.check("clients saw only 200/201 or connection failures (no HTTP error, no "
                     "conflict on retry)", not state.anomalies,
                     "" if not state.anomalies else f"{len(state.anomalies)}: {state.anomalies[:5]}")

        # Read back every acknowledged key on the last server.
        def read(a: h.Ack) -> str | None:
            bot = next(b for b, g, _ in grants if g == a.grant_id)
            for _ in range(5):
                try:
                    r = bot.readback(server.port, w.owner, w.repo, a.grant_id, a.key)
                    break
                except (OSError, http.client.HTTPException) as e:
                    last = e
                    time.sleep(0.2)
            else:
                return f"{a.key}: {last}"
            if r.status != 200:
                return f"{a.key}: readback {r.status}"
            s = r.json()["submission"]
            if (int(s["issue"]["id"]) != a.issue_id or s["content_digest"] != a.content_digest
                    or s["status"] != "submitted"):
                return f"{a.key}: readback issue {s['issue']['id']} ({s['status']}), told {a.issue_id}"
            return None

        if server.alive():
            with ThreadPoolExecutor(max_workers=8) as pool:
                bad = [x for x in pool.map(read, acked.values()) if x]
            checks.check("readback of every acknowledged key names the issue the client was told",
                         not bad, f"{len(acked)} read back" if not bad else f"{len(bad)}: {bad[:3]}")
        else:
            checks.check("readback of every acknowledged key", False, "server not running")

        # The receiver answers again: the outbox drains.
        receiver.set("ok")
        drained_in = None
        began = time.monotonic()
        while time.monotonic() - began < 180:
            pending = run.db.scalar("SELECT COUNT(*) FROM webhook_deliveries WHERE status <> 'delivered'")
            if int(pending) == 0:
                drained_in = time.monotonic() - began
                break
            time.sleep(0.5)
        checks.check("every webhook delivery is delivered once the receiver is up",
                     drained_in is not None,
                     f"drained in {drained_in:.1f}s" if drained_in is not None else
                     f"{pending} deliveries not delivered after 180 s")
        events = run.db.rows(f"SELECT id, type, data FROM events WHERE id >= {first_event}")
        rows = {r["event_id"]: r for r in run.db.rows(
            f"SELECT id, event_id, status, attempts FROM webhook_deliveries "
            f"WHERE subscription_id = {hook['id']}")}
        missing = [e["id"] for e in events if e["id"] not in rows]
        checks.check("every event committed since the subscription has its delivery row",
                     not missing, f"{len(events)} events" if not missing else f"missing {missing[:10]}")
        got = receiver.delivered()
        acked_keys = {k for (_, k) in acked}
        created = [e for e in events if e["type"] == "submission.created"
                   and json.loads(e["data"])["request_key"] in acked_keys]
        unseen = [e["id"] for e in created
                  if e["id"] in rows and got.get(f"msg_writ_{rows[e['id']]['id']}", 0) == 0]
        checks.check("the receiver got every acknowledged submission's event (2xx at least once)",
                     len(created) == len(acked_keys) and not unseen,
                     f"{len(created)} events of {len(acked_keys)} acknowledged keys"
                     + (f"; never received: {unseen[:10]}" if unseen else ""))
        overlapping = receiver.overlaps(0.5)
        checks.check("no delivery reached the receiver twice within 0.5 s (one process at a "
                     "time)", not overlapping,
                     f"{len(receiver.requests)} requests, "
                     f"{2 if replica is not None else 1} delivering processes"
                     if not overlapping else f"{len(overlapping)}: {overlapping[:5]}")
        attempts = sum(int(r["attempts"]) for r in rows.values())
        duplicates = sum(n - 1 for n in got.values() if n > 1)
        h.log(f"WEBHOOKS events={len(events)} deliveries={len(rows)} attempts={attempts} "
              f"requests={len(receiver.requests)} delivered-ids={len(got)} "
              f"duplicates={duplicates} receiver-modes={dict(modes)}")

        rc = server.stop()
        checks.check("server stops on SIGTERM", rc is not None and server.proc.returncode is not None,
                     f"exit status {rc}")
        if replica is not None:
            rc = replica.stop()
            checks.check("the replica stops on SIGTERM", rc is not None, f"exit status {rc}")
        h.check_submission_invariants(checks, run.db, acked, sent, grant_ids, before)
        check_seals(checks, run)
        h.check_server_logs(checks, [server] + ([replica] if replica is not None else []))
        h.check_history(checks, history)

        o = state.outcomes
        h.log(f"SUMMARY backend={args.backend} cycles={args.cycles} kills={server.kills} "
              f"replica-kills={replica.kills if replica is not None else 0} "
              f"clients={len(clients)} sent={len(sent)} acknowledged={len(acked)} "
              f"new(201)={o['ack:201']} replayed(200)={o['ack:200']} "
              f"acked-after-retry={o['ack-after-retry:201'] + o['ack-after-retry:200']} "
              f"connection-failures={sum(v for k, v in o.items() if k.startswith('connection:'))} "
              f"http-errors={sum(v for k, v in o.items() if k.startswith('http:'))} "
              f"elapsed={time.monotonic() - started:.1f}s")
        h.log(f"outcomes {dict(o)}")


if __name__ == "__main__":
    h.run_main(main, h.Checks())
