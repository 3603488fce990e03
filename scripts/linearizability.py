#!/usr/bin/env python3
"""Linearizability checker for Writ's per-grant operations (standard library only).

A harness records a history: every request with its start and end times
(`time.monotonic()` of the one driver process), the operation and its
arguments, and the answer, or none when the client never got one (timeout,
connection reset, killed server). This module decides whether the history is
linearizable: whether some total order of the operations, consistent with
their real-time order (an operation that ended before another started comes
first), gives every answer when the operations are applied one by one to the
per-grant model below. An operation without an answer may take effect at any
moment after it started, or never.

    scripts/linearizability.py HISTORY.jsonl...    check recorded histories
    scripts/linearizability.py --self-test         run the checker's unit tests

History lines (JSON, one object per line; `scripts/history.py` writes them):

    {"type": "grant", "grant": 12, "digest": "<hex>", "max_submissions": 5}
    {"type": "op", "id": 7, "client": "bot1-t0", "grant": 12, "op": "submit",
     "args": {"request_key": "...", "content_digest": "...", "proposal_digest": "..."},
     "start": 12.5, "end": 12.6, "answer": {"status": 201, ...}}

`answer` is null for an operation that got no answer; `"sent": false` marks a
request that never reached the server (connection refused), which is left
out. An answer with a status of 500 or more is treated as no answer: Writ
says it failed, but not whether a commit happened. Only the fields an answer
carries are compared, so an answer reduced to its status (the minimizer
does this) constrains less.

The search is Wing & Gong's with Lowe's memoization (the same as Knossos'
`wgl` and Porcupine): a depth-first search over the next operation to
linearize among those whose call precedes the earliest pending return,
caching every (set of linearized operations, model state) already explored.
Grants are independent objects (no per-grant operation reads or writes
another grant), so each grant's history is checked alone (Herlihy & Wing's
locality); issue identities, which are repository-wide, are checked across
grants separately (one issue, one (grant, request key)).

When a grant's history is not linearizable, `minimize` cuts it to the
shortest prefix in time that is not (operations still running at the cut
lose their answers), then drops operations whose answers claim no effect and
reduces the remaining answers to their status while the history stays not
linearizable. Each step only weakens the history, so what is printed is a
genuine witness: no order of those operations gives those answers.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.dont_write_bytecode = True  # no __pycache__ in scripts/

INF = float("inf")

# ---------------------------------------------------------------------------
# The per-grant model.
#
# It mirrors the reference model of tests/api/model/reference.rs for the
# operations a harness runs on one grant; the names are kept aligned:
#   confirm  -> Model::confirm   (Op::Confirm)
#   submit   -> Model::submit    (Op::Submit)
#   readback -> Op::Readback
#   read     -> Op::Read
#   open     -> Op::Open         (the grant page and its forms)
#   approve, withdraw -> Model::post (Op::Post with Form::Approve / Form::Withdraw)
# The harness's world is simpler than the reference model's: one human (root,
# admin and issuer of every grant), the grant's own agent, no MCP
# requirements (admission always allows), no expiry, no edit, no issue
# deleted or moved. A change to the rules in reference.rs (or
# grant-lifecycle.md) must be made here too.
# ---------------------------------------------------------------------------

AWAITING_AGENT = "awaiting_agent"
AWAITING_HUMAN = "awaiting_human"
ACTIVE = "active"
REVOKED = "revoked"

READ_ONLY = frozenset({"read", "readback", "open"})
OPS = frozenset({"confirm", "submit", "readback", "read", "open", "approve", "withdraw"})


@dataclass(frozen=True)
class Facts:
    """The grant facts every answer carries (`GrantFacts` in reference.rs)."""
    state: str
    revision: int
    count: int

    def as_answer(self) -> dict:
        return {"state": self.state, "state_revision": self.revision,
                "submission_count": self.count}


@dataclass
class Expect:
    """What the model predicts for one operation in one state (`Expect`)."""
    status: int
    code: str | None = None
    after: Facts | None = None          # the grant facts the answer shows
    receipt: tuple | None = None        # (request_key, content_digest, issue or None)
    fresh_issue: bool = False           # a new receipt: the answer names its issue
    replayed: bool = False
    forms: frozenset | None = None      # the grant page's forms
    changes: list = field(default_factory=list)  # entries to set: [(key, value)]


class Entries:
    """The grant's receipts and consumed form nonces: a map changed in place
    with undo (the search is depth-first), with an order-independent 128-bit
    fingerprint standing for its content in the search's cache.

    Keys: ("key", request_key) -> (content_digest, issue); ("issue", issue)
    -> request_key; ("nonce", nonce) -> True. `issue` is (id, index), or None
    for a receipt created by a request whose answer was lost (it is bound to
    the first issue an answer names for that key).
    """

    def __init__(self) -> None:
        self.d: dict = {}
        self.fp = 0

    @staticmethod
    def _h(k, v) -> int:
        return int.from_bytes(hashlib.blake2b(repr((k, v)).encode(), digest_size=16).digest(), "big")

    def get(self, k):
        return self.d.get(k)

    def apply(self, changes: list) -> list:
        undo = []
        for k, v in changes:
            old = self.d.get(k)
            undo.append((k, old))
            if old is not None:
                self.fp -= self._h(k, old)
            self.d[k] = v
            self.fp += self._h(k, v)
        self.fp &= (1 << 128) - 1
        return undo

    def revert(self, undo: list) -> None:
        for k, old in reversed(undo):
            self.fp -= self._h(k, self.d[k])
            if old is None:
                del self.d[k]
            else:
                self.d[k] = old
                self.fp += self._h(k, old)
        self.fp &= (1 << 128) - 1

    def copy(self) -> "Entries":
        e = Entries()
        e.d = dict(self.d)
        e.fp = self.fp
        return e


@dataclass(frozen=True)
class GrantModel:
    """One grant's rules; the mutable part of its state is (Facts, Entries)."""
    digest: str
    max_submissions: int

    @staticmethod
    def initial() -> Facts:
        return Facts(AWAITING_AGENT, 1, 0)

    def confirm(self, f: Facts, offered: str) -> Expect:
        """`Model::confirm`: revoked, then digest, then state."""
        if f.state == REVOKED:
            return Expect(409, "grant_revoked", f)
        if offered != self.digest:
            return Expect(409, "proposal_mismatch", f)
        if f.state == AWAITING_AGENT:
            return Expect(200, None, Facts(AWAITING_HUMAN, f.revision + 1, f.count))
        return Expect(200, None, f)

    def submit(self, f: Facts, e: Entries, key: str, content: str, offered: str) -> Expect:
        """`Model::submit`: the request key first (replay or conflict, in
        every state), then state, digest, limit; else a new receipt."""
        existing = e.get(("key", key))
        if existing is not None:
            used_content, issue = existing
            if used_content == content:
                return Expect(200, None, f, receipt=(key, content, issue), replayed=True)
            return Expect(409, "request_key_conflict", f)
        if f.state == REVOKED:
            return Expect(409, "grant_revoked", f)
        if f.state != ACTIVE:
            return Expect(409, "state_conflict", f)
        if offered != self.digest:
            return Expect(409, "proposal_mismatch", f)
        if f.count >= self.max_submissions:
            return Expect(409, "submission_limit", f)
        after = Facts(f.state, f.revision, f.count + 1)
        return Expect(201, None, after, receipt=(key, content, None), fresh_issue=True,
                      changes=[(("key", key), (content, None))])

    def readback(self, f: Facts, e: Entries, key: str) -> Expect:
        existing = e.get(("key", key))
        if existing is None:
            return Expect(404, "not_found")
        content, issue = existing
        return Expect(200, None, f, receipt=(key, content, issue))

    def read(self, f: Facts) -> Expect:
        return Expect(200, None, f)

    def open(self, f: Facts) -> Expect:
        """`Op::Open` for root (admin and issuer): `Grant::forms_for`."""
        forms = set()
        if f.state in (AWAITING_AGENT, AWAITING_HUMAN):
            forms.add("edit")
        if f.state == AWAITING_HUMAN:
            forms.add("approve")
        if f.state != REVOKED:
            forms.add("withdraw")
        return Expect(200, None, f, forms=frozenset(forms))

    def post(self, f: Facts, e: Entries, form: str, revision: int, nonce: str) -> Expect:
        """`Model::post`: the nonce first, then the revision the page
        displayed (the compare-and-swap), then the transition. A refused
        post commits nothing, so its nonce stays unused."""
        if nonce and e.get(("nonce", nonce)) is not None:
            return Expect(403, None)
        if revision != f.revision:
            return Expect(409, None)
        allowed = f.state != REVOKED and (form == "withdraw" or (form == "approve" and f.state == AWAITING_HUMAN))
        if not allowed:
            return Expect(409, None)
        to = ACTIVE if form == "approve" else REVOKED
        changes = [(("nonce", nonce), True)] if nonce else []
        return Expect(303, None, Facts(to, f.revision + 1, f.count), changes=changes)

    def expect(self, f: Facts, e: Entries, op: "Op") -> Expect:
        a = op.args
        if op.kind == "confirm":
            return self.confirm(f, a["proposal_digest"])
        if op.kind == "submit":
            return self.submit(f, e, a["request_key"], a["content_digest"], a["proposal_digest"])
        if op.kind == "readback":
            return self.readback(f, e, a["request_key"])
        if op.kind == "read":
            return self.read(f)
        if op.kind == "open":
            return self.open(f)
        return self.post(f, e, op.kind, int(a["state_revision"]), a.get("nonce", ""))

    def step(self, f: Facts, e: Entries, op: "Op") -> tuple[Facts, list] | None:
        """Applies `op` if its answer (when it has one) is what the model
        predicts: the facts after and the entries to set, else None."""
        x = self.expect(f, e, op)
        after = x.after if x.status in (200, 201, 303) and x.after is not None else f
        changes = list(x.changes)
        ans = op.answer
        if ans is None:
            return after, changes
        if ans.get("status") != x.status:
            return None
        if "code" in ans and x.code is not None and ans["code"] != x.code:
            return None
        g = ans.get("grant")
        if g is not None:
            shown = x.after if x.after is not None else f
            if (g.get("state"), g.get("state_revision"), g.get("submission_count")) != (
                    shown.state, shown.revision, shown.count):
                return None
        if "replayed" in ans and x.status in (200, 201) and x.receipt is not None \
                and bool(ans["replayed"]) != x.replayed:
            return None
        if "forms" in ans and x.forms is not None and frozenset(ans["forms"]) != x.forms:
            return None
        r = ans.get("receipt")
        if r is not None and x.receipt is not None:
            key, content, issue = x.receipt
            if r.get("request_key", key) != key or r.get("content_digest", content) != content:
                return None
            if r.get("status", "submitted") != "submitted":
                return None
            shown = r.get("issue")
            if shown is not None:
                shown = (int(shown[0]), int(shown[1]))
                if x.fresh_issue or issue is None:
                    # A new receipt, or one whose creating answer was lost:
                    # the issue must be no other key's in this grant.
                    owner = e.get(("issue", shown))
                    if owner is not None and owner != key:
                        return None
                    changes = [c for c in changes if c[0] != ("key", key)]
                    changes += [(("key", key), (content, shown)), (("issue", shown), key)]
                elif shown != issue:
                    return None
        return after, changes


