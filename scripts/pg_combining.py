#!/usr/bin/env python3
"""What combining concurrent submissions would gain on PostgreSQL, measured at
the SQL level with pgbench (docs/performance.md, ADR 0036).

Writ sends four statements per new submission on PostgreSQL: ``BEGIN``, the
route lookup (which locks the grant), the handoff (one statement writing the
audit record, the evaluation, the issue, the receipt, the counters, the event
and the webhook deliveries) and ``COMMIT``. This script replays that SQL
straight to the engine, without Writ, in eight shapes, each with eight
submissions in flight:

- ``T_submit``: the bench's baseline transaction (``writ-bench`` baseline.rs),
  eight clients;
- ``writ, 1 a transaction``: Writ's lookup and handoff, eight clients;
- ``writ, 1 a transaction, 2 round trips`` and ``1 round trip``: the same
  four statements in pgbench's pipeline mode, ``BEGIN`` with the lookup and
  the handoff with ``COMMIT`` (what a driver that pipelines would send), or
  all four at once;
- ``writ, 4 a transaction``: four of those, one after the other, in one
  transaction, two clients (one commit for four: ADR 0036's lanes);
- ``writ, 4 lookups and 1 handoff``: each grant's own lookup, then one
  4-row handoff, in one transaction, two clients;
- ``writ, 2 a statement`` and ``writ, 4 a statement``: one lookup statement
  for k grants and one k-row handoff (rows from ``generate_series``, joined
  back by grant, repository and request key), four and two clients.

The lookup is the statement Writ sends for a native submit, copied with its
parameters written in; the k-row handoff is the single-row one rewritten to
take its rows from ``generate_series`` (the fixture gives each grant its own
repository, so a batch never bumps one repository's issue counter twice; a
real combiner must number a repository's issues within its batch).

The database is prepared by Writ itself: ``writ-bench --webhook --keep`` (one
run of a second) migrates it, creates the bots, grants and the subscription
through Writ's own paths and keeps it; this script then runs the shapes in
``--rounds`` rounds, alternating, and prints submissions/s per shape (median
and each round) and the ratio to ``T_submit`` (median of the rounds' ratios).
The databases and the bench's directory are dropped at the end.

Only 127.0.0.1 is contacted.

    scripts/pg_combining.py                         # 3 rounds of 10 s a shape
    scripts/pg_combining.py --rounds 5 --no-subscription
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness_lib as h  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NOW = "'2026-01-01T00:00:00.000000Z'"
DIGEST = "'3310359f68f8d8e558f61fac1387c24cb9122dd642fba8707c151ab4fa554d05'"
BODY = (
    "'Benchmark submission. The ledger records this issue, its receipt and the grant''s "
    "counter in one durable transaction; the harness measures how many of those Writ "
    "commits per second over HTTP next to the engine alone.'"
)

# The route lookup of a native submit (store::grants), with the values of
# grant G written in: G's agent (and token) is G + 1, its repository root/bench-(G-1).
LOOKUP = """SELECT "grants"."id", "grants"."repository_id", "grants"."agent_id", "grants"."issuer_id", "grants"."approver_id", "grants"."state", "grants"."state_revision", "grants"."proposal", "grants"."proposal_digest", "grants"."max_submissions", "grants"."expires_at", "grants"."submission_count", "grants"."created_at", "grants"."updated_at", "grants"."confirmed_at", "grants"."approved_at", "grants"."revoked_at", "grants"."revoked_by", "grants"."revoke_reason", "owner"."login" AS "repo_owner", "repositories"."name" AS "repo_name", "repositories"."private" AS "repo_private", "agent"."login" AS "agent_login", "issuer"."login" AS "issuer_login", "approver"."login" AS "approver_login", "revoker"."login" AS "revoked_by_login", "le"."id" AS "admission_id", "le"."phase" AS "admission_phase", "le"."status" AS "admission_status", "le"."snapshot_id" AS "admission_snapshot_id", "le"."evaluated_at" AS "admission_evaluated_at", "repositories"."owner_id" AS "repo_owner_id", "repositories"."require_distinct_approver" AS "repo_require_distinct_approver", "repositories"."created_at" AS "repo_created_at", "collaborators"."permission" AS "collaborator_permission", "ks"."id" AS "key_submission_id", (SELECT CAST(json_agg(json_build_array("i"."kind", "i"."id", "i"."a", "i"."b", "i"."c", "i"."d", "i"."installed", "i"."healthy")) AS TEXT) FROM (SELECT '0' AS "kind", "fs_context_changes"."id" AS "id", "fs_context_changes"."action" AS "a", "fs_context_changes"."capabilities" AS "b", "fs_context_changes"."at" AS "c", "users"."login" AS "d", NULL AS "installed", NULL AS "healthy" FROM "fs_context_changes" INNER JOIN "users" ON "users"."id" = "fs_context_changes"."actor_id" WHERE "fs_context_changes"."repository_id" = "repositories"."id" UNION ALL (SELECT '1' AS "kind", NULL AS "id", "mcp_id" AS "a", "detail" AS "b", "checked_at" AS "c", "updated_by" AS "d", "installed" AS "installed", "healthy" AS "healthy" FROM "mcp_health") UNION ALL (SELECT '2' AS "kind", "id" AS "id", "digest" AS "a", NULL AS "b", NULL AS "c", NULL AS "d", NULL AS "installed", NULL AS "healthy" FROM "health_snapshots" WHERE "id" IN (SELECT MAX("id") FROM "health_snapshots"))) AS "i") AS "admission_inputs" FROM "grants" INNER JOIN "repositories" ON "repositories"."id" = "grants"."repository_id" INNER JOIN "users" AS "owner" ON "owner"."id" = "repositories"."owner_id" INNER JOIN "users" AS "agent" ON "agent"."id" = "grants"."agent_id" INNER JOIN "users" AS "issuer" ON "issuer"."id" = "grants"."issuer_id" LEFT JOIN "users" AS "approver" ON "approver"."id" = "grants"."approver_id" LEFT JOIN "users" AS "revoker" ON "revoker"."id" = "grants"."revoked_by" LEFT JOIN LATERAL (SELECT "admission_evaluations"."id", "admission_evaluations"."grant_id", "admission_evaluations"."phase", "admission_evaluations"."status", "admission_evaluations"."snapshot_id", "admission_evaluations"."evaluated_at" FROM "admission_evaluations" WHERE ("admission_evaluations"."grant_id", "admission_evaluations"."id") <= ("grants"."id", 9223372036854775807) ORDER BY "admission_evaluations"."grant_id" DESC, "admission_evaluations"."id" DESC LIMIT 1) AS "le" ON "le"."grant_id" = "grants"."id" LEFT JOIN "collaborators" ON "collaborators"."repository_id" = "repositories"."id" AND "collaborators"."user_id" = (G) + 1 LEFT JOIN "submissions" AS "ks" ON "ks"."grant_id" = "grants"."id" AND "ks"."request_key" = 'no-such-key' WHERE "grants"."id" = (G) AND "grants"."agent_id" = (G) + 1 AND "owner"."lower_login" = 'root' AND "repositories"."lower_name" = 'bench-' || ((G) - 1) AND EXISTS(SELECT 1 FROM "access_tokens" WHERE "access_tokens"."id" = (G) + 1 AND "access_tokens"."user_id" = (G) + 1 AND "access_tokens"."revoked_at" IS NULL) FOR UPDATE OF "grants\""""


