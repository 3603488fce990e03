#!/usr/bin/env python3
"""Pagination scaling run (quality.md, "Bars": list page cost at 100k grants
≤ 2 × the cost at 1k grants, first and last page).

For each size N (default 1000, 10000, 100000), on a fresh database:

1. ``writ migrate``; fixtures by the CLI: an admin, one bot with a token of
   scope ``read:repository``, one private repository, the bot as a reader;
2. one grant prepared through the real browser form (login, new-grant page,
   POST), so the row has exactly the shape the product writes (state
   ``awaiting_agent``, its proposal and digest);
3. N - 1 copies of that row bulk-inserted with SQL (``INSERT ... SELECT``, new
   ids, same agent and repository; with ``--mixed-states`` spread over
   ``awaiting_agent``, ``awaiting_human`` and ``active``): a measurement
   fixture, not a product path (the ``grant_counts`` triggers count the
   copies as they count any insert); then ``ANALYZE`` (PostgreSQL:
   ``VACUUM ANALYZE``, what autovacuum would do after such an insert; SQLite:
   ``ANALYZE`` only with ``--sqlite-analyze``, since Writ never runs it);
4. a release server is started on each size's database and warmed up, and
   ``GET /api/v1/agent-work-grants?page=P&limit=50`` is timed for the first page
   and the last page (P = ceil(N / 50)), and with ``--middle`` the middle page
   (P = ceil(last / 2), not on the bar), ``--requests`` times each,
   sequentially, over one keep-alive connection per server. The requests are
   spread over ``--rounds`` rounds that visit every size and page in turn, so
   a burst of load on a shared machine falls on all sizes alike. Each
   response is checked (200, X-Total-Count = N, the expected number of items,
   ids ascending).

Prints one table per backend: median and p95 per request, requests/s, and the
ratio of the median and p95 to the smallest size's. ``--json FILE`` writes the
same figures.

Only 127.0.0.1 is contacted. Every loop is bounded: ``--requests`` per page
and ``--max-seconds`` of timing per page, whichever ends first.

    scripts/pagination_scaling.py                       # SQLite, 1k/10k/100k
    scripts/pagination_scaling.py --backend postgres    # PostgreSQL at 127.0.0.1:5432
    scripts/pagination_scaling.py --sizes 1000,100000 --requests 100
    scripts/pagination_scaling.py --middle --mixed-states
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness_lib as h  # noqa: E402

LIMIT = 50
BOT = "pager-bot"

# The states the default list shows; --mixed-states spreads the copies over them.
OPEN_STATES = ("awaiting_agent", "awaiting_human", "active")

# Every column of `grants` but `id`: the copies take the template's values.
GRANT_COLUMNS = [
    "repository_id", "agent_id", "issuer_id", "approver_id", "state", "state_revision",
    "proposal", "proposal_digest", "max_submissions", "expires_at", "submission_count",
    "created_at", "updated_at", "confirmed_at", "approved_at", "revoked_at", "revoked_by",
    "revoke_reason",
]


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[k]


class KeepAlive:
    """One HTTP/1.1 connection to 127.0.0.1:port, reused for every request."""

    def __init__(self, port: int, token: str) -> None:
        self.conn = http.client.HTTPConnection(h.LOOPBACK, port, timeout=60)
        self.headers = {"Authorization": f"token {token}", "Accept": "application/json"}
        self.reconnects = 0

    def get(self, path: str) -> tuple[int, dict[str, str], bytes, float]:
        """Returns status, headers, body and the seconds from send to last byte."""
        for attempt in (0, 1):
            try:
                t0 = time.perf_counter()
                self.conn.request("GET", path, headers=self.headers)
                r = self.conn.getresponse()
                body = r.read()
                elapsed = time.perf_counter() - t0
                return r.status, {k.lower(): v for k, v in r.getheaders()}, body, elapsed
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # The server closed an idle keep-alive connection: reconnect once.
                if attempt:
                    raise
                self.conn.close()
                self.reconnects += 1
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.conn.close()


def create_fixtures(binary: str, db: h.Database) -> tuple[str, int]:
    """Admin, bot + token (read:repository), private repo, bot as reader. Returns (token, bot id)."""
    h.writ_cli(binary, db.url, "migrate")
    h.writ_cli(binary, db.url, "admin", "bootstrap", "--login", h.OWNER, "--password",
               h.OWNER_PASSWORD)
    h.writ_cli(binary, db.url, "admin", "repo", "--owner", h.OWNER, "--name", h.REPO, "--private")
    user = json.loads(h.writ_cli(binary, db.url, "admin", "user", "--login", BOT, "--kind", "bot"))
    token = h.writ_cli(binary, db.url, "admin", "token", "create", "--login", BOT, "--name", "pager",
                       "--scope", "read:repository").splitlines()[-1].strip()
    h.writ_cli(binary, db.url, "admin", "collaborator", "set", "--repo", f"{h.OWNER}/{h.REPO}",
               "--login", BOT, "--permission", "read")
    return token, int(user["id"])


def bulk_insert(db: h.Database, template_id: int, copies: int, analyze_sqlite: bool,
                mixed_states: bool) -> float:
    """Inserts `copies` copies of grant `template_id` (new ids); returns seconds taken.
    With `mixed_states`, copy i takes state OPEN_STATES[i % 3]."""
    cols = ", ".join(GRANT_COLUMNS)
    values = cols
    if mixed_states:
        cases = " ".join(f"WHEN {k} THEN '{state}'" for k, state in enumerate(OPEN_STATES))
        values = cols.replace("state, ", f"CASE {{i}} % 3 {cases} END, ", 1)
    t0 = time.monotonic()
    if db.backend == "sqlite":
        con = sqlite3.connect(str(db.sqlite_path), timeout=60)
        try:
            con.execute("PRAGMA journal_mode=WAL")
            with con:
                con.execute(
                    f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
                    f"INSERT INTO grants ({cols}) SELECT {values.format(i='n.i')} FROM grants, n "
                    f"WHERE grants.id = ? ORDER BY n.i",
                    (copies, template_id),
                )
            if analyze_sqlite:
                con.execute("ANALYZE")
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            con.close()
    else:
        h._psql(db.url,
                f"INSERT INTO grants ({cols}) SELECT {values.format(i='i')} "
                f"FROM grants, generate_series(1, {copies}) AS i "
                f"WHERE grants.id = {template_id}")
        h._psql(db.url, "VACUUM ANALYZE")
    return time.monotonic() - t0


def check_page(path: str, status: int, headers: dict[str, str], body: bytes, total: int,
               expected: int) -> None:
    """Raises unless a list page is 200 with the right total, item count and order."""
    if status != 200:
        raise RuntimeError(f"GET {path}: {status} {body[:300]!r}")
    if headers.get("x-total-count") != str(total):
        raise RuntimeError(f"GET {path}: X-Total-Count {headers.get('x-total-count')} != {total}")
    items = json.loads(body)
    ids = [int(g["id"]) for g in items]
    if len(items) != expected or ids != sorted(ids):
        raise RuntimeError(f"GET {path}: {len(items)} items (expected {expected}), ids {ids[:5]}")


class SizeRun:
    """One size N: its database and fixtures, a server on it, one keep-alive
    client, and the samples of each timed page."""

    def __init__(self, args, binary: str, backend: str, size: int) -> None:
        self.args, self.binary, self.backend, self.size = args, binary, backend, size
        self.workdir = Path(tempfile.mkdtemp(prefix=f"writ-pagination-{backend}-{size}-"))
        self.db: h.Database | None = None
        self.server: h.Server | None = None
        self.client: KeepAlive | None = None
        last = math.ceil(size / LIMIT)
        self.pages = {"first": 1, "last": last}
        if args.middle:
            self.pages["middle"] = math.ceil(last / 2)
        self.samples: dict[str, list[float]] = {which: [] for which in self.pages}
        self.spent: dict[str, float] = {which: 0.0 for which in self.pages}
        self.body_bytes: dict[str, int] = {}

    def path(self, which: str) -> str:
        return f"/api/v1/agent-work-grants?page={self.pages[which]}&limit={LIMIT}"

    def setup(self) -> None:
        """Fixtures, the template grant, the bulk copies; then the server, warmed up."""
        args, size = self.args, self.size
        db = self.db = h.Database.create(self.backend, self.workdir, args.postgres_url)
        token, bot_id = create_fixtures(self.binary, db)

        # One grant through the real browser form: the template row.
        server = self.server = h.Server(self.binary, db.url, h.free_port(), self.workdir,
                                        name=f"writ-{size}")
        ok, detail = server.start()
        if not ok:
            raise RuntimeError(f"server did not start: {detail}")
        browser = h.Browser(server.port)
        browser.login(h.OWNER, h.OWNER_PASSWORD)
        template = browser.prepare_grant(h.OWNER, h.REPO, BOT, task="pagination scaling fixture",
                                         summary="pagination scaling", max_submissions=10)
        server.stop()
        row = db.rows(f"SELECT agent_id, repository_id, state FROM grants WHERE id = {template}")[0]
        if int(row["agent_id"]) != bot_id or row["state"] != "awaiting_agent":
            raise RuntimeError(f"template grant {template} is {row}")

        seconds = bulk_insert(db, template, size - 1, args.sqlite_analyze, args.mixed_states)
        states = ", ".join(f"'{state}'" for state in OPEN_STATES)
        count = int(db.scalar(f"SELECT count(*) AS n FROM grants WHERE agent_id = {bot_id} "
                              f"AND state IN ({states})"))
        if count != size:
            raise RuntimeError(f"{count} grants after the bulk insert, expected {size}")
        h.log(f"{self.backend} N={size}: template grant {template}, {size - 1} copies in "
              f"{seconds:.1f}s")

        ok, detail = server.start()
        if not ok:
            raise RuntimeError(f"server did not restart: {detail}")
        self.client = KeepAlive(server.port, token)
        for which in self.pages:  # warm-up: caches, prepared statements, pool connections
            for _ in range(args.warmup):
                status, _, body, _ = self.client.get(self.path(which))
                if status != 200:
                    raise RuntimeError(f"warm-up {self.path(which)}: {status} {body[:300]!r}")

    def sample(self, which: str, n_requests: int) -> None:
        """Times `n_requests` GETs of one page (until its --max-seconds are spent)."""
        path, page = self.path(which), self.pages[which]
        expected = min(LIMIT, self.size - (page - 1) * LIMIT)
        for _ in range(n_requests):
            if self.spent[which] > self.args.max_seconds:
                return
            status, headers, body, elapsed = self.client.get(path)
            check_page(path, status, headers, body, self.size, expected)
            self.samples[which].append(elapsed)
            self.body_bytes[which] = len(body)
            self.spent[which] += elapsed
            if self.spent[which] > self.args.max_seconds:
                h.log(f"N={self.size} page {page}: stopped after {len(self.samples[which])} "
                      f"requests (--max-seconds {self.args.max_seconds})")

    def result(self) -> dict:
        problems = self.server.problems()
        if problems:
            raise RuntimeError(f"server log shows errors: {problems[:3]}")
        out: dict = {"size": self.size, "reconnects": self.client.reconnects}
        for which, page in self.pages.items():
            s = sorted(self.samples[which])
            out[which] = {
                "page": page,
                "items": min(LIMIT, self.size - (page - 1) * LIMIT),
                "bytes": self.body_bytes[which],
                "requests": len(s),
                "median_ms": statistics.median(s) * 1000,
                "p95_ms": percentile(s, 0.95) * 1000,
                "min_ms": s[0] * 1000,
                "max_ms": s[-1] * 1000,
                "per_s": len(s) / sum(s),
            }
        h.log(f"{self.backend} N={self.size}: " + ", ".join(
            f"{which} (page {r['page']}) {r['median_ms']:.2f} ms"
            for which, r in out.items() if isinstance(r, dict))
            + f" (medians); {self.client.reconnects} reconnects")
        return out

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        if self.server is not None:
            try:
                self.server.stop(timeout=10)
            except Exception:  # noqa: BLE001 - best effort
                pass
        db = self.db
        if db is not None and not self.args.keep:
            try:
                db.drop()
            except Exception as e:  # noqa: BLE001
                h.log(f"could not drop the database: {e}")
        if self.args.keep:
            h.log(f"kept {self.workdir}" + (f" and database {db.name}" if db and db.name else ""))
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)


def measure(args, binary: str, backend: str, sizes: list[int]) -> list[dict]:
    """Sets every size up, then times them in rounds: each round takes its share
    of --requests for every size and page in turn, so a burst of load on a
    shared machine falls on all sizes alike instead of on one."""
    runs = [SizeRun(args, binary, backend, size) for size in sizes]
    try:
        for run in runs:
            run.setup()
        rounds = max(1, min(args.rounds, args.requests))
        for r in range(rounds):
            n = args.requests // rounds + (1 if r < args.requests % rounds else 0)
            for run in runs:
                for which in run.pages:
                    run.sample(which, n)
        return [run.result() for run in runs]
    finally:
        for run in runs:
            run.close()


def print_table(backend: str, results: list[dict], bar: float) -> bool:
    base = results[0]
    print(f"\n{backend}: GET /api/v1/agent-work-grants?page=P&limit={LIMIT}, "
          f"sequential, one keep-alive connection")
    print(f"{'grants':>8} {'page':>5} {'n':>4} {'median ms':>10} {'p95 ms':>8} {'req/s':>8} "
          f"{'median ×':>9} {'p95 ×':>7}")
    holds = True
    for r in results:
        for which in ("first", "middle", "last"):
            if which not in r:
                continue
            m = r[which]
            b = base[which]
            rm, rp = m["median_ms"] / b["median_ms"], m["p95_ms"] / b["p95_ms"]
            print(f"{r['size']:>8} {m['page']:>5} {m['requests']:>4} {m['median_ms']:>10.2f} "
                  f"{m['p95_ms']:>8.2f} {m['per_s']:>8.0f} {rm:>8.1f}× {rp:>6.1f}×")
            r[which]["median_ratio"] = rm
            r[which]["p95_ratio"] = rp
    top = results[-1]
    for which in ("first", "last"):
        ok = top[which]["median_ratio"] <= bar
        holds &= ok
        print(f"bar: {which} page at {top['size']} ≤ {bar:g} × at {base['size']} (median): "
              f"{top[which]['median_ratio']:.1f}× — {'holds' if ok else 'FAILS'}")
    return holds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    p.add_argument("--sizes", default="1000,10000,100000",
                   help="comma-separated grant counts; ratios are against the first")
    p.add_argument("--binary", default=str(h.DEFAULT_BINARY),
                   help="writ binary (default target/release/writ, built if missing)")
    p.add_argument("--postgres-url",
                   default=os.environ.get("WRIT_HARNESS_POSTGRES_URL", h.DEFAULT_POSTGRES_URL),
                   help="admin connection used to create and drop the run's database")
    p.add_argument("--requests", type=int, default=200, help="timed requests per page (200)")
    p.add_argument("--warmup", type=int, default=20, help="untimed requests per page first (20)")
    p.add_argument("--rounds", type=int, default=10,
                   help="timing rounds; each takes its share of --requests for every size and "
                        "page in turn (10)")
    p.add_argument("--max-seconds", type=float, default=90.0,
                   help="stop timing a page after this long (90)")
    p.add_argument("--sqlite-analyze", action="store_true",
                   help="run ANALYZE on SQLite after the bulk insert (Writ never does)")
    p.add_argument("--middle", action="store_true",
                   help="also time the middle page (not on the bar)")
    p.add_argument("--mixed-states", action="store_true",
                   help="spread the copies over awaiting_agent, awaiting_human and active")
    p.add_argument("--bar", type=float, default=2.0, help="allowed cost ratio (2.0)")
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument("--keep", action="store_true", help="keep run directories and databases")
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if not sizes or any(s < 1 for s in sizes):
        p.error("--sizes must be positive integers")
    if args.backend == "postgres":
        h._require_loopback(args.postgres_url)

    binary = h.ensure_binary(args.binary)
    try:
        results = measure(args, binary, args.backend, sizes)
    except KeyboardInterrupt:
        h.log("interrupted")
        h.stop_all_servers()
        sys.exit(130)
    holds = print_table(args.backend, results, args.bar)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"backend": args.backend, "limit": LIMIT, "bar": args.bar, "holds": holds,
             "sqlite_analyze": args.sqlite_analyze, "mixed_states": args.mixed_states,
             "results": results}, indent=2))
    sys.exit(0 if holds else 1)


if __name__ == "__main__":
    main()