# ---------------------------------------------------------------------------
# Histories
# ---------------------------------------------------------------------------


@dataclass
class Op:
    id: int
    client: str
    grant: int
    kind: str
    args: dict
    start: float
    end: float | None           # None: no answer (pending forever)
    answer: dict | None
    reduced: bool = False       # the answer was reduced to its status by `minimize`
    truncated: "Op | None" = None  # the operation as answered, when `prefix` cut its answer off

    def pending(self) -> bool:
        return self.end is None

    def label(self) -> str:
        a = self.args
        if self.kind == "submit":
            return (f"submit(key {a['request_key'][:8]}, content {a['content_digest'][:8]}"
                    f"{'' if a.get('digest_ok', True) else ', other digest'})")
        if self.kind == "readback":
            return f"readback(key {a['request_key'][:8]})"
        if self.kind == "confirm":
            return f"confirm({'current' if a.get('digest_ok', True) else 'other'} digest)"
        if self.kind in ("approve", "withdraw"):
            return f"{self.kind}(form of revision {a['state_revision']}, nonce {a.get('nonce', '')[:6]})"
        return f"{self.kind}()"

    def answer_text(self) -> str:
        if self.truncated is not None:
            return f"not answered yet here (its answer, later: {self.truncated.answer_text()})"
        if self.answer is None:
            return "no answer (may have taken effect, or not)"
        a = self.answer
        parts = [str(a.get("status"))]
        if a.get("code"):
            parts.append(a["code"])
        if a.get("replayed"):
            parts.append("replayed")
        g = a.get("grant")
        if g:
            parts.append(f"{g.get('state')} rev {g.get('state_revision')} "
                         f"count {g.get('submission_count')}")
        r = a.get("receipt")
        if r and r.get("issue"):
            parts.append(f"issue id {r['issue'][0]} #{r['issue'][1]}")
        if "forms" in a:
            parts.append("forms " + ",".join(sorted(a["forms"])) if a["forms"] else "no forms")
        if self.reduced:
            parts.append("(answer reduced to its status)")
        return " ".join(parts)


