#!/usr/bin/env python3
"""The database's size before and after archiving a million audit records
(docs/audit.md, "Archive and retention"; outside CI, a few minutes).

    scripts/archive_size.py [--writ target/release/writ] [--records 1000000]
                            [--postgres postgres://postgres@127.0.0.1:5432/postgres]

For each engine (SQLite always; PostgreSQL with --postgres, in a database
of its own that is dropped after): migrate a fresh database, write
RECORDS + 1 finished records straight into `tool_calls`, `writ audit seal`
them (1,000 a seal), then `writ audit archive` the seals holding the first
RECORDS records, and report the sizes (SQLite: the file, the pages in use,
the file after VACUUM; PostgreSQL: `tool_calls` with its indexes, after
VACUUM and after VACUUM FULL), the archive's size, and how long sealing,
archiving and both verifications took.
"""

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time

SEGMENT = 1000

COLUMNS = ("called_at, via, agent_id, agent_login, token_id, tool, repository, decision, "
           "matched_grant, reason, rpc_id, request_id, arg_names, native_status, error_code, "
           "completed_at")


def run(writ, url, *args):
    start = time.monotonic()
    out = subprocess.run([writ, "--database-url", url, *args], capture_output=True, text=True)
    took = time.monotonic() - start
    if out.returncode != 0:
        sys.exit("writ %s failed:\n%s%s" % (" ".join(args), out.stdout, out.stderr))
    return out.stdout.strip(), took


def mib(n):
    return "%.1f MiB" % (n / 1048576)


def sqlite_records(path, n):
    db = sqlite3.connect(path)
    db.execute(
        "WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ?) "
        "INSERT INTO tool_calls (" + COLUMNS + ") SELECT "
        "strftime('%Y-%m-%dT%H:%M:%S', '2026-12-01', '+' || (i / 100) || ' seconds') "
        "  || '.' || printf('%06d', (i % 100) * 10000) || 'Z', "
        "CASE i % 3 WHEN 0 THEN 'mcp' ELSE 'api' END, 1, 'deploy-bot', 1, "
        "CASE i % 4 WHEN 0 THEN 'submit_agent_work_proposal' ELSE 'get_agent_work_grant' END, "
        "'acme/widgets', CASE i % 10 WHEN 0 THEN 'deny' ELSE 'allow' END, "
        "CASE i % 10 WHEN 0 THEN NULL ELSE 'widgets' END, "
        "CASE i % 10 WHEN 0 THEN 'no grant covers the repository' ELSE 'granted by widgets' END, "
        "NULL, lower(hex(randomblob(16))), '[\"owner\",\"repo\",\"grant_id\"]', "
        "CASE i % 10 WHEN 0 THEN 403 ELSE 200 END, NULL, "
        "strftime('%Y-%m-%dT%H:%M:%S', '2026-12-01', '+' || (i / 100) || ' seconds') "
        "  || '.' || printf('%06d', (i % 100) * 10000 + 900) || 'Z' FROM k",
        (n,),
    )
    db.commit()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


def sqlite_sizes(path):
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = db.execute("PRAGMA page_size").fetchone()[0]
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    free = db.execute("PRAGMA freelist_count").fetchone()[0]
    records = db.execute("SELECT count(*) FROM tool_calls").fetchone()[0]
    db.close()
    return os.path.getsize(path), (pages - free) * page, records


def sqlite_vacuum(path):
    db = sqlite3.connect(path)
    db.execute("VACUUM")
    db.close()
    return os.path.getsize(path)


