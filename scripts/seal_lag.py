#!/usr/bin/env python3
"""Seal lag of a Writ database: for every sealed audit record, the time from
its record becoming final (its outcome, or its call for a record without
one) to the `sealed_at` of its seal; and how many records are sealed.

Usage: scripts/seal_lag.py sqlite:///path/writ.db
       scripts/seal_lag.py postgres://postgres@127.0.0.1:5432/dbname
(`writ-bench --keep` keeps the server's database of a run.)
"""

import datetime
import json
import sqlite3
import subprocess
import sys


def rows(url, sql):
    if url.startswith("sqlite://"):
        conn = sqlite3.connect("file:%s?mode=ro" % url[len("sqlite://"):], uri=True)
        return conn.execute(sql).fetchall()
    out = subprocess.run(["psql", url, "-AtF", "\t", "-c", sql], check=True,
                         capture_output=True, text=True).stdout
    return [tuple(line.split("\t")) for line in out.splitlines() if line]


def at(text):
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")


def main(url):
    final = {int(i): at(c or k) for i, k, c in rows(url, "SELECT id, called_at, completed_at FROM tool_calls")}
    lags, seals = [], rows(url, "SELECT seq, sealed_at, call_ids FROM audit_seals ORDER BY seq")
    for _, sealed_at, ids in seals:
        sealed = at(sealed_at)
        lags += [(sealed - final[i]).total_seconds() for i in json.loads(ids) if i in final]
    lags.sort()
    pct = lambda p: lags[min(len(lags) - 1, int(p * len(lags)))] if lags else float("nan")
    span = (at(seals[-1][1]) - at(seals[0][1])).total_seconds() if len(seals) > 1 else 0
    print("records %d, sealed %d in %d seals over %.1f s; lag p50 %.2f s, p99 %.2f s, max %.2f s"
          % (len(final), len(lags), len(seals), span, pct(0.5), pct(0.99), lags[-1] if lags else 0))


if __name__ == "__main__":
    main(sys.argv[1])