@dataclass
class History:
    grants: dict[int, GrantModel]
    ops: list[Op]
    problems: list[str] = field(default_factory=list)


def load(paths: list[Path]) -> History:
    """Reads history files; ops with a 5xx answer lose it (outcome unknown)."""
    grants: dict[int, GrantModel] = {}
    ops: list[Op] = []
    problems: list[str] = []
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    problems.append(f"{path}:{n}: not JSON")
                    continue
                if rec.get("type") == "grant":
                    grants[int(rec["grant"])] = GrantModel(rec["digest"], int(rec["max_submissions"]))
                    continue
                if rec.get("sent") is False:
                    continue
                if rec.get("op") not in OPS:
                    problems.append(f"{path}:{n}: unknown op {rec.get('op')!r}")
                    continue
                ans = rec.get("answer")
                end = rec.get("end")
                if ans is not None and (not isinstance(ans.get("status"), int) or ans["status"] >= 500):
                    ans, end = None, None
                if ans is None:
                    end = None
                ops.append(Op(int(rec.get("id", len(ops))), str(rec.get("client", "")),
                              int(rec["grant"]), rec["op"], rec.get("args", {}),
                              float(rec["start"]), None if end is None else float(end), ans))
    return History(grants, ops, problems)


# ---------------------------------------------------------------------------
# The search
# ---------------------------------------------------------------------------


