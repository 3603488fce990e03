#!/usr/bin/env python3
"""Race harness: concurrent clients on the same grants, every request recorded
and the history checked for linearizability against the per-grant model.

PostgreSQL: two `writ serve` replicas on one database (--replicas 2); SQLite:
one process. Each grant lives through one episode, several episodes at once:

1. confirm race: the bot's client threads read and confirm at the same moment
   (now and then with a digest of no proposal) while a human opens the page
   and, in some episodes, posts withdraw with the revision it displayed;
2. approve race: two browser sessions of root (on different replicas when
   there are two) open the page and post approve, or one approve and one
   withdraw, with the same displayed state_revision at the same moment;
   sometimes one form is posted twice at once (a double click); meanwhile
   the bot confirms again, submits and reads;
3. submit storm, in rounds started together: new request keys, the same new
   key from every thread at once (on both replicas), replays and conflicting
   contents of acknowledged keys, readbacks (also of unknown keys), reads,
   with max_submissions small enough to be reached; a human posts withdraw
   in the middle of some episodes, or a form left open since step 2;
4. afterwards every acknowledged key is replayed and read back, concurrently.

Checks: the history (history.py) is linearizable (linearizability.py); the
workload really raced (same-grant operations in flight together, same-key
submits in flight together, approve/withdraw forms of one revision posted
together); the receipt invariants of harness_lib hold; no internal error in
the server logs.

    scripts/race_harness.py [--backend sqlite|postgres] [--grants 12] [--rounds 12]

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
import linearizability as lin  # noqa: E402

OTHER_DIGEST = "0" * 64  # well-formed, the digest of no proposal
NETWORK_ERRORS = (OSError, http.client.HTTPException)


class Episode:
    """One grant, its bot's client threads and root's browser sessions."""

    def __init__(self, n: int, w: h.World, bot: h.Bot, browsers: list[h.Browser], ports: list[int],
                 args, shared: "Shared") -> None:
        self.n, self.w, self.bot, self.browsers, self.ports = n, w, bot, browsers, ports
        self.args, self.shared = args, shared
        self.rng = random.Random(random.getrandbits(64))
        self.max_submissions = self.rng.randint(3, 12)
        self.gid = 0
        self.digest = ""
        self.acked: dict[str, tuple[str, str]] = {}   # key -> (title, body)
        self.lock = threading.Lock()

    # -- helpers -----------------------------------------------------------------

    def port(self, i: int) -> int:
        return self.ports[i % len(self.ports)]

    def together(self, jobs: list) -> list:
        """Runs the callables at the same moment (a barrier), one thread each."""
        barrier = threading.Barrier(len(jobs), timeout=60)

        def run(job):
            barrier.wait()
            try:
                return job()
            except NETWORK_ERRORS as e:
                self.shared.count(f"no answer: {type(e).__name__}")
                return None

        with ThreadPoolExecutor(max_workers=len(jobs),
                                thread_name_prefix=f"g{self.gid}") as pool:
            return list(pool.map(run, jobs))

    def submit(self, i: int, key: str, title: str, body: str):
        self.shared.note_sent(self, key, title, body)
        r = self.bot.submit(self.port(i), self.w.owner, self.w.repo, self.gid, self.digest, key,
                            title, body)
        self.shared.note_submit(self, key, title, body, r)
        return r

    def confirm(self, i: int, digest: str | None = None):
        return self.bot.confirm(self.port(i), self.w.owner, self.w.repo, self.gid, digest or self.digest)

    def read(self, i: int):
        return self.bot.get_grant(self.port(i), self.w.owner, self.w.repo, self.gid)

    def readback(self, i: int, key: str):
        return self.bot.readback(self.port(i), self.w.owner, self.w.repo, self.gid, key)

    def post(self, b: h.Browser, form: str, fields: dict | None):
        if fields is None:
            return None
        return b.post_grant_form(self.w.owner, self.w.repo, self.gid, form, fields)

    def forms(self, b: h.Browser) -> dict:
        try:
            return b.open_grant(self.w.owner, self.w.repo, self.gid)[1]
        except NETWORK_ERRORS:
            return {}

    # -- the episode -------------------------------------------------------------

    def run(self) -> None:
        a, rng = self.args, self.rng
        clients = a.clients
        human0, human1 = self.browsers[0], self.browsers[-1]
        self.gid = human0.prepare_grant(self.w.owner, self.w.repo, self.bot.login,
                                        task=f"race episode {self.n}", summary="race harness",
                                        max_submissions=self.max_submissions)
        self.digest = self.read(0).json()["grant"]["proposal_digest"]
        self.shared.history.grant(self.gid, self.digest, self.max_submissions)
        fate = rng.random()

        # 1. confirm race (and, in some episodes, an early withdraw racing it)
        early = self.forms(human1) if fate < 0.1 else {}
        offered = [OTHER_DIGEST if rng.random() < 0.1 else None for _ in range(clients)]
        jobs = [lambda i=i: self.confirm(i, offered[i]) for i in range(clients)]
        jobs += [lambda i=i: self.read(i) for i in range(2)]
        jobs.append(lambda: self.forms(human0))
        if "withdraw" in early:
            jobs.append(lambda: self.post(human1, "withdraw", early["withdraw"]))
        self.together(jobs)
        self.confirm(0)  # settle: awaiting_human unless withdrawn

        # 2. approve race: two sessions, one displayed revision
        f0, f1 = self.forms(human0), self.forms(human1)
        left_open = dict(f1)  # posted later, stale, in some episodes
        jobs = [lambda: self.post(human0, "approve", f0.get("approve"))]
        roll = rng.random()
        if roll < 0.2:
            jobs.append(lambda: self.post(human1, "withdraw", f1.get("withdraw")))
        elif roll < 0.9:
            jobs.append(lambda: self.post(human1, "approve", f1.get("approve")))
        if rng.random() < 0.2:  # a double click: the same nonce twice
            jobs.append(lambda: self.post(human0, "approve", f0.get("approve")))
        jobs += [lambda i=i: self.confirm(i) for i in range(clients)]
        jobs.append(lambda: self.submit(0, h.new_key(), *h.random_content(f"early-{self.n}")))
        jobs.append(lambda: self.read(1))
        self.together(jobs)

        # 3. submit storm
        withdraw_round = rng.randrange(a.rounds) if fate > 0.5 else -1
        stale_round = rng.randrange(a.rounds) if rng.random() < 0.3 else -1
        for rnd in range(a.rounds):
            hot = rng.random() < 0.3
            hot_key, hot_content = h.new_key(), h.random_content(f"hot-{self.n}-{rnd}")
            jobs = []
            for i in range(clients):
                if hot:
                    jobs.append(lambda i=i: self.submit(i, hot_key, *hot_content))
                else:
                    jobs.append(self.random_call(i))
            if rnd == withdraw_round:
                wf = self.forms(human1).get("withdraw")
                jobs.append(lambda wf=wf: self.post(human1, "withdraw", wf))
            if rnd == stale_round:
                form = rng.choice(["approve", "withdraw"])
                jobs.append(lambda form=form: self.post(human1, form, left_open.get(form)))
            if rng.random() < 0.3:
                jobs.append(lambda: self.forms(human0))
            self.together(jobs)

        # 4. every acknowledged key replayed and read back, concurrently
        with self.lock:
            keys = list(self.acked.items())
        jobs = []
        for n, (key, (title, body)) in enumerate(keys):
            jobs.append(lambda n=n, key=key, title=title, body=body: self.submit(n, key, title, body))
            jobs.append(lambda n=n, key=key: self.readback(n + 1, key))
        jobs.append(lambda: self.read(0))
        self.together(jobs)
        self.forms(human0)

    def random_call(self, i: int):
        rng = self.rng
        with self.lock:
            keys = list(self.acked.items())
        roll = rng.random()
        if roll < 0.45 or not keys:
            key, (title, body) = h.new_key(), h.random_content(f"new-{self.n}")
            return lambda: self.submit(i, key, title, body)
        key, (title, body) = rng.choice(keys)
        if roll < 0.70:
            return lambda: self.submit(i, key, title, body)
        if roll < 0.75:
            return lambda: self.submit(i, key, title + " (changed)", body)
        if roll < 0.85:
            return lambda: self.readback(i, key)
        if roll < 0.90:
            return lambda: self.readback(i, h.new_key())
        return lambda: self.read(i)


class Shared:
    """What all episodes' threads write: acknowledged keys, sent contents, counts."""

    def __init__(self, history) -> None:
        self.history = history
        self.lock = threading.Lock()
        self.sent: dict[tuple[int, str], str] = {}
        self.acked: dict[tuple[int, str], h.Ack] = {}
        self.counts: Counter = Counter()
        self.anomalies: list[str] = []

    def count(self, what: str) -> None:
        with self.lock:
            self.counts[what] += 1

    def note_sent(self, ep: Episode, key: str, title: str, body: str) -> None:
        """The first content sent under a key (a conflicting one is only ever
        sent for a key already acknowledged)."""
        with self.lock:
            self.sent.setdefault((ep.gid, key), h.content_digest(ep.digest, title, body))

    def note_submit(self, ep: Episode, key: str, title: str, body: str, r: h.Response) -> None:
        cd = h.content_digest(ep.digest, title, body)
        with self.lock:
            self.counts[f"submit {r.status}"] += 1
            if r.status in (200, 201):
                sub = r.json()["submission"]
                self.acked[(ep.gid, key)] = h.Ack(ep.gid, key, sub["content_digest"],
                                                  int(sub["issue"]["id"]), int(sub["issue"]["index"]))
                with ep.lock:
                    if sub["content_digest"] == cd:
                        ep.acked.setdefault(key, (title, body))
            elif r.status >= 500:
                self.anomalies.append(f"grant {ep.gid} key {key}: {r.status} {r.text[:200]}")