def lookup(grant: str) -> str:
    return LOOKUP.replace("(G)", f"({grant})") + ";"


def lookup_many(k: int) -> str:
    """One lookup statement for grants :base .. :base + k - 1, locked in id order."""
    s = LOOKUP.replace("(G)", "b.g")
    s = s.replace('FROM "grants" INNER JOIN', f'FROM generate_series((:base)::bigint, (:base + {k - 1})::bigint) AS b(g) CROSS JOIN "grants" INNER JOIN', 1)
    return s + ";"


def handoff(first: str, last: str, snapshot: str, catalog: str) -> str:
    """The handoff for grants first .. last, one row each, as one statement;
    the evaluations cite health snapshot `snapshot` and catalog `catalog`."""
    return f"""WITH inp AS MATERIALIZED (SELECT g AS grant_id, g AS repo_id, g + 1 AS agent_id, gen_random_uuid()::text AS request_key FROM generate_series(({first})::bigint, ({last})::bigint) AS t(g)),
au AS (INSERT INTO tool_calls (called_at, via, agent_id, agent_login, token_id, tool, repository, decision, matched_grant, reason, rpc_id, request_id, arg_names, native_status, error_code, completed_at)
  SELECT {NOW}, 'api', agent_id, 'bench-bot-' || (grant_id - 1), agent_id, 'submit_agent_work_proposal', 'root/bench-' || (grant_id - 1), 'allow', NULL, 'native_api', NULL, request_key, '["body","grant_id","owner","proposal_digest","proposal_schema","proposal_version","repo","request_key","title"]', 201, NULL, {NOW} FROM inp RETURNING id, request_id),
ev AS (INSERT INTO admission_evaluations (grant_id, phase, status, retryable, blocked_count, warning_count, snapshot_id, catalog_version, filesystem_grant_id, proposal_digest, decisions, actor_id, evaluated_at)
  SELECT grant_id, 'handoff', 'allowed', false, 0, 0, {snapshot}, '{catalog}', NULL, {DIGEST}, '[]', agent_id, {NOW} FROM inp RETURNING id, grant_id),
ix AS (UPDATE repositories r SET next_issue_index = r.next_issue_index + 1 FROM inp WHERE r.id = inp.repo_id RETURNING r.id, r.next_issue_index),
iss AS (INSERT INTO issues (repository_id, issue_index, title, body, poster_id, created_at)
  SELECT ix.id, ix.next_issue_index - 1, 'bench title', {BODY}, inp.agent_id, {NOW} FROM ix JOIN inp ON inp.repo_id = ix.id RETURNING id, repository_id, issue_index),
sub AS (INSERT INTO submissions (grant_id, request_key, content_digest, proposal_digest, agent_id, issue_id, issue_index, repository_id, repository_full_name, issue_url, evaluation_id, created_at, call_id)
  SELECT inp.grant_id, inp.request_key, {DIGEST}, {DIGEST}, inp.agent_id, iss.id, iss.issue_index, inp.repo_id, 'root/bench-' || (inp.grant_id - 1), 'http://127.0.0.1/root/bench/issues/' || iss.issue_index, ev.id, {NOW}, au.id
  FROM inp JOIN iss ON iss.repository_id = inp.repo_id JOIN ev ON ev.grant_id = inp.grant_id JOIN au ON au.request_id = inp.request_key RETURNING id),
g AS (UPDATE grants SET submission_count = grants.submission_count + 1, updated_at = {NOW} FROM inp WHERE grants.id = inp.grant_id RETURNING grants.id),
evt AS (INSERT INTO events (type, occurred_at, actor_id, repository_id, grant_id, state, state_revision, proposal_digest, data)
  SELECT 'submission.created', {NOW}, inp.agent_id, inp.repo_id, inp.grant_id, 'active', 2, {DIGEST}, json_build_object('request_key', inp.request_key, 'issue_index', iss.issue_index, 'receipt_status', 'submitted')::text FROM inp JOIN iss ON iss.repository_id = inp.repo_id RETURNING id),
dl AS (INSERT INTO webhook_deliveries (subscription_id, event_id, status, attempts, next_attempt_at, created_at)
  SELECT s.id, evt.id, 'pending', 0, {NOW}, {NOW} FROM evt, webhook_subscriptions s WHERE s.enabled = true
  AND ((NOT EXISTS (SELECT 1 FROM webhook_subscription_types t WHERE t.subscription_id = s.id)) OR EXISTS (SELECT 1 FROM webhook_subscription_types t WHERE t.subscription_id = s.id AND t.type = 'submission.created'))
  AND ((NOT EXISTS (SELECT 1 FROM webhook_subscription_repos r WHERE r.subscription_id = s.id)) OR EXISTS (SELECT 1 FROM webhook_subscription_repos r WHERE r.subscription_id = s.id AND r.owner = 'root')))
SELECT (SELECT count(*) FROM sub), (SELECT count(*) FROM g);""".replace("\n", " ")