class Undecided(Exception):
    """The search exceeded its budget of explored states."""


@dataclass
class Stats:
    nodes: int = 0


@dataclass(frozen=True)
class Start:
    """Where a search starts: the grant's facts and entries, and which of the
    unanswered operations already took effect (a cut, see `minimize`)."""
    facts: Facts
    entries: Entries
    applied: frozenset = frozenset()

    @staticmethod
    def initial() -> "Start":
        return Start(GrantModel.initial(), Entries())


def linearizable(model: GrantModel, ops: list[Op], budget: int = 2_000_000,
                 stats: Stats | None = None, start: Start | None = None) -> bool:
    """Wing–Gong–Lowe search over one grant's operations (see the module doc)."""
    return _search(model, ops, budget, stats, start, collect=None)


def final_states(model: GrantModel, ops: list[Op], budget: int = 200_000,
                 start: Start | None = None) -> list[Start]:
    """Every state some linearization of `ops` can end in (answered
    operations all applied; unanswered ones applied or not)."""
    found: dict = {}
    _search(model, ops, budget, None, start, collect=found)
    return list(found.values())


def _search(model: GrantModel, ops: list[Op], budget: int, stats: Stats | None,
            start: Start | None, collect: dict | None) -> bool:
    start = start or Start.initial()
    # A read without an answer constrains nothing and changes nothing; an
    # unanswered operation that took effect before the start is gone.
    ops = [o for o in ops if not (o.pending() and (o.kind in READ_ONLY or o.id in start.applied))]
    events = []
    for i, o in enumerate(ops):
        events.append((o.start, 0, i))
        events.append((INF if o.end is None else o.end, 1, i))
    # Calls before returns at equal times: such operations overlap.
    events.sort(key=lambda ev: (ev[0], ev[1]))
    size = len(events)
    kind = [0] * (size + 1)
    opi = [0] * (size + 1)
    match = [0] * (size + 1)
    nxt = [-1] * (size + 1)
    prv = [-1] * (size + 1)
    ret_of = {}
    for j, (_, k, i) in enumerate(events, start=1):
        kind[j], opi[j] = k, i
        if k == 1:
            ret_of[i] = j
    for j in range(1, size + 1):
        if kind[j] == 0:
            match[j] = ret_of[opi[j]]
        prv[j] = j - 1
        nxt[j - 1] = j
    nxt[size] = -1

    def lift(j: int) -> None:
        nxt[prv[j]] = nxt[j]
        if nxt[j] != -1:
            prv[nxt[j]] = prv[j]
        m = match[j]
        nxt[prv[m]] = nxt[m]
        if nxt[m] != -1:
            prv[nxt[m]] = prv[m]

    def unlift(j: int) -> None:
        m = match[j]
        nxt[prv[m]] = m
        if nxt[m] != -1:
            prv[nxt[m]] = m
        nxt[prv[j]] = j
        if nxt[j] != -1:
            prv[nxt[j]] = j

    entries = start.entries.copy()
    facts = start.facts
    linearized = 0
    stack: list = []
    cache: set = set()
    st = stats if stats is not None else Stats()
    entry = nxt[0]
    while True:
        # Every answered operation is linearized when the list is empty or
        # its first return is an unanswered operation's (at infinity).
        if nxt[0] == -1 or (kind[entry] == 1 and ops[opi[entry]].end is None):
            if collect is None:
                return True
            applied = start.applied | {ops[opi[e]].id for e, _, _ in stack if ops[opi[e]].end is None}
            collect.setdefault((facts, entries.fp, applied), Start(facts, entries.copy(), applied))
            entry = -1  # backtrack to find the other end states
        if entry != -1 and kind[entry] == 0:
            i = opi[entry]
            o = ops[i]
            r = model.step(facts, entries, o)
            # An unanswered operation that would change nothing now is not
            # tried here: it stays available for later.
            if r is not None and not (o.end is None and r[0] == facts and not r[1]):
                new_facts, changes = r
                undo = entries.apply(changes)
                key = (linearized | (1 << i), new_facts, entries.fp)
                if key not in cache:
                    cache.add(key)
                    st.nodes += 1
                    if st.nodes > budget:
                        raise Undecided(f"more than {budget} states explored")
                    stack.append((entry, facts, undo))
                    facts = new_facts
                    linearized |= 1 << i
                    lift(entry)
                    entry = nxt[0]
                    continue
                entries.revert(undo)
            entry = nxt[entry]
            continue
        # A return whose operation is not linearized yet: backtrack.
        if not stack:
            return False
        entry, facts, undo = stack.pop()
        entries.revert(undo)
        linearized &= ~(1 << opi[entry])
        unlift(entry)
        entry = nxt[entry]


