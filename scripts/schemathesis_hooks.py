"""Schemathesis hooks for scripts/schemathesis (loaded via SCHEMATHESIS_HOOKS).

The run's tokens belong to the logins of WRIT_ST_GUARDED_LOGINS (comma
separated: the admin and the bot). Revoking one of their tokens would end a
run with 401s or fail the script's final check that both still work; the
admin run reaches the bot's login too (it creates tokens for the users it
finds). So such a DELETE is pointed at a login that does not exist (a
syntactically valid one: the answer is a real 404 from the server) before it
is sent, in every phase.

A feed request (`GET /api/v1/events`) waits at most 1 s.
"""

import os
import sys

import schemathesis

REVOKE = "/api/v1/admin/users/{login}/tokens/{token_id}"
ABSENT = "st-guard-no-such-user"


FEED = "/api/v1/events"
GUARDED = {login.strip().lower()
           for login in os.environ.get("WRIT_ST_GUARDED_LOGINS", "").split(",")
           if login.strip()}


@schemathesis.hook
def before_call(context, case, kwargs):
    # A feed request that waits holds until an event commits or `wait` runs
    # out (up to 60 s): at most 1 s here, so the run's time goes to more
    # cases. A `wait` that is not a whole number is sent as generated.
    query = case.query
    if case.operation.path == FEED and query and str(query.get("wait", "")).isdigit():
        query["wait"] = min(int(query["wait"]), 1)
    params = case.path_parameters
    if (case.operation.path == REVOKE and case.method.upper() == "DELETE" and params
            and str(params.get("login", "")).lower() in GUARDED):
        print(f"hook: DELETE of {params.get('login')}'s token {params.get('token_id')} "
              f"sent for {ABSENT}", file=sys.stderr)
        params["login"] = ABSENT