T_SUBMIT = f"""\\set g :client_id + 1
BEGIN;
SELECT state, proposal_digest, submission_count, max_submissions, expires_at, repository_id FROM grants WHERE id = :g FOR UPDATE;
UPDATE repositories SET next_issue_index = next_issue_index + 1 WHERE id = :g RETURNING next_issue_index \\gset
INSERT INTO issues (repository_id, issue_index, title, body, poster_id, created_at) VALUES (:g, :next_issue_index - 1, 'bench title', {BODY}, :g + 1, {NOW}) RETURNING id \\gset
INSERT INTO submissions (grant_id, request_key, content_digest, proposal_digest, agent_id, issue_id, issue_index, repository_id, repository_full_name, issue_url, evaluation_id, created_at) VALUES (:g, gen_random_uuid()::text, {DIGEST}, {DIGEST}, :g + 1, :id, :next_issue_index - 1, :g, 'root/bench', 'http://127.0.0.1/root/bench/issues/1', NULL, {NOW});
UPDATE grants SET submission_count = submission_count + 1, updated_at = {NOW} WHERE id = :g;
COMMIT;
"""


def shapes(snapshot: str, catalog: str) -> list[tuple[str, int, int, str]]:
    """(name, clients, submissions a transaction, pgbench script), the
    evaluations citing health snapshot `snapshot` and catalog `catalog`."""

    def handoff_of(first: str, last: str) -> str:
        return handoff(first, last, snapshot, catalog)

    # One submission: its lookup and its handoff, sent one statement a
    # round trip, or pipelined (BEGIN with the lookup and the handoff with
    # COMMIT, as a driver that pipelines would send; or all four at once,
    # the floor of any scheme that decides without a round trip between
    # the lookup and the handoff).
    first, last = lookup(":base"), handoff_of(":base", ":base")
    one = f"\\set base :client_id + 1\nBEGIN;\n{first}\n{last}\nCOMMIT;\n"
    pipelined = (f"\\set base :client_id + 1\n\\startpipeline\nBEGIN;\n{first}\n\\endpipeline\n"
                 f"\\startpipeline\n{last}\nCOMMIT;\n\\endpipeline\n")
    one_trip = f"\\set base :client_id + 1\n\\startpipeline\nBEGIN;\n{first}\n{last}\nCOMMIT;\n\\endpipeline\n"
    seq = ["\\set base :client_id * 4 + 1", "BEGIN;"]
    for i in range(4):
        seq += [lookup(f":base + {i}"), handoff_of(f":base + {i}", f":base + {i}")]
    seq.append("COMMIT;")

    def combined(k: int) -> str:
        return f"\\set base :client_id * {k} + 1\nBEGIN;\n{lookup_many(k)}\n{handoff_of(':base', f':base + {k - 1}')}\nCOMMIT;\n"

    lookups = ["\\set base :client_id * 4 + 1", "BEGIN;"]
    lookups += [lookup(f":base + {i}") for i in range(4)]
    lookups += [handoff_of(":base", ":base + 3"), "COMMIT;"]

    return [
        ("T_submit", 8, 1, T_SUBMIT),
        ("writ, 1 a transaction", 8, 1, one),
        ("writ, 1 a transaction, 2 round trips", 8, 1, pipelined),
        ("writ, 1 a transaction, 1 round trip", 8, 1, one_trip),
        ("writ, 4 a transaction", 2, 4, "\n".join(seq) + "\n"),
        ("writ, 4 lookups and 1 handoff", 2, 4, "\n".join(lookups) + "\n"),
        ("writ, 2 a statement", 4, 2, combined(2)),
        ("writ, 4 a statement", 2, 4, combined(4)),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--admin-url", default="postgres://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--writ-bench", type=Path, help="default: target/quick/writ-bench, else target/release/writ-bench")
    ap.add_argument("--seconds", type=int, default=10, help="per shape and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-subscription", action="store_true", help="disable the subscription (no deliveries written)")
    args = ap.parse_args()
    admin = h._require_loopback(args.admin_url)
    bench = args.writ_bench or next(
        (p for p in (ROOT / "target/quick/writ-bench", ROOT / "target/release/writ-bench") if p.exists()), None
    )
    if bench is None:
        sys.exit("no writ-bench: cargo build --profile quick --bins")
    print("preparing the database through writ-bench --webhook --keep ...", file=sys.stderr)
    prep = subprocess.run(
        [str(bench), "--database-url", args.admin_url, "--webhook", "--keep", "--no-baseline",
         "--clients", "8", "--seconds", "1", "--slices", "1"],
        capture_output=True, text=True,
    )
    kept = re.search(r'kept (\S+) and databases \["([^"]+)", "([^"]+)"\]', prep.stderr)
    if prep.returncode != 0 or not kept:
        sys.stderr.write(prep.stderr)
        sys.exit("writ-bench failed")
    bench_dir, databases = kept.group(1), [kept.group(2), kept.group(3)]
    url = urllib.parse.urlunsplit(admin._replace(path=f"/{databases[0]}"))
    work = Path(tempfile.mkdtemp(prefix="writ-combining-"))
    try:
        h._psql(url, f"UPDATE webhook_subscriptions SET enabled = {'false' if args.no_subscription else 'true'}")
        grants = h._psql(url, "SELECT count(*) FROM grants g JOIN repositories r ON r.id = g.repository_id "
                           "JOIN users o ON o.id = r.owner_id WHERE g.id BETWEEN 1 AND 8 AND g.repository_id = g.id "
                           "AND g.agent_id = g.id + 1 AND r.lower_name = 'bench-' || (g.id - 1) AND o.lower_login = 'root'")
        if grants != "8":
            sys.exit(f"unexpected fixture: {grants} of the 8 grants have the expected shape")
        snapshot = h._psql(url, "SELECT max(id) FROM health_snapshots")
        catalog = h._psql(url, "SELECT max(version) FROM catalogs")
        plan = shapes(snapshot, catalog)
        runs: dict[str, list[float]] = {}
        ratios: dict[str, list[float]] = {}
        env = dict(os.environ, PGOPTIONS="-c plan_cache_mode=force_generic_plan")  # as Writ's connections (ADR 0022)
        for r in range(args.rounds):
            base = None
            for name, clients, k, script in plan:
                path = work / "script.sql"
                path.write_text(script)
                out = subprocess.run(
                    ["pgbench", "-n", "-M", "prepared", "-f", str(path), "-c", str(clients), "-j", "2",
                     "-T", str(args.seconds), url],
                    capture_output=True, text=True, env=env,
                )
                tps = re.search(r"^tps = ([0-9.]+)", out.stdout, re.M)
                failed = re.search(r"number of failed transactions: ([1-9]\d*)", out.stdout)
                if out.returncode != 0 or not tps or failed:
                    sys.stderr.write(out.stdout + out.stderr)
                    sys.exit(f"pgbench failed on {name}")
                rate = float(tps.group(1)) * k
                runs.setdefault(name, []).append(rate)
                base = rate if name == "T_submit" else base
                ratios.setdefault(name, []).append(rate / base)
                print(f"round {r + 1}: {name}: {rate:,.0f} submissions/s", file=sys.stderr)
        counts = h._psql(url, "SELECT (SELECT count(*) FROM submissions) || ' receipts, ' || (SELECT count(*) FROM events "
                           "WHERE type = 'submission.created') || ' events, ' || (SELECT count(*) FROM webhook_deliveries) "
                           "|| ' deliveries, ' || (SELECT count(*) FROM tool_calls) || ' audit records'")
        sub = "disabled (no deliveries)" if args.no_subscription else "one, matching every event"
        print(f"\n## PostgreSQL, SQL only: 8 submissions in flight, {args.rounds} rounds of {args.seconds} s a shape; subscription {sub}\n")
        print("| shape | clients | per transaction | submissions/s (median) | rounds | × T_submit (median) |")
        print("| --- | ---: | ---: | ---: | --- | ---: |")
        for name, clients, k, _ in plan:
            rounds = ", ".join(f"{x:,.0f}" for x in runs[name])
            print(f"| {name} | {clients} | {k} | {statistics.median(runs[name]):,.0f} | {rounds} | "
                  f"{statistics.median(ratios[name]):.2f}× |")
        print(f"\nWritten: {counts}.")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(bench_dir, ignore_errors=True)
        for db in databases:
            h._psql(args.admin_url, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    return 0


if __name__ == "__main__":
    sys.exit(main())