# ---------------------------------------------------------------------------
# Minimizing a violation
# ---------------------------------------------------------------------------


def prefix(ops: list[Op], t: float) -> list[Op]:
    """The history as it stood at time `t`: operations started by then;
    those still running lose their answers."""
    out = []
    for o in ops:
        if o.start > t:
            continue
        if o.end is not None and o.end > t:
            o = Op(o.id, o.client, o.grant, o.kind, o.args, o.start, None, None, truncated=o)
        out.append(o)
    return out


def _claims_no_effect(o: Op) -> bool:
    """An answered operation whose answer says it changed nothing: removing
    it only removes constraints."""
    if o.pending():
        return False
    if o.kind in READ_ONLY:
        return True
    status = o.answer.get("status")
    if o.kind == "submit" and status == 200:
        return True  # a replay
    return status not in (200, 201, 303)


def _reduce(o: Op) -> Op:
    return Op(o.id, o.client, o.grant, o.kind, o.args, o.start, o.end,
              {"status": o.answer["status"]}, reduced=True)


@dataclass
class Witness:
    """A small sub-history of one grant that is not linearizable: from each of
    `starts` (the states the grant can be in at `cut`, when every earlier
    operation had answered), no order of `ops` gives their answers."""
    ops: list[Op]
    culprit: Op | None
    cut: float | None = None
    starts: list[Start] = field(default_factory=lambda: [Start.initial()])


