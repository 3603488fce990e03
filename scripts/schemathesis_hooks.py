"""Schemathesis hooks for scripts/schemathesis (loaded via SCHEMATHESIS_HOOKS).

The run's admin token belongs to WRIT_ST_GUARDED_LOGIN. Revoking one of that
user's tokens would end the run with 401s, so such a DELETE is pointed at a
login that does not exist (a syntactically valid one: the answer is a real
404 from the server) before it is sent, in every phase.

A feed request (`GET /api/v1/events`) waits at most 1 s.
"""

import os

import schemathesis

REVOKE = "/api/v1/admin/users/{login}/tokens/{token_id}"
ABSENT = "st-guard-no-such-user"


FEED = "/api/v1/events"


@schemathesis.hook
def before_call(context, case, kwargs):
    # A feed request that waits holds until an event commits or `wait` runs
    # out (up to 60 s): at most 1 s here, so the run's time goes to more
    # cases. A `wait` that is not a whole number is sent as generated.
    query = case.query
    if case.operation.path == FEED and query and str(query.get("wait", "")).isdigit():
        query["wait"] = min(int(query["wait"]), 1)
    guarded = os.environ.get("WRIT_ST_GUARDED_LOGIN", "").lower()
    params = case.path_parameters
    if (case.operation.path == REVOKE and case.method.upper() == "DELETE" and params
            and str(params.get("login", "")).lower() == guarded):
        params["login"] = ABSENT
