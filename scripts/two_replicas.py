#!/usr/bin/env python3
"""Two replicas (quality.md "Reliability harnesses" → Two replicas), PostgreSQL only.

Two `writ serve` processes share one PostgreSQL database. Clients spread over
both race the same request keys (several threads send the same key and content
to both replicas at the same moment) on the same grants, while background bots
submit fresh keys to both replicas on those grants. Then:

- every racing response is 200/201, exactly one is 201, all name the same
  issue; readback from both replicas agrees; the receipt invariants hold;
- CAS races: for several grants, root logged in twice (one browser session per
  replica) posts the approve form with the same state_revision on both at once:
  exactly one 303, the other 409 (or 403), the grant approved exactly once and
  its state_revision advanced by exactly 1;
- the history of every request (start, end, answer; history.py) is
  linearizable against the per-grant model (linearizability.py).

    scripts/two_replicas.py [--rounds 30] [--cas-grants 8]

Prints one check per line and, last, `N passed, N failed`; exits 1 on failure.
"""

from __future__ import annotations

import http.client
import random
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in scripts/
sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness_lib as h  # noqa: E402


def main(checks: h.Checks) -> None:
    p = h.common_args(__doc__.split("\n\n")[0], backends=("postgres",))
    p.add_argument("--rounds", type=int, default=30, help="same-key race rounds (default 30)")
    p.add_argument("--keys-per-round", type=int, default=3, help="keys raced at once (default 3)")
    p.add_argument("--racers", type=int, default=4,
                   help="threads sending each key, alternating replicas (default 4)")
    p.add_argument("--bots", type=int, default=2, help="bots, one grant each (default 2)")
    p.add_argument("--load-threads", type=int, default=4,
                   help="background threads submitting fresh keys to both replicas (default 4)")
    p.add_argument("--cas-grants", type=int, default=8, help="grants for the approve race (default 8)")
    args = p.parse_args()
    h.seed_random(args.seed)
    started = time.monotonic()
    with h.Run(args, "postgres", checks) as run:
        w = h.setup_world(run.binary, run.db, run.workdir, args.bots)
        history = h.open_history(args, "two-replicas", "postgres")
        for bot in w.bots:
            bot.history = history
        servers = [h.Server(run.binary, run.db.url, h.free_port(), run.workdir, name=f"replica{i}")
                   for i in (1, 2)]
        for s in servers:
            ok, detail = s.start()
            if not checks.check(f"replica on port {s.port} ready", ok, detail):
                return
        ports = [s.port for s in servers]
        browsers = [h.Browser(port, history, name=f"root@{i + 1}") for i, port in enumerate(ports)]
        for b in browsers:
            b.login(w.owner, w.password)  # two sessions of root, one per replica
        grants = []
        for i, bot in enumerate(w.bots):
            gid, digest = h.create_active_grant(w, ports[i % 2], browsers[i % 2], bot)
            grants.append((bot, gid, digest))
        grant_ids = [g for _, g, _ in grants]
        h.log(f"replicas on {ports}, active grants {grant_ids}")
        before = h.snapshot_static(run.db)

        lock = threading.Lock()
        sent: dict[tuple[int, str], str] = {}
        acked: dict[tuple[int, str], h.Ack] = {}
        anomalies: list[str] = []
        counts: Counter = Counter()

        def note(msg: str) -> None:
            with lock:
                anomalies.append(msg)
            h.log(f"ANOMALY {msg}")

        def ack_from(r: h.Response, gid: int) -> h.Ack:
            s = r.json()["submission"]
            return h.Ack(gid, s["request_key"], s["content_digest"], int(s["issue"]["id"]),
                         int(s["issue"]["index"]))

        # ---- background load: fresh keys on the shared grants, spread over both replicas
        stop = threading.Event()

        def load(n: int) -> None:
            for i in range(100_000):
                if stop.is_set():
                    return
                bot, gid, digest = grants[(n + i) % len(grants)]
                key = h.new_key()
                title, body = h.random_content(f"load-{n}")
                cd = h.content_digest(digest, title, body)
                with lock:
                    sent[(gid, key)] = cd
                port = ports[(n + i) % 2]
                try:
                    r = bot.submit(port, w.owner, w.repo, gid, digest, key, title, body)
                except (OSError, http.client.HTTPException) as e:
                    note(f"load {key} on {port}: {type(e).__name__}: {e}")
                    return
                if r.status != 201:
                    note(f"load {key} on {port}: {r.status} {r.text[:200]}")
                    return
                with lock:
                    acked[(gid, key)] = ack_from(r, gid)
                    counts["load 201"] += 1

        loaders = [threading.Thread(target=load, args=(n,), daemon=True)
                   for n in range(args.load_threads)]
        for t in loaders:
            t.start()

        # ---- same-key races
        race_results: dict[tuple[int, str], list] = {}
        spans: dict[tuple[int, str], list[tuple[float, float]]] = {}
        n_threads = args.keys_per_round * args.racers
        with ThreadPoolExecutor(max_workers=n_threads) as pool:
            for rnd in range(1, args.rounds + 1):
                barrier = threading.Barrier(n_threads, timeout=30)
                jobs = []
                for k in range(args.keys_per_round):
                    bot, gid, digest = random.choice(grants)
                    key = h.new_key()
                    title, body = h.random_content(f"race-{rnd}-{k}")
                    sent[(gid, key)] = h.content_digest(digest, title, body)
                    race_results[(gid, key)] = []
                    for j in range(args.racers):
                        jobs.append((bot, gid, digest, key, title, body, ports[j % 2]))

                def race(job):
                    bot, gid, digest, key, title, body, port = job
                    barrier.wait()
                    t0 = time.monotonic()
                    try:
                        r = bot.submit(port, w.owner, w.repo, gid, digest, key, title, body)
                    except (OSError, http.client.HTTPException) as e:
                        return (gid, key, port, None, f"{type(e).__name__}: {e}", (t0, time.monotonic()))
                    return (gid, key, port, r, None, (t0, time.monotonic()))

                for gid, key, port, r, err, span in pool.map(race, jobs):
                    race_results[(gid, key)].append((port, r, err))
                    spans.setdefault((gid, key), []).append(span)
        stop.set()
        for t in loaders:
            t.join(timeout=60)
        checks.check("background load threads finished", not any(t.is_alive() for t in loaders),
                     f"{counts['load 201']} fresh submissions (201) across both replicas")
        checks.check("background load saw only 201 answers", not anomalies,
                     "" if not anomalies else f"{anomalies[:5]}")

        not_2xx, not_one_201, split, bad_replay_header = [], [], [], []
        for (gid, key), results in race_results.items():
            statuses = [r.status if r else err for _, r, err in results]
            if any(not r or r.status not in (200, 201) for _, r, _ in results):
                not_2xx.append(f"{key}: {statuses} "
                               + "; ".join(r.text[:150] for _, r, _ in results
                                           if r and r.status not in (200, 201)))
                continue
            if statuses.count(201) != 1:
                not_one_201.append(f"{key}: {statuses}")
            answers = {(int(r.json()["submission"]["issue"]["id"]), r.json()["submission"]["content_digest"])
                       for _, r, _ in results}
            if len(answers) != 1:
                split.append(f"{key}: {answers}")
            if any((r.status == 200) != (r.header("idempotent-replayed") == "true") for _, r, _ in results):
                bad_replay_header.append(key)
            acked[(gid, key)] = ack_from(results[0][1], gid)
        n_keys = len(race_results)
        n_req = sum(len(v) for v in race_results.values())
        # How often all requests of a key were in flight at the same moment (a real race).
        overlapped = sum(1 for v in spans.values() if max(a for a, _ in v) < min(b for _, b in v))
        checks.check("same-key races: every response is 200 or 201", not not_2xx,
                     f"{n_req} requests on {n_keys} keys, all requests of a key in flight together "
                     f"for {overlapped} keys" if not not_2xx
                     else f"{len(not_2xx)} keys, e.g. {not_2xx[:3]}")
        checks.check("same-key races: exactly one 201 per key", not not_one_201,
                     "" if not not_one_201 else f"{len(not_one_201)} keys, e.g. {not_one_201[:3]}")
        checks.check("same-key races: all responses for a key name the same issue and content",
                     not split, "" if not split else f"{split[:3]}")
        checks.check("same-key races: 200 answers carry Idempotent-Replayed: true, 201 do not",
                     not bad_replay_header, "" if not bad_replay_header else f"{bad_replay_header[:3]}")

        # Readback from both replicas agrees with what the clients were told.
        bots_by_grant = {g: b for b, g, _ in grants}

        def read_both(a: h.Ack) -> str | None:
            for port in ports:
                r = bots_by_grant[a.grant_id].readback(port, w.owner, w.repo, a.grant_id, a.key)
                if r.status != 200 or int(r.json()["submission"]["issue"]["id"]) != a.issue_id:
                    return f"{a.key} on {port}: {r.status} {r.text[:150]}"
            return None

        with ThreadPoolExecutor(max_workers=8) as pool:
            bad = [x for x in pool.map(read_both, acked.values()) if x]
        checks.check("readback from both replicas names the acknowledged issue", not bad,
                     f"{len(acked)} keys × 2 replicas" if not bad else f"{len(bad)}: {bad[:3]}")

        h.check_submission_invariants(checks, run.db, acked, sent, grant_ids, before)

        # ---- CAS races: the same approve form posted through both replicas at once
        cas_bad = []
        cas_statuses: Counter = Counter()
        for n in range(args.cas_grants):
            bot = w.bots[n % len(w.bots)]
            gid, _ = h.prepare_and_confirm(w, ports[n % 2], browsers[n % 2], bot)
            forms = [b.approve_form(w.owner, w.repo, gid) for b in browsers]
            rev = int(forms[0]["state_revision"])
            if int(forms[1]["state_revision"]) != rev:
                cas_bad.append(f"grant {gid}: the two pages show revisions {rev} and "
                               f"{forms[1]['state_revision']}")
                continue
            barrier = threading.Barrier(2, timeout=30)

            def post(i: int):
                barrier.wait()
                return browsers[i].post_approve(w.owner, w.repo, gid, forms[i])

            with ThreadPoolExecutor(max_workers=2) as pool:
                rs = list(pool.map(post, [0, 1]))
            statuses = sorted(r.status for r in rs)
            cas_statuses[str(statuses)] += 1
            g = run.db.rows(f"SELECT state, state_revision, approver_id FROM grants WHERE id = {gid}")[0]
            approvals = run.db.scalar(f"SELECT count(*) AS n FROM grant_events WHERE grant_id = {gid} "
                                      f"AND event = 'approved'")
            if statuses not in ([303, 409], [303, 403]):
                cas_bad.append(f"grant {gid}: statuses {statuses}: "
                               + " | ".join(r.text[:150] for r in rs if r.status != 303))
            if g["state"] != "active" or int(g["state_revision"]) != rev + 1 or approvals != 1:
                cas_bad.append(f"grant {gid}: state {g['state']}, revision {rev} → "
                               f"{g['state_revision']}, {approvals} approved events")
        checks.check("CAS races: exactly one approve wins (303 + 409/403), grant approved once, "
                     "revision +1", not cas_bad,
                     f"{args.cas_grants} grants, statuses {dict(cas_statuses)}" if not cas_bad
                     else f"{cas_bad[:4]}")

        for s in servers:
            s.stop()
        h.check_server_logs(checks, servers)
        h.check_history(checks, history)
        h.log(f"SUMMARY backend=postgres replicas={ports} race-keys={n_keys} race-requests={n_req} "
              f"fully-overlapping-keys={overlapped} load-submissions={counts['load 201']} acknowledged={len(acked)} "
              f"cas-grants={args.cas_grants} cas={dict(cas_statuses)} "
              f"elapsed={time.monotonic() - started:.1f}s")


if __name__ == "__main__":
    h.run_main(main, h.Checks())