def _cut_time(h: list[Op], before: float) -> float | None:
    """The latest start time not after `before` that no operation spans
    (every operation started earlier had ended); operations that never got
    an answer do not count (they may span anything)."""
    spans = sorted((o for o in h if o.end is not None or o.truncated is not None),
                   key=lambda o: o.start)
    best, reach = None, -INF
    for o in spans:
        if o.start > before:
            break
        if reach < o.start:
            best = o.start
        reach = max(reach, INF if o.end is None else o.end)
    return best


def minimize(model: GrantModel, ops: list[Op], deadline: float, budget: int = 300_000) -> Witness:
    """Shrinks one grant's failing history (see the module doc): the shortest
    failing prefix in time, then a cut just before the operation that fails
    (the states the grant can be in there stand for everything before), then
    operations whose answers claim no effect are dropped and other answers
    reduced to their status while it still fails."""
    starts = [Start.initial()]

    def fails(h: list[Op]) -> bool:
        try:
            return all(not linearizable(model, h, budget, start=s0) for s0 in starts)
        except Undecided:
            return False  # not shown to fail: keep what we have

    ends = sorted({o.end for o in ops if o.end is not None})
    lo, hi = 0, len(ends) - 1
    if not ends or not fails(prefix(ops, ends[hi])):
        return Witness(ops, None)
    while lo < hi and time.monotonic() < deadline:
        mid = (lo + hi) // 2
        if fails(prefix(ops, ends[mid])):
            hi = mid
        else:
            lo = mid + 1
    t = ends[hi]
    h = prefix(ops, t)
    culprit = next((o for o in h if o.end == t), None)
    cut = _cut_time(h, culprit.start) if culprit is not None else None
    if cut is not None:
        before = [o for o in h if o.start < cut]
        try:
            found = final_states(model, before, budget)
        except Undecided:
            found = []
        window = [o for o in h if o.start >= cut or o.end is None]
        if 0 < len(found) <= 20:
            starts = found
            if fails(window):
                h = window
            else:
                starts, cut = [Start.initial()], None
        else:
            cut = None

    def ddmin(h: list[Op], candidates, transform) -> list[Op]:
        """Removes (transform returns None) or weakens chunks of candidates
        while the history still fails."""
        ids = [o.id for o in h if candidates(o)]
        chunk = max(1, len(ids) // 2)
        while ids and time.monotonic() < deadline:
            changed = False
            for s in range(0, len(ids), chunk):
                part = set(ids[s:s + chunk])
                trial = []
                for o in h:
                    if o.id in part:
                        o2 = transform(o)
                        if o2 is not None:
                            trial.append(o2)
                    else:
                        trial.append(o)
                if fails(trial):
                    h = trial
                    ids = [i for i in ids if i not in part]
                    changed = True
                    break
                if time.monotonic() >= deadline:
                    break
            if not changed:
                if chunk == 1:
                    break
                chunk = max(1, chunk // 2)
        return h

    keep = culprit.id if culprit is not None else None
    h = ddmin(h, lambda o: _claims_no_effect(o) and o.id != keep, lambda o: None)
    h = ddmin(h, lambda o: not o.pending() and not o.reduced and len(o.answer) > 1 and o.id != keep,
              _reduce)
    # Unanswered operations that took effect before the cut in every start
    # state are not part of the window.
    gone = frozenset.intersection(*(s0.applied for s0 in starts)) if starts else frozenset()
    h = [o for o in h if o.id not in gone and not (o.pending() and o.kind in READ_ONLY)]
    return Witness(h, culprit, cut, starts)


# ---------------------------------------------------------------------------
# Whole histories
# ---------------------------------------------------------------------------


@dataclass
class Result:
    ok: bool
    ops: int = 0
    answered: int = 0
    pending: int = 0
    grants: int = 0
    nodes: int = 0
    seconds: float = 0.0
    by_kind: dict = field(default_factory=dict)
    report: list[str] = field(default_factory=list)
    violations: int = 0

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.by_kind.items()))
        return (f"{self.ops} ops ({self.answered} answered, {self.pending} without answer) on "
                f"{self.grants} grants [{kinds}], {self.nodes} search states, "
                f"{self.seconds:.2f}s")


