"""Unit tests of scripts/linearizability.py on small hand-written histories.

    python3 scripts/linearizability.py --self-test
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import unittest
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
import linearizability as lin  # noqa: E402

DIGEST = "d" * 64
OTHER = "e" * 64
GRANT = 7


def facts(state: str, rev: int, count: int) -> dict:
    return {"state": state, "state_revision": rev, "submission_count": count}


class Builder:
    """Builds one grant's history op by op."""

    def __init__(self, max_submissions: int = 10) -> None:
        self.model = lin.GrantModel(DIGEST, max_submissions)
        self.ops: list[lin.Op] = []

    def op(self, kind: str, start: float, end: float | None, answer: dict | None,
           client: str = "c", grant: int = GRANT, **args) -> lin.Op:
        o = lin.Op(len(self.ops), client, grant, kind, args, start, end, answer)
        self.ops.append(o)
        return o

    def confirm(self, start, end, status, grant_facts, code=None, digest=DIGEST, **kw):
        ans = {"status": status, "grant": grant_facts}
        if code:
            ans["code"] = code
        return self.op("confirm", start, end, ans if end is not None else None,
                       proposal_digest=digest, **kw)

    def post(self, form, start, end, status, revision, nonce, **kw):
        return self.op(form, start, end, {"status": status} if end is not None else None,
                       state_revision=revision, nonce=nonce, **kw)

    def submit(self, start, end, key, status, grant_facts=None, issue=None, code=None,
               content=None, replayed=None, **kw):
        content = content or f"content-{key}"
        ans = None
        if end is not None:
            ans = {"status": status}
            if code:
                ans["code"] = code
            if grant_facts:
                ans["grant"] = grant_facts
            if issue is not None:
                ans["receipt"] = {"request_key": key, "content_digest": content,
                                  "issue": list(issue), "status": "submitted"}
            ans["replayed"] = bool(replayed) if replayed is not None else status == 200
        return self.op("submit", start, end, ans, request_key=key, content_digest=content,
                       proposal_digest=DIGEST, **kw)

    def readback(self, start, end, key, status, grant_facts=None, issue=None, content=None):
        ans = {"status": status}
        if grant_facts:
            ans["grant"] = grant_facts
        if issue is not None:
            ans["receipt"] = {"request_key": key, "content_digest": content or f"content-{key}",
                              "issue": list(issue), "status": "submitted"}
        return self.op("readback", start, end, ans, request_key=key)

    def active(self, t: float = 0.0) -> None:
        """confirm → approve, sequentially, ending before `t + 3`."""
        self.confirm(t, t + 1, 200, facts("awaiting_human", 2, 0))
        self.post("approve", t + 2, t + 3, 303, 2, f"n{t}")

    def ok(self) -> bool:
        return lin.linearizable(self.model, self.ops)


class Linearizable(unittest.TestCase):
    def test_sequential_lifecycle(self):
        b = Builder()
        b.confirm(0, 1, 200, facts("awaiting_human", 2, 0))
        b.confirm(2, 3, 200, facts("awaiting_human", 2, 0))  # a retry: unchanged
        b.op("open", 4, 5, {"status": 200, "grant": facts("awaiting_human", 2, 0),
                             "forms": ["approve", "edit", "withdraw"]})
        b.post("approve", 6, 7, 303, 2, "n1")
        b.submit(8, 9, "k1", 201, facts("active", 3, 1), (100, 1))
        b.submit(10, 11, "k1", 200, facts("active", 3, 1), (100, 1))
        b.readback(12, 13, "k1", 200, facts("active", 3, 1), (100, 1))
        b.readback(12, 13, "k2", 404)
        b.post("withdraw", 14, 15, 303, 3, "n2")
        b.submit(16, 17, "k1", 200, facts("revoked", 4, 1), (100, 1))  # replay after withdraw
        b.submit(16, 17, "k2", 409, facts("revoked", 4, 1), code="grant_revoked")
        self.assertTrue(b.ok())

    def test_overlapping_submits_answered_out_of_order(self):
        # k2's request started first and ended last, but committed second.
        b = Builder()
        b.active()
        b.submit(10, 20, "k2", 201, facts("active", 3, 2), (101, 2))
        b.submit(11, 12, "k1", 201, facts("active", 3, 1), (100, 1))
        self.assertTrue(b.ok())

    def test_cas_race_one_winner(self):
        b = Builder()
        b.confirm(0, 1, 200, facts("awaiting_human", 2, 0))
        b.post("approve", 2, 5, 409, 2, "a")
        b.post("withdraw", 2, 5, 303, 2, "b")
        b.confirm(6, 7, 409, facts("revoked", 3, 0), code="grant_revoked")
        self.assertTrue(b.ok())

    def test_same_nonce_twice(self):
        b = Builder()
        b.confirm(0, 1, 200, facts("awaiting_human", 2, 0))
        b.post("approve", 2, 5, 403, 2, "same")
        b.post("approve", 2, 5, 303, 2, "same")
        self.assertTrue(b.ok())

    def test_limit_and_conflict(self):
        b = Builder(max_submissions=1)
        b.active()
        b.submit(10, 11, "k1", 201, facts("active", 3, 1), (100, 1))
        b.submit(12, 13, "k2", 409, facts("active", 3, 1), code="submission_limit")
        b.submit(12, 13, "k1", 409, facts("active", 3, 1), code="request_key_conflict", content="other")
        b.submit(12, 13, "k1", 200, facts("active", 3, 1), (100, 1))
        self.assertTrue(b.ok())


