"""Schemathesis hooks for scripts/schemathesis (loaded via SCHEMATHESIS_HOOKS).

The run's admin token belongs to WRIT_ST_GUARDED_LOGIN. Revoking one of that
user's tokens would end the run with 401s, so such a DELETE is pointed at a
login that does not exist (a syntactically valid one: the answer is a real
404 from the server) before it is sent, in every phase.
"""

import os

import schemathesis

REVOKE = "/api/v1/admin/users/{login}/tokens/{token_id}"
ABSENT = "st-guard-no-such-user"


@schemathesis.hook
def before_call(context, case, kwargs):
    guarded = os.environ.get("WRIT_ST_GUARDED_LOGIN", "").lower()
    params = case.path_parameters
    if (case.operation.path == REVOKE and case.method.upper() == "DELETE" and params
            and str(params.get("login", "")).lower() == guarded):
        params["login"] = ABSENT