def check_issue_identities(h: History) -> list[str]:
    """Issues are repository-wide: each issue id is one (grant, request key)'s,
    at one index, across all grants."""
    owner: dict[int, tuple[int, str]] = {}
    index: dict[int, int] = {}
    problems = []
    for o in h.ops:
        r = (o.answer or {}).get("receipt")
        if not r or not r.get("issue"):
            continue
        iid, idx = int(r["issue"][0]), int(r["issue"][1])
        who = (o.grant, r.get("request_key"))
        if owner.setdefault(iid, who) != who:
            problems.append(f"issue id {iid} is named for grant {owner[iid][0]} key "
                            f"{owner[iid][1]} and for grant {who[0]} key {who[1]}")
        if index.setdefault(iid, idx) != idx:
            problems.append(f"issue id {iid} is named at index {index[iid]} and at {idx}")
    by_index: dict[int, int] = {}
    for iid, idx in index.items():
        if by_index.setdefault(idx, iid) != iid:
            problems.append(f"index {idx} is named for issue ids {by_index[idx]} and {iid}")
    return problems


def format_ops(ops: list[Op], t0: float, culprit: Op | None) -> list[str]:
    lines = []
    for o in sorted(ops, key=lambda o: (o.start, o.id)):
        end = "      …" if o.end is None else f"{o.end - t0:8.4f}"
        mark = "   <-- no order explains this answer" if culprit is not None and o.id == culprit.id else ""
        lines.append(f"  [{o.start - t0:8.4f} – {end}] #{o.id:<5} {o.client:<16} {o.label()} "
                     f"→ {o.answer_text()}{mark}")
    return lines


def describe(s0: Start, ops: list[Op]) -> str:
    """A start state, naming the receipts of the keys `ops` use."""
    f = s0.facts
    receipts = {k[1]: v for k, v in s0.entries.d.items() if k[0] == "key"}
    used = {o.args.get("request_key") for o in ops}
    named = []
    for key in sorted(k for k in receipts if k in used):
        issue = receipts[key][1]
        named.append(f"key {key[:8]} → " + (f"issue id {issue[0]} #{issue[1]}" if issue else "an issue"))
    others = len(receipts) - len(named)
    text = f"{f.state}, revision {f.revision}, submission_count {f.count}; receipts: "
    text += ", ".join(named + ([f"{others} other key(s)"] if others else [])) or "none"
    return text