class NotLinearizable(unittest.TestCase):
    def test_lost_update_on_the_counter(self):
        b = Builder()
        b.active()
        b.submit(10, 12, "k1", 201, facts("active", 3, 1), (100, 1))
        b.submit(10, 12, "k2", 201, facts("active", 3, 1), (101, 2))
        self.assertFalse(b.ok())

    def test_both_forms_of_one_revision_win(self):
        b = Builder()
        b.confirm(0, 1, 200, facts("awaiting_human", 2, 0))
        b.post("approve", 2, 5, 303, 2, "a")
        b.post("withdraw", 2, 5, 303, 2, "b")
        self.assertFalse(b.ok())

    def test_stale_form_wins(self):
        b = Builder()
        b.confirm(0, 1, 200, facts("awaiting_human", 2, 0))
        b.post("approve", 2, 3, 303, 2, "a")
        b.post("withdraw", 4, 5, 303, 2, "b")  # displayed revision 2, grant is at 3
        self.assertFalse(b.ok())

    def test_replay_refused_at_the_limit(self):
        b = Builder(max_submissions=1)
        b.active()
        b.submit(10, 11, "k1", 201, facts("active", 3, 1), (100, 1))
        b.submit(12, 13, "k1", 409, facts("active", 3, 1), code="submission_limit")
        self.assertFalse(b.ok())

    def test_past_the_limit(self):
        b = Builder(max_submissions=1)
        b.active()
        b.submit(10, 12, "k1", 201, {"state": "active", "state_revision": 3, "submission_count": 1},
                 (100, 1))
        b.submit(10, 12, "k2", 201, None, (101, 2))
        self.assertFalse(b.ok())

    def test_two_issues_for_one_key(self):
        b = Builder()
        b.active()
        b.submit(10, 12, "k1", 201, None, (100, 1))
        b.submit(10, 12, "k1", 201, None, (101, 2))
        self.assertFalse(b.ok())

    def test_readback_names_another_issue(self):
        b = Builder()
        b.active()
        b.submit(10, 11, "k1", 201, facts("active", 3, 1), (100, 1))
        b.readback(12, 13, "k1", 200, facts("active", 3, 1), (999, 9))
        self.assertFalse(b.ok())

    def test_submit_before_approval_answer(self):
        b = Builder()
        b.confirm(0, 1, 200, facts("awaiting_human", 2, 0))
        b.submit(2, 3, "k1", 201, None, (100, 1))
        b.post("approve", 4, 5, 303, 2, "a")
        self.assertFalse(b.ok())


class Pending(unittest.TestCase):
    def test_lost_answer_resolved_by_readback_and_replay(self):
        b = Builder()
        b.active()
        b.submit(10, None, "k1", None)  # dropped connection
        b.readback(11, 12, "k1", 200, facts("active", 3, 1), (100, 1))
        b.submit(13, 14, "k1", 200, facts("active", 3, 1), (100, 1))
        self.assertTrue(b.ok())

    def test_lost_answer_never_applied(self):
        b = Builder()
        b.active()
        b.submit(10, None, "k1", None)
        b.readback(11, 12, "k1", 404)
        b.submit(13, 14, "k1", 201, facts("active", 3, 1), (100, 1))
        self.assertTrue(b.ok())

    def test_lost_answer_applied_late(self):
        # The dropped request commits after the first readback missed it.
        b = Builder()
        b.active()
        b.submit(10, None, "k1", None)
        b.readback(11, 12, "k1", 404)
        b.readback(13, 14, "k1", 200, facts("active", 3, 1), (100, 1))
        self.assertTrue(b.ok())

    def test_lost_confirm(self):
        b = Builder()
        b.confirm(0, None, None, None)
        b.op("read", 2, 3, {"status": 200, "grant": facts("awaiting_human", 2, 0)})
        self.assertTrue(b.ok())

    def test_pending_cannot_act_before_it_starts(self):
        b = Builder()
        b.active()
        b.readback(10, 11, "k1", 200, facts("active", 3, 1), (100, 1))
        b.submit(12, None, "k1", None)
        self.assertFalse(b.ok())

    def test_pending_applied_once_at_most(self):
        b = Builder()
        b.active()
        b.submit(10, None, "k1", None)
        b.op("read", 11, 12, {"status": 200, "grant": facts("active", 3, 2)})
        self.assertFalse(b.ok())