def overlaps(ops: list[lin.Op]) -> Counter:
    """How much the workload raced: pairs of same-grant operations in flight together."""
    c: Counter = Counter()
    by_grant: dict[int, list[lin.Op]] = {}
    for o in ops:
        if o.end is not None:
            by_grant.setdefault(o.grant, []).append(o)
    for gops in by_grant.values():
        gops.sort(key=lambda o: o.start)
        for i, a in enumerate(gops):
            for b in gops[i + 1:]:
                if b.start >= a.end:
                    break
                c["same-grant pairs"] += 1
                kinds = {a.kind, b.kind}
                if a.kind == b.kind == "submit" and a.args["request_key"] == b.args["request_key"]:
                    c["same-key submit pairs"] += 1
                if kinds <= {"approve", "withdraw"} and \
                        a.args["state_revision"] == b.args["state_revision"]:
                    c["form pairs of one revision"] += 1
                if kinds == {"confirm"}:
                    c["confirm pairs"] += 1
                if "submit" in kinds and kinds & {"approve", "withdraw"}:
                    c["submit/form pairs"] += 1
    return c


def main(checks: h.Checks) -> None:
    p = h.common_args(__doc__.split("\n\n")[0])
    p.add_argument("--replicas", type=int, default=None,
                   help="writ serve processes on the database (default: 2 on PostgreSQL, 1 on SQLite)")
    p.add_argument("--grants", type=int, default=12, help="grants, one episode each (default 12)")
    p.add_argument("--parallel", type=int, default=2, help="episodes at once (default 2)")
    p.add_argument("--clients", type=int, default=4, help="client threads of the bot per grant (default 4)")
    p.add_argument("--rounds", type=int, default=12, help="submit-storm rounds per episode (default 12)")
    p.add_argument("--bots", type=int, default=2, help="bot accounts (default 2)")
    args = p.parse_args()
    h.seed_random(args.seed)
    replicas = args.replicas or (2 if args.backend == "postgres" else 1)
    if args.backend == "sqlite" and replicas != 1:
        p.error("SQLite is served by one process: --replicas 1")
    started = time.monotonic()
    with h.Run(args, args.backend, checks) as run:
        w = h.setup_world(run.binary, run.db, run.workdir, args.bots)
        history = h.open_history(args, "race", args.backend)
        for bot in w.bots:
            bot.history = history
        servers = [h.Server(run.binary, run.db.url, h.free_port(), run.workdir, name=f"replica{i + 1}")
                   for i in range(replicas)]
        for s in servers:
            ok, detail = s.start()
            if not checks.check(f"server on port {s.port} ready", ok, detail):
                return
        ports = [s.port for s in servers]
        shared = Shared(history)
        lanes = []
        for lane in range(args.parallel):
            browsers = []
            for j in range(2):  # two sessions of root, on different replicas when there are two
                b = h.Browser(ports[j % len(ports)], history, name=f"root-{lane}{'ab'[j]}")
                b.login(w.owner, w.password)
                browsers.append(b)
            lanes.append(browsers)
        episodes = [Episode(n, w, w.bots[n % len(w.bots)], lanes[n % args.parallel],
                            ports[n % len(ports):] + ports[:n % len(ports)], args, shared)
                    for n in range(args.grants)]
        errors: list[str] = []

        def run_lane(lane: int) -> None:
            for ep in episodes[lane::args.parallel]:
                try:
                    ep.run()
                except Exception as e:  # noqa: BLE001 - reported as a failed check
                    errors.append(f"episode {ep.n} (grant {ep.gid}): {type(e).__name__}: {e}")
                    h.log(f"episode {ep.n} failed: {type(e).__name__}: {e}")

        threads = [threading.Thread(target=run_lane, args=(lane,), name=f"lane{lane}")
                   for lane in range(args.parallel)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        checks.check("every episode ran to its end", not errors,
                     f"{args.grants} grants" if not errors else f"{errors[:3]}")
        checks.check("no submit answered 5xx", not shared.anomalies,
                     "" if not shared.anomalies else f"{shared.anomalies[:3]}")
        for s in servers:
            s.stop()
        h.check_server_logs(checks, servers)
        grant_ids = [ep.gid for ep in episodes if ep.gid]
        h.check_submission_invariants(checks, run.db, shared.acked, shared.sent, grant_ids)

        history.close()
        raced = overlaps(lin.load([history.path]).ops)
        need = ["same-grant pairs", "same-key submit pairs", "form pairs of one revision",
                "confirm pairs", "submit/form pairs"]
        checks.check("the workload raced: same-grant operations in flight together", all(raced[k] for k in need),
                     ", ".join(f"{k} {raced[k]}" for k in need))
        res = h.check_history(checks, history)
        h.log(f"SUMMARY backend={args.backend} replicas={replicas} grants={args.grants} "
              f"ops={res.ops} {dict(shared.counts)} elapsed={time.monotonic() - started:.1f}s")


if __name__ == "__main__":
    h.run_main(main, h.Checks())