def format_witness(gid: int, model: GrantModel, total: int, w: Witness, t0: float) -> list[str]:
    lines = [f"grant {gid} (max_submissions {model.max_submissions}) is not linearizable "
             f"({total} operations on it). Times are seconds from the history's start; an operation "
             f"without an answer may or may not have taken effect."]
    if w.cut is None:
        lines.append("  The grant starts awaiting_agent, revision 1, no receipt.")
    else:
        lines.append(f"  At {w.cut - t0:.4f} every earlier operation on the grant had answered "
                     f"(but those listed without one); every order of them leaves the grant")
        shown = list(dict.fromkeys(describe(s0, w.ops) for s0 in w.starts))
        for text in shown[:3]:
            lines.append(f"    {text}")
        if len(shown) > 3:
            lines.append(f"    (or {len(shown) - 3} more states)")
    # Unanswered operations carried from before the cut could not explain
    # it (the search included them); they are counted, not listed.
    old = [o for o in w.ops if w.cut is not None and o.pending() and o.start < w.cut]
    shown = [o for o in w.ops if o not in old]
    lines.append(f"  From there, no order of these {len(shown)} operations, consistent with their "
                 f"times, gives these answers:")
    lines += format_ops(shown, t0, w.culprit)
    if old:
        lines.append(f"  ({len(old)} operation(s) without an answer, started before {w.cut - t0:.4f}, "
                     f"are left out: with them too, no order gives these answers: "
                     f"{', '.join(f'#{o.id}' for o in old[:10])}{' …' if len(old) > 10 else ''})")
    return lines


def check(h: History, budget: int = 2_000_000, minimize_seconds: float = 60.0) -> Result:
    started = time.monotonic()
    res = Result(ok=True)
    res.ops = len(h.ops)
    res.pending = sum(1 for o in h.ops if o.pending())
    res.answered = res.ops - res.pending
    for o in h.ops:
        res.by_kind[o.kind] = res.by_kind.get(o.kind, 0) + 1
    for p in h.problems:
        res.ok = False
        res.report.append(f"history: {p}")
    per_grant: dict[int, list[Op]] = {}
    for o in h.ops:
        per_grant.setdefault(o.grant, []).append(o)
    res.grants = len(per_grant)
    t0 = min((o.start for o in h.ops), default=0.0)
    for gid in sorted(per_grant):
        ops = per_grant[gid]
        model = h.grants.get(gid)
        if model is None:
            res.ok = False
            res.report.append(f"grant {gid}: {len(ops)} ops but no grant line")
            continue
        st = Stats()
        try:
            ok = linearizable(model, ops, budget, st)
        except Undecided as e:
            res.ok = False
            res.violations += 1
            res.report.append(f"grant {gid}: undecided ({e}) over {len(ops)} ops")
            continue
        finally:
            res.nodes += st.nodes
        if ok:
            continue
        res.ok = False
        res.violations += 1
        witness = minimize(model, ops, time.monotonic() + minimize_seconds)
        res.report += format_witness(gid, model, len(ops), witness, t0)
    for p in check_issue_identities(h):
        res.ok = False
        res.violations += 1
        res.report.append(f"issues: {p}")
    res.seconds = time.monotonic() - started
    return res


def check_files(paths: list[Path], **kw) -> Result:
    return check(load(paths), **kw)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("histories", nargs="*", type=Path, help="history files (JSONL)")
    p.add_argument("--self-test", action="store_true", help="run the checker's unit tests")
    p.add_argument("--budget", type=int, default=2_000_000,
                   help="search states per grant before giving up (default 2000000)")
    args = p.parse_args()
    if args.self_test:
        import unittest
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        suite = unittest.defaultTestLoader.loadTestsFromName("linearizability_test")
        ok = unittest.TextTestRunner(verbosity=1).run(suite).wasSuccessful()
        if not args.histories:
            return 0 if ok else 1
        if not ok:
            return 1
    if not args.histories:
        p.error("name at least one history file, or --self-test")
    res = check_files(args.histories, budget=args.budget)
    for line in res.report:
        print(line)
    print(("linearizable: " if res.ok else "NOT linearizable: ") + res.summary())
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