class Files(unittest.TestCase):
    def write(self, lines: list[dict]) -> Path:
        f = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)
        for line in lines:
            f.write(json.dumps(line) + "\n")
        f.close()
        self.addCleanup(Path(f.name).unlink)
        return Path(f.name)

    def test_5xx_is_no_answer_and_unsent_is_dropped(self):
        path = self.write([
            {"type": "grant", "grant": 1, "digest": DIGEST, "max_submissions": 3},
            {"type": "op", "id": 1, "grant": 1, "op": "confirm", "args": {"proposal_digest": DIGEST},
             "start": 0, "end": 1, "answer": {"status": 503, "code": "storage_unavailable"}},
            {"type": "op", "id": 2, "grant": 1, "op": "confirm", "args": {"proposal_digest": DIGEST},
             "start": 0, "end": 1, "answer": None, "sent": False},
            {"type": "op", "id": 3, "grant": 1, "op": "read", "args": {}, "start": 2, "end": 3,
             "answer": {"status": 200, "grant": facts("awaiting_human", 2, 0)}},
        ])
        h = lin.load([path])
        self.assertEqual(len(h.ops), 2)
        self.assertIsNone(h.ops[0].answer)
        self.assertTrue(lin.check(h).ok)

    def test_one_issue_for_two_grants(self):
        lines = [{"type": "grant", "grant": g, "digest": DIGEST, "max_submissions": 3} for g in (1, 2)]
        n = 0
        for g in (1, 2):
            for kind, args, ans in (
                    ("confirm", {"proposal_digest": DIGEST},
                     {"status": 200, "grant": facts("awaiting_human", 2, 0)}),
                    ("approve", {"state_revision": 2, "nonce": f"n{g}"}, {"status": 303}),
                    ("submit", {"request_key": f"k{g}", "content_digest": "c", "proposal_digest": DIGEST},
                     {"status": 201, "receipt": {"request_key": f"k{g}", "content_digest": "c",
                                                 "issue": [50, 5]}})):
                n += 1
                lines.append({"type": "op", "id": n, "grant": g, "op": kind, "args": args,
                              "start": n, "end": n + 0.5, "answer": ans})
        res = lin.check(lin.load([self.write(lines)]))
        self.assertFalse(res.ok)
        self.assertIn("issue id 50", "\n".join(res.report))


class Minimize(unittest.TestCase):
    def test_witness_is_small_and_names_the_culprit(self):
        b = Builder(max_submissions=3)
        b.active()
        t = 10.0
        for n in range(1, 4):
            b.submit(t, t + 0.5, f"k{n}", 201, facts("active", 3, n), (100 + n, n))
            b.readback(t + 0.6, t + 0.7, f"k{n}", 200, facts("active", 3, n), (100 + n, n))
            b.op("read", t + 0.6, t + 0.8, {"status": 200, "grant": facts("active", 3, n)})
            t += 1
        # The replay of k1 is refused at the limit: the violation.
        bad = b.submit(t, t + 0.5, "k1", 409, facts("active", 3, 3), code="submission_limit")
        for n in range(5):
            t += 1
            b.op("read", t, t + 0.5, {"status": 200, "grant": facts("active", 3, 3)})
        self.assertFalse(b.ok())
        w = lin.minimize(b.model, b.ops, time.monotonic() + 30)
        text = "\n".join(lin.format_witness(GRANT, b.model, len(b.ops), w, 0))
        self.assertEqual(w.culprit.id, bad.id)
        for s0 in w.starts:
            self.assertFalse(lin.linearizable(b.model, w.ops, start=s0))
        # The cut before the replay leaves the grant at its limit with k1's receipt.
        self.assertEqual([o.id for o in w.ops], [bad.id], text)
        self.assertEqual(len(w.starts), 1, text)
        self.assertIn("active, revision 3, submission_count 3", text)
        self.assertIn("key k1 → issue id 101 #1", text)


if __name__ == "__main__":
    unittest.main()