def psql(url, sql):
    out = subprocess.run(["psql", url, "-qAtc", sql], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("psql failed: %s" % out.stderr)
    return out.stdout.strip()


def pg_records(url, n):
    psql(url,
         "INSERT INTO tool_calls (" + COLUMNS + ") SELECT "
         "to_char(timestamp '2026-12-01' + i * interval '10 milliseconds', "
         "  'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), "
         "CASE i % 3 WHEN 0 THEN 'mcp' ELSE 'api' END, 1, 'deploy-bot', 1, "
         "CASE i % 4 WHEN 0 THEN 'submit_agent_work_proposal' ELSE 'get_agent_work_grant' END, "
         "'acme/widgets', CASE i % 10 WHEN 0 THEN 'deny' ELSE 'allow' END, "
         "CASE i % 10 WHEN 0 THEN NULL ELSE 'widgets' END, "
         "CASE i % 10 WHEN 0 THEN 'no grant covers the repository' ELSE 'granted by widgets' END, "
         "NULL, md5(i::text), '[\"owner\",\"repo\",\"grant_id\"]', "
         "CASE i % 10 WHEN 0 THEN 403 ELSE 200 END, NULL, "
         "to_char(timestamp '2026-12-01' + i * interval '10 milliseconds' + interval '900 microseconds', "
         "  'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') "
         "FROM generate_series(1, " + str(n) + ") i")


def pg_sizes(url):
    return (int(psql(url, "SELECT pg_total_relation_size('tool_calls')")),
            int(psql(url, "SELECT pg_database_size(current_database())")),
            int(psql(url, "SELECT count(*) FROM tool_calls")))


def measure(writ, engine, url, insert, records, sizes, shrink, scratch):
    run(writ, url, "migrate")
    insert(records + 1)
    said, seal_s = run(writ, url, "audit", "seal")
    print("%s: %s in %.1f s" % (engine, said, seal_s))
    before = sizes()
    through = records // SEGMENT
    out = os.path.join(scratch, "%s-archive.jsonl.zst" % engine)
    said, archive_s = run(writ, url, "audit", "archive", "--through-seal", str(through), "--out", out)
    print("%s: %s in %.1f s" % (engine, said, archive_s))
    after = sizes()
    shrunk = shrink()
    _, verify_s = run(writ, url, "audit", "verify")
    _, offline_s = run(writ, url, "audit", "verify", "--archive", out)
    return before, after, shrunk, os.path.getsize(out), seal_s, archive_s, verify_s, offline_s


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--writ", default="target/release/writ")
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--postgres")
    a = p.parse_args()
    if a.records % SEGMENT:
        sys.exit("--records must be a multiple of %d" % SEGMENT)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "writ.db")
        before, after, vacuumed, archive, *times = measure(
            a.writ, "sqlite", "sqlite://" + path, lambda n: sqlite_records(path, n), a.records,
            lambda: sqlite_sizes(path), lambda: sqlite_vacuum(path), scratch)
        rows.append(("SQLite", "file %s (%d records)" % (mib(before[0]), before[2]),
                     "file %s, pages in use %s (%d records); after VACUUM %s"
                     % (mib(after[0]), mib(after[1]), after[2], mib(vacuumed)),
                     mib(archive), times))
        if a.postgres:
            name = "writ_archive_size_%d" % os.getpid()
            psql(a.postgres, "CREATE DATABASE %s" % name)
            url = a.postgres.rsplit("/", 1)[0] + "/" + name
            try:
                def shrink():
                    psql(url, "VACUUM tool_calls")
                    vacuumed = pg_sizes(url)[0]
                    psql(url, "VACUUM FULL tool_calls")
                    return vacuumed, pg_sizes(url)[0]
                before, after, (vacuumed, full), archive, *times = measure(
                    a.writ, "postgres", url, lambda n: pg_records(url, n), a.records,
                    lambda: pg_sizes(url), shrink, scratch)
                rows.append(("PostgreSQL",
                             "tool_calls %s, database %s (%d records)"
                             % (mib(before[0]), mib(before[1]), before[2]),
                             "tool_calls %s (%d records); after VACUUM %s, after VACUUM FULL %s"
                             % (mib(after[0]), after[2], mib(vacuumed), mib(full)),
                             mib(archive), times))
            finally:
                psql(a.postgres, "DROP DATABASE IF EXISTS %s WITH (FORCE)" % name)
    print()
    print("| engine | before | after archiving %d records | archive file | seal, archive, verify, verify --archive |" % a.records)
    print("| --- | --- | --- | --- | --- |")
    for engine, before, after, archive, times in rows:
        print("| %s | %s | %s | %s | %s |" % (engine, before, after, archive,
                                           ", ".join("%.1f s" % t for t in times)))


if __name__ == "__main__":
    main()
