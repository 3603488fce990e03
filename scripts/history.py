"""Recording a harness's concurrent history for scripts/linearizability.py.

Every request a harness's `Bot` or `Browser` (harness_lib.py) makes on a
grant is one line of JSONL: the operation and its arguments, the client, the
replica's port, start and end times (`time.monotonic()` of the driver), and
the answer reduced to what the per-grant model checks (status, error code,
the grant's state, state_revision and submission_count, the receipt's key,
content digest, issue id and index and status, whether it was a replay; for
the grant page, the forms it offers). A request that got no answer (timeout,
reset, dropped by the harness, server killed) is written with `"answer":
null`; one refused at connect (`ConnectionRefusedError`: it never reached a
server) with `"sent": false`. Grants are declared by a `"type": "grant"`
line with their proposal digest and max_submissions.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
from pathlib import Path

# The grant page's state badge carries the facts as data attributes.
_FACTS_RE = re.compile(
    r'id="grant-state" data-state="([a-z_]+)" data-revision="(\d+)" data-submissions="(\d+)"')


def grant_facts(g: dict | None) -> dict | None:
    if not isinstance(g, dict):
        return None
    return {"state": g.get("state"), "state_revision": g.get("state_revision"),
            "submission_count": g.get("submission_count")}


def api_answer(r, submit: bool = False) -> dict:
    """An answer of the native API (`harness_lib.Response`)."""
    ans: dict = {"status": r.status}
    try:
        body = r.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        if r.status >= 400 and isinstance(body.get("code"), str):
            ans["code"] = body["code"]
        g = grant_facts(body.get("grant"))
        if g is not None:
            ans["grant"] = g
        s = body.get("submission")
        if isinstance(s, dict):
            issue = s.get("issue") or {}
            ans["receipt"] = {"request_key": s.get("request_key"),
                              "content_digest": s.get("content_digest"),
                              "issue": [issue.get("id"), issue.get("index")],
                              "status": s.get("status")}
    if submit and r.status in (200, 201):
        ans["replayed"] = r.header("idempotent-replayed") == "true"
    return ans


def page_answer(r, forms: list[str]) -> dict:
    """The grant page: the facts it shows and the forms it offers."""
    ans: dict = {"status": r.status}
    if r.status == 200:
        text = r.text
        m = _FACTS_RE.search(text)
        if m:
            ans["grant"] = {"state": m.group(1), "state_revision": int(m.group(2)),
                            "submission_count": int(m.group(3))}
        ans["forms"] = sorted(forms)
    return ans


class Call:
    """One request in flight."""

    def __init__(self, history: "History", rec: dict) -> None:
        self.history = history
        self.rec = rec
        self.done = False

    def answered(self, answer: dict) -> None:
        self.rec["end"] = time.monotonic()
        self.rec["answer"] = answer
        self.history._write(self)

    def failed(self, error: BaseException) -> None:
        """No answer; a refused connection never reached the server."""
        self.rec["end"] = None
        self.rec["answer"] = None
        self.rec["error"] = f"{type(error).__name__}: {error}"[:200]
        if isinstance(error, ConnectionRefusedError):
            self.rec["sent"] = False
        self.history._write(self)


class History:
    """A JSONL history file, written as requests finish (thread-safe)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "w", encoding="utf-8")
        self._lock = threading.Lock()
        self._next = 0
        self._open: dict[int, Call] = {}
        self.ops = 0
        self.grants: set[int] = set()

    def grant(self, gid: int, digest: str, max_submissions: int) -> None:
        with self._lock:
            self.grants.add(gid)
            self._fh.write(json.dumps({"type": "grant", "grant": gid, "digest": digest,
                                       "max_submissions": max_submissions}) + "\n")

    def begin(self, op: str, gid: int, args: dict, client: str, port: int | None = None) -> Call:
        with self._lock:
            self._next += 1
            rec = {"type": "op", "id": self._next, "client": client, "grant": gid, "op": op,
                   "args": args, "port": port, "start": None}
            call = Call(self, rec)
            self._open[self._next] = call
        rec["start"] = time.monotonic()
        return call

    def _write(self, call: Call) -> None:
        with self._lock:
            if call.done:
                return
            call.done = True
            self._open.pop(call.rec["id"], None)
            self.ops += 1
            self._fh.write(json.dumps(call.rec, ensure_ascii=False) + "\n")

    def close(self) -> None:
        """Writes every request still in flight as unanswered."""
        for call in list(self._open.values()):
            call.rec.setdefault("error", "no answer when the history was closed")
            call.rec["end"] = None
            call.rec["answer"] = None
            self._write(call)
        with self._lock:
            if not self._fh.closed:
                self._fh.close()


def recorded(history: "History | None", op: str, gid: int, args: dict, who: str, port: int,
             send, answer):
    """Sends a request with `send()` and, when `history` is set, records it
    with `answer(response)`, or without an answer when the connection fails."""
    if history is None:
        return send()
    call = history.begin(op, gid, args, client_name(who), port)
    try:
        r = send()
    except (OSError, http.client.HTTPException) as e:
        call.failed(e)
        raise
    call.answered(answer(r))
    return r


def client_name(who: str) -> str:
    """`who` plus the calling thread, e.g. `bot1/t3`."""
    t = threading.current_thread().name
    t = t.replace("ThreadPoolExecutor-", "pool").replace("MainThread", "main")
    return f"{who}/{t}"
