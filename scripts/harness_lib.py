"""Shared driver code of Writ's reliability harnesses (standard library only).

What is here:

- ``Checks``: named pass/fail checks; every harness ends with exactly one line
  ``N passed, N failed`` and a non-zero exit status when anything failed.
- ``ensure_binary``: the release binary, built with ``cargo build --release``
  when missing.
- ``Database``: a fresh database per run (a SQLite file in the run directory,
  or ``writ_harness_<random>`` on the PostgreSQL at 127.0.0.1) and SQL reads
  for invariant checks (``sqlite3`` / the ``psql`` client).
- ``Server``: one ``writ serve`` process on 127.0.0.1 that can be started,
  SIGKILLed, restarted and stopped; its stderr goes to a log file that is
  scanned for internal errors and panics.
- ``Browser`` (a human: login, prepare and approve grants through the forms)
  and ``Bot`` (a token: confirm, submit, read back) over ``http.client``.
- ``setup_world`` / ``create_active_grant``: the fixture of every harness.
- ``check_submission_invariants``: the receipt/issue/counter invariants of
  quality.md "Reliability harnesses", read from the database.

Only 127.0.0.1 is ever contacted. Every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import history as hist

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BINARY = REPO_ROOT / "target" / "release" / "writ"
DEFAULT_POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/postgres"
LOOPBACK = "127.0.0.1"
PROPOSAL_SCHEMA = "agent_work_grant.v1"
PROPOSAL_VERSION = 1
OWNER = "root"
OWNER_PASSWORD = "harness-password-1"
REPO = "r1"

_START = time.monotonic()


def log(message: str) -> None:
    """Progress goes to stderr; stdout carries the checks and the final line."""
    print(f"[{time.monotonic() - _START:7.2f}s] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------


class Checks:
    """Named checks; `finish` prints `N passed, N failed` last and exits."""

    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0
        self.failures: list[str] = []
        self._lock = threading.Lock()

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        with self._lock:
            if ok:
                self.passed += 1
                print(f"PASS {name}" + (f" ({detail})" if detail else ""), flush=True)
            else:
                self.failed += 1
                self.failures.append(name)
                print(f"FAIL {name}" + (f": {detail}" if detail else ""), flush=True)
        return ok

    def skip(self, name: str, why: str) -> None:
        """A check that cannot run yet; counted neither way, but visible."""
        print(f"SKIP {name}: {why}", flush=True)

    def finish(self) -> None:
        print(f"{self.passed} passed, {self.failed} failed", flush=True)
        sys.exit(1 if self.failed else 0)


def run_main(body, checks: Checks) -> None:
    """Runs `body(checks)`; a crash of the harness itself is a failed check.

    SIGTERM/SIGINT become exceptions so `finally` blocks stop the servers and
    drop the database.
    """

    def _terminate(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, _terminate)
    try:
        body(checks)
    except KeyboardInterrupt as e:
        checks.check("harness ran to completion", False, f"interrupted: {e}")
    except Exception as e:  # noqa: BLE001 - any harness crash is a failure
        traceback.print_exc()
        checks.check("harness ran to completion", False, f"{type(e).__name__}: {e}")
    checks.finish()


def common_args(description: str, backends=("sqlite", "postgres")) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    if len(backends) > 1:
        p.add_argument("--backend", choices=backends, default=backends[0])
    p.add_argument("--binary", default=str(DEFAULT_BINARY),
                   help="writ binary (default target/release/writ, built if missing)")
    p.add_argument("--postgres-url",
                   default=os.environ.get("WRIT_HARNESS_POSTGRES_URL", DEFAULT_POSTGRES_URL),
                   help="admin connection used to create and drop the run's database "
                        "(env WRIT_HARNESS_POSTGRES_URL)")
    p.add_argument("--seed", type=int, default=None, help="random seed (printed when not given)")
    p.add_argument("--keep", action="store_true", help="keep the run directory and database")
    p.add_argument("--history", default=None,
                   help="where to write the run's history (JSONL; default "
                        "test-output/histories/<harness>-<backend>.jsonl)")
    return p


HISTORY_DIR = REPO_ROOT / "test-output" / "histories"


def open_history(args, harness: str, backend: str) -> hist.History:
    """The run's history file (see history.py); `--history` overrides the place."""
    path = Path(args.history) if args.history else HISTORY_DIR / f"{harness}-{backend}.jsonl"
    log(f"recording the history in {path}")
    return hist.History(path)


def check_history(checks: Checks, history: hist.History, prefix: str = ""):
    """Closes the history and checks it with linearizability.py; a violation
    prints the minimal sub-history of the grant concerned."""
    import linearizability

    history.close()
    res = linearizability.check_files([history.path])
    for line in res.report:
        print(line, flush=True)
    checks.check(f"{prefix}history is linearizable against the per-grant model (checker: "
                 f"linearizability.py)", res.ok, f"{res.summary()}; {history.path}")
    log(f"LINEARIZABILITY {history.path.name}: {res.summary()}")
    return res


def seed_random(seed: int | None) -> int:
    if seed is None:
        seed = random.SystemRandom().randrange(1, 2**31)
    random.seed(seed)
    log(f"random seed {seed} (rerun with --seed {seed})")
    return seed


# --------------------------------------------------------------------------
# Binary
# --------------------------------------------------------------------------


def ensure_binary(path: str) -> str:
    """Returns an executable writ; builds the release binary if it is missing."""
    binary = Path(path)
    if binary.is_file() and os.access(binary, os.X_OK):
        return str(binary)
    if binary.resolve() != DEFAULT_BINARY.resolve():
        raise RuntimeError(f"writ binary {binary} does not exist")
    log("target/release/writ is missing: cargo build --release")
    subprocess.run(["cargo", "build", "--release"], cwd=REPO_ROOT, check=True, timeout=3600)
    if not binary.is_file():
        raise RuntimeError("cargo build --release did not produce target/release/writ")
    return str(binary)


def clean_env() -> dict[str, str]:
    """The caller's environment without any WRIT_* variable (settings that could
    redirect Writ; the log filter stays at its default, `info`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WRIT_")}
    env["NO_COLOR"] = "1"
    return env


# --------------------------------------------------------------------------
# Database
# --------------------------------------------------------------------------


def _require_loopback(url: str) -> urllib.parse.SplitResult:
    parts = urllib.parse.urlsplit(url)
    if parts.hostname != LOOPBACK:
        raise RuntimeError(f"refusing a PostgreSQL URL whose host is not {LOOPBACK}: {url}")
    return parts


class Database:
    """The run's own database and SQL reads on it."""

    def __init__(self, backend: str, url: str, *, sqlite_path: Path | None = None,
                 admin_url: str | None = None, name: str | None = None) -> None:
        self.backend = backend
        self.url = url
        self.sqlite_path = sqlite_path
        self.admin_url = admin_url
        self.name = name

    @classmethod
    def create(cls, backend: str, workdir: Path, postgres_url: str) -> "Database":
        if backend == "sqlite":
            path = workdir / "writ.db"
            return cls("sqlite", f"sqlite://{path}", sqlite_path=path)
        parts = _require_loopback(postgres_url)
        name = f"writ_harness_{uuid.uuid4().hex[:12]}"
        _psql(postgres_url, f"CREATE DATABASE {name}")
        url = urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))
        log(f"created PostgreSQL database {name}")
        return cls("postgres", url, admin_url=postgres_url, name=name)

    def rows(self, sql: str) -> list[dict]:
        """Runs a SELECT; rows as dicts with native ints/strings/None."""
        if self.backend == "sqlite":
            con = sqlite3.connect(f"file:{self.sqlite_path}?mode=ro", uri=True, timeout=30)
            try:
                con.row_factory = sqlite3.Row
                return [dict(r) for r in con.execute(sql).fetchall()]
            finally:
                con.close()
        wrapped = f"SELECT coalesce(json_agg(t), '[]'::json) FROM ({sql}) t"
        return json.loads(_psql(self.url, wrapped))

    def scalar(self, sql: str):
        rows = self.rows(sql)
        if not rows:
            return None
        return next(iter(rows[0].values()))

    def table_exists(self, name: str) -> bool:
        if self.backend == "sqlite":
            sql = f"SELECT count(*) AS n FROM sqlite_master WHERE type = 'table' AND name = '{name}'"
        else:
            sql = (f"SELECT count(*) AS n FROM information_schema.tables "
                   f"WHERE table_schema = 'public' AND table_name = '{name}'")
        return int(self.scalar(sql)) > 0

    def drop(self) -> None:
        if self.backend == "postgres" and self.name:
            _psql(self.admin_url, f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")
            log(f"dropped PostgreSQL database {self.name}")


def _psql(url: str, sql: str) -> str:
    _require_loopback(url)
    out = subprocess.run(
        ["psql", url, "-X", "-v", "ON_ERROR_STOP=1", "-At", "-c", sql],
        capture_output=True, text=True, timeout=120,
    )
    if out.returncode != 0:
        raise RuntimeError(f"psql failed ({out.returncode}): {out.stderr.strip()}")
    return out.stdout.strip()


# --------------------------------------------------------------------------
# CLI and server processes
# --------------------------------------------------------------------------


def writ_cli(binary: str, url: str, *args: str) -> str:
    """Runs `writ --database-url URL ARGS...` and returns its stdout."""
    out = subprocess.run([binary, "--database-url", url, *args], capture_output=True,
                         text=True, timeout=120, env=clean_env())
    if out.returncode != 0:
        raise RuntimeError(f"writ {' '.join(args)} failed: {out.stderr.strip()[-2000:]}")
    return out.stdout.strip()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


_SERVERS: list["Server"] = []
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")


class Server:
    """One `writ serve` on 127.0.0.1:port; restartable on the same port."""

    def __init__(self, binary: str, url: str, port: int, logdir: Path, name: str = "writ",
                 settings: dict[str, str] | None = None, nofile: int | None = None,
                 config: Path | None = None) -> None:
        """`settings`: extra WRIT_* variables; `nofile`: the process's descriptor limit;
        `config`: a TOML settings file (`writ --config`)."""
        self.binary = binary
        self.url = url
        self.port = port
        self.config = config
        self.settings = settings or {}
        self.nofile = nofile
        self.log_path = logdir / f"{name}-{port}.log"
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.kills = 0
        _SERVERS.append(self)

    @property
    def base(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 60.0) -> tuple[bool, str]:
        """Starts the process and waits for `writ ready` and /readyz 200."""
        if self.alive():
            raise RuntimeError("server already running")
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as logf:
            logf.write(f"\n==== start #{self.starts + 1} at {time.time():.3f} ====\n".encode())
            logf.flush()
            config = ["--config", str(self.config)] if self.config else []
            self.proc = subprocess.Popen(
                [self.binary, "--database-url", self.url, *config, "serve",
                 "--bind", f"{LOOPBACK}:{self.port}", "--public-url", self.base],
                stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                env={**clean_env(), **self.settings}, preexec_fn=self._limit,
            )
        self.starts += 1
        began = time.monotonic()
        deadline = began + timeout
        logged_ready = False
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False, f"exited with {self.proc.returncode} before ready: {self.log_tail()}"
            if not logged_ready:
                with open(self.log_path, "rb") as f:
                    f.seek(offset)
                    logged_ready = b"writ ready" in f.read()
            if logged_ready:
                try:
                    r = request(self.port, "GET", "/readyz", timeout=5)
                    if r.status == 200:
                        return True, f"ready in {time.monotonic() - began:.2f}s"
                except (OSError, http.client.HTTPException):
                    pass
            time.sleep(0.02)
        return False, f"not ready within {timeout}s: {self.log_tail()}"

    def _limit(self) -> None:
        if self.nofile is not None:
            import resource
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))

    def kill(self) -> None:
        """SIGKILL, no grace."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.kills += 1
        if self.proc is not None:
            self.proc.wait(timeout=30)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM (graceful shutdown), SIGKILL after `timeout`."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log(f"server {self.port} ignored SIGTERM for {timeout}s; SIGKILL")
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait(timeout=30)
        return self.proc.returncode

    def log_tail(self, n: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def problems(self) -> list[str]:
        """Log lines of internal errors, panics or any ERROR (there must be none)."""
        try:
            text = _ANSI_RE.sub("", self.log_path.read_text(errors="replace"))
        except OSError:
            return []
        return [line for line in text.splitlines()
                if "internal error" in line or "panicked" in line or " ERROR " in line]


def stop_all_servers() -> None:
    for s in _SERVERS:
        try:
            s.stop(timeout=10)
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


# --------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------


@dataclass
class Response:
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None

    def headers_named(self, name: str) -> list[str]:
        name = name.lower()
        return [v for k, v in self.headers if k.lower() == name]

    def json(self):
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


def request(port: int, method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None, timeout: float = 15.0) -> Response:
    """One request on a fresh connection to 127.0.0.1:port.

    Raises OSError / http.client.HTTPException when the connection fails.
    """
    conn = http.client.HTTPConnection(LOOPBACK, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
        return Response(r.status, r.getheaders(), data)
    finally:
        conn.close()


# --------------------------------------------------------------------------
# Humans (browser forms) and bots (token API)
# --------------------------------------------------------------------------

_FORM_RE = re.compile(r'<form\b[^>]*\baction="([^"]*)"[^>]*>(.*?)</form>', re.S)
_HIDDEN_RE = re.compile(r'<input\b[^>]*\btype="hidden"[^>]*>', re.S)
_ATTR_RE = re.compile(r'\b(name|value)="([^"]*)"')


def form_fields(page: str, action: str) -> dict[str, str] | None:
    """Hidden inputs of the form posting to `action`, or None if absent."""
    for m in _FORM_RE.finditer(page):
        if html.unescape(m.group(1)) != action:
            continue
        fields = {}
        for inp in _HIDDEN_RE.finditer(m.group(2)):
            attrs = {k: html.unescape(v) for k, v in _ATTR_RE.findall(inp.group(0))}
            if "name" in attrs:
                fields[attrs["name"]] = attrs.get("value", "")
        return fields
    return None


GRANT_FORMS = ("approve", "withdraw", "edit")


class Browser:
    """A human's browser session on one server (cookie `writ_session`).

    With `history` set, opening a grant page and posting its approve or
    withdraw form are recorded (history.py)."""

    def __init__(self, port: int, history: "hist.History | None" = None, name: str = "root") -> None:
        self.port = port
        self.cookie: str | None = None
        self.history = history
        self.name = name

    @property
    def origin(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def _keep_cookie(self, r: Response) -> None:
        for value in r.headers_named("set-cookie"):
            first = value.split(";", 1)[0]
            name, _, v = first.partition("=")
            if name.strip() == "writ_session":
                self.cookie = v.strip() or None

    def get(self, path: str) -> Response:
        headers = {"Cookie": f"writ_session={self.cookie}"} if self.cookie else {}
        r = request(self.port, "GET", path, headers=headers)
        self._keep_cookie(r)
        return r

    def post_form(self, path: str, fields: dict[str, str], timeout: float = 30.0) -> Response:
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "Origin": self.origin,
            "Sec-Fetch-Site": "same-origin",
        }
        if self.cookie:
            headers["Cookie"] = f"writ_session={self.cookie}"
        body = urllib.parse.urlencode(fields).encode()
        r = request(self.port, "POST", path, body=body, headers=headers, timeout=timeout)
        self._keep_cookie(r)
        return r

    def login(self, login: str, password: str) -> None:
        page = self.get("/user/login")
        fields = form_fields(page.text, "/user/login")
        if page.status != 200 or fields is None or not self.cookie:
            raise RuntimeError(f"login page: {page.status} {page.text[:300]}")
        r = self.post_form("/user/login", {**fields, "login": login, "password": password})
        if r.status != 303:
            raise RuntimeError(f"login as {login}: {r.status} {r.text[:300]}")

    def prepare_grant(self, owner: str, repo: str, agent: str, task: str, summary: str,
                      max_submissions: int) -> int:
        page = self.get(f"/{owner}/{repo}/agent-work-grants/new")
        action = f"/{owner}/{repo}/agent-work-grants"
        fields = form_fields(page.text, action)
        if page.status != 200 or fields is None:
            raise RuntimeError(f"new grant page: {page.status} {page.text[:300]}")
        r = self.post_form(action, {**fields, "agent": agent, "task": task, "summary": summary,
                                    "max_submissions": str(max_submissions),
                                    "expires_at": "", "mcp_requirements": ""})
        location = r.header("location") or ""
        m = re.fullmatch(rf"/{re.escape(owner)}/{re.escape(repo)}/agent-work-grants/(\d+)", location)
        if r.status != 303 or not m:
            raise RuntimeError(f"prepare grant: {r.status} {location} {r.text[:300]}")
        return int(m.group(1))

    def _recorded(self, op: str, grant_id: int, args: dict, send, answer):
        return hist.recorded(self.history, op, grant_id, args, self.name, self.port, send, answer)

    def open_grant(self, owner: str, repo: str, grant_id: int) -> tuple[Response, dict[str, dict[str, str]]]:
        """Opens the grant page: the page and its grant forms' hidden fields by name."""
        base = f"/{owner}/{repo}/agent-work-grants/{grant_id}"
        forms: dict[str, dict[str, str]] = {}

        def send():
            r = self.get(base)
            for name in GRANT_FORMS:
                fields = form_fields(r.text, f"{base}/{name}") if r.status == 200 else None
                if fields is not None:
                    forms[name] = fields
            return r

        page = self._recorded("open", grant_id, {}, send, lambda r: hist.page_answer(r, list(forms)))
        return page, forms

    def grant_form(self, owner: str, repo: str, grant_id: int, form: str) -> dict[str, str]:
        """Opens the grant page and returns one form's nonce and revision."""
        page, forms = self.open_grant(owner, repo, grant_id)
        if page.status != 200 or form not in forms:
            raise RuntimeError(f"grant page {grant_id} has no {form} form: {page.status} {page.text[:300]}")
        return forms[form]

    def approve_form(self, owner: str, repo: str, grant_id: int) -> dict[str, str]:
        """Opens the grant page and returns the approve form's nonce and revision."""
        return self.grant_form(owner, repo, grant_id, "approve")

    def post_grant_form(self, owner: str, repo: str, grant_id: int, form: str,
                        fields: dict[str, str]) -> Response:
        """Posts an approve or withdraw form as the page gave it."""
        args = {"state_revision": int(fields.get("state_revision", 0) or 0),
                "nonce": fields.get("nonce", "")}
        return self._recorded(form, grant_id, args,
                              lambda: self.post_form(f"/{owner}/{repo}/agent-work-grants/{grant_id}/{form}",
                                                     fields),
                              lambda r: {"status": r.status})

    def post_approve(self, owner: str, repo: str, grant_id: int, fields: dict[str, str]) -> Response:
        return self.post_grant_form(owner, repo, grant_id, "approve", fields)

    def approve(self, owner: str, repo: str, grant_id: int) -> None:
        r = self.post_approve(owner, repo, grant_id, self.approve_form(owner, repo, grant_id))
        if r.status != 303:
            raise RuntimeError(f"approve grant {grant_id}: {r.status} {r.text[:300]}")


@dataclass
class Bot:
    """A bot's token. With `history` set, its grant calls are recorded (history.py)."""
    login: str
    token: str
    user_id: int
    history: "hist.History | None" = None

    def _recorded(self, op: str, gid: int, args: dict, port: int, send, submit: bool = False):
        return hist.recorded(self.history, op, gid, args, self.login, port, send,
                             lambda r: hist.api_answer(r, submit))

    def _headers(self, json_body: bool = False) -> dict[str, str]:
        h = {"Authorization": f"token {self.token}", "Accept": "application/json"}
        if json_body:
            h["Content-Type"] = "application/json"
        return h

    def get_grant(self, port: int, owner: str, repo: str, gid: int) -> Response:
        return self._recorded("read", gid, {}, port, lambda: request(
            port, "GET", f"/api/v1/repos/{owner}/{repo}/agent-work-grants/{gid}",
            headers=self._headers()))

    def confirm_body(self, digest: str) -> bytes:
        return json.dumps({"proposal_schema": PROPOSAL_SCHEMA, "proposal_version": PROPOSAL_VERSION,
                           "proposal_digest": digest}).encode()

    def confirm(self, port: int, owner: str, repo: str, gid: int, digest: str) -> Response:
        return self._recorded("confirm", gid, {"proposal_digest": digest}, port, lambda: request(
            port, "POST", f"/api/v1/repos/{owner}/{repo}/agent-work-grants/{gid}/confirm",
            body=self.confirm_body(digest), headers=self._headers(True)))

    def submit_path(self, owner: str, repo: str, gid: int) -> str:
        return f"/api/v1/repos/{owner}/{repo}/agent-work-grants/{gid}/issues"

    def submit_body(self, digest: str, key: str, title: str, body: str) -> bytes:
        return json.dumps({"proposal_schema": PROPOSAL_SCHEMA, "proposal_version": PROPOSAL_VERSION,
                           "proposal_digest": digest, "request_key": key,
                           "title": title, "body": body}, ensure_ascii=False).encode()

    @staticmethod
    def submit_args(digest: str, key: str, title: str, body: str) -> dict:
        """A submit as the history records it."""
        return {"request_key": key, "content_digest": content_digest(digest, title, body),
                "proposal_digest": digest}

    def submit(self, port: int, owner: str, repo: str, gid: int, digest: str, key: str,
               title: str, body: str, timeout: float = 15.0) -> Response:
        return self._recorded("submit", gid, self.submit_args(digest, key, title, body), port,
                              lambda: request(port, "POST", self.submit_path(owner, repo, gid),
                                              body=self.submit_body(digest, key, title, body),
                                              headers=self._headers(True), timeout=timeout),
                              submit=True)

    def readback(self, port: int, owner: str, repo: str, gid: int, key: str,
                 timeout: float = 15.0) -> Response:
        return self._recorded("readback", gid, {"request_key": key}, port, lambda: request(
            port, "GET", f"/api/v1/repos/{owner}/{repo}/agent-work-grants/{gid}/submissions/{key}",
            headers=self._headers(), timeout=timeout))


def content_digest(proposal_digest: str, title: str, body: str) -> str:
    """Writ's content digest: SHA-256 of the RFC 8785 JSON of the three fields."""
    canonical = json.dumps({"body": body, "proposal_digest": proposal_digest, "title": title},
                           sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def new_key() -> str:
    return str(uuid.uuid4())


_WORDS = ["crash", "replica", "ledger", "grant", "receipt", "writ", "handoff", "key",
          "ü", "é", "✓", "🦀", "naïve", "日本"]


def random_content(tag: str) -> tuple[str, str]:
    title = f"{tag} " + " ".join(random.choice(_WORDS) for _ in range(random.randint(1, 6)))
    body_lines = [" ".join(random.choice(_WORDS) for _ in range(random.randint(0, 12)))
                  for _ in range(random.randint(0, 4))]
    return title[:200], "\n".join(body_lines)


# --------------------------------------------------------------------------
# Fixture
# --------------------------------------------------------------------------


@dataclass
class World:
    binary: str
    db: Database
    workdir: Path
    owner: str = OWNER
    password: str = OWNER_PASSWORD
    repo: str = REPO
    bots: list[Bot] = field(default_factory=list)
    repository_id: int = 0


def setup_world(binary: str, db: Database, workdir: Path, n_bots: int) -> World:
    """Admin, bots with tokens, one private repository, bots as readers: all by CLI."""
    w = World(binary=binary, db=db, workdir=workdir)
    writ_cli(binary, db.url, "admin", "bootstrap", "--login", w.owner, "--password", w.password)
    writ_cli(binary, db.url, "admin", "repo", "--owner", w.owner, "--name", w.repo, "--private")
    for i in range(1, n_bots + 1):
        login = f"bot{i}"
        user = json.loads(writ_cli(binary, db.url, "admin", "user", "--login", login, "--kind", "bot"))
        token = writ_cli(binary, db.url, "admin", "token", "create", "--login", login, "--name", "t",
                         "--scope", "read:repository", "--scope", "write:issue",
                         "--scope", "read:issue")
        writ_cli(binary, db.url, "admin", "collaborator", "set", "--repo", f"{w.owner}/{w.repo}",
                 "--login", login, "--permission", "read")
        w.bots.append(Bot(login=login, token=token.splitlines()[-1].strip(), user_id=int(user["id"])))
    w.repository_id = int(db.scalar(f"SELECT id FROM repositories WHERE name = '{w.repo}'"))
    log(f"world: {w.owner}/{w.repo} (id {w.repository_id}), bots {[b.login for b in w.bots]}")
    return w


def prepare_and_confirm(w: World, port: int, browser: Browser, bot: Bot,
                        max_submissions: int = 1_000_000) -> tuple[int, str]:
    """Prepares a grant for `bot` and has the bot confirm it; returns (id, digest)."""
    gid = browser.prepare_grant(w.owner, w.repo, bot.login, task=f"harness work for {bot.login}",
                                summary="reliability harness", max_submissions=max_submissions)
    r = bot.get_grant(port, w.owner, w.repo, gid)
    if r.status != 200:
        raise RuntimeError(f"bot reads grant {gid}: {r.status} {r.text[:300]}")
    digest = r.json()["grant"]["proposal_digest"]
    if bot.history:
        bot.history.grant(gid, digest, max_submissions)
    r = bot.confirm(port, w.owner, w.repo, gid, digest)
    if r.status != 200 or r.json()["grant"]["state"] != "awaiting_human":
        raise RuntimeError(f"confirm grant {gid}: {r.status} {r.text[:300]}")
    return gid, digest


def create_active_grant(w: World, port: int, browser: Browser, bot: Bot,
                        max_submissions: int = 1_000_000) -> tuple[int, str]:
    """Prepare (human form) → confirm (bot API) → approve (human form)."""
    gid, digest = prepare_and_confirm(w, port, browser, bot, max_submissions)
    browser.approve(w.owner, w.repo, gid)
    r = bot.get_grant(port, w.owner, w.repo, gid)
    g = r.json()["grant"]
    if g["state"] != "active" or g["proposal_digest"] != digest:
        raise RuntimeError(f"grant {gid} not active after approval: {g['state']}")
    return gid, digest


# --------------------------------------------------------------------------
# Invariants (read from the database, server stopped or not)
# --------------------------------------------------------------------------


@dataclass
class Ack:
    """A request the client saw answered 200/201."""
    grant_id: int
    key: str
    content_digest: str
    issue_id: int
    issue_index: int


def snapshot_static(db: Database) -> dict:
    """Everything a submission must not change (grant counters excluded)."""
    return {
        "grants": db.rows("SELECT id, repository_id, agent_id, issuer_id, approver_id, state, "
                          "state_revision, proposal_digest, max_submissions, expires_at, "
                          "confirmed_at, approved_at, revoked_at FROM grants ORDER BY id"),
        "grant_events": db.scalar("SELECT count(*) AS n FROM grant_events"),
        "users": db.scalar("SELECT count(*) AS n FROM users"),
        "access_tokens": db.scalar("SELECT count(*) AS n FROM access_tokens"),
        "repositories": db.rows("SELECT id, owner_id, name, private FROM repositories ORDER BY id"),
        "collaborators": db.scalar("SELECT count(*) AS n FROM collaborators"),
    }


def check_submission_invariants(checks: Checks, db: Database, acked: dict[tuple[int, str], Ack],
                                sent: dict[tuple[int, str], str], grant_ids: list[int],
                                before: dict | None = None, prefix: str = "") -> None:
    """The receipt invariants of quality.md, each one named check.

    `acked`: (grant, key) → what the client was told (200/201).
    `sent`: (grant, key) → content digest of every key the clients ever sent.
    `before`: `snapshot_static` taken before the run ("nothing else changed").
    """
    p = prefix
    receipts = db.rows("SELECT id, grant_id, request_key, content_digest, proposal_digest, agent_id, "
                       "issue_id, issue_index, repository_id, evaluation_id FROM submissions")
    issues = db.rows("SELECT id, repository_id, issue_index, title, body, poster_id FROM issues")
    by_key: dict[tuple[int, str], list[dict]] = {}
    for r in receipts:
        by_key.setdefault((int(r["grant_id"]), r["request_key"]), []).append(r)
    issue_by_id = {int(i["id"]): i for i in issues}
    receipts_by_issue: dict[int, list[dict]] = {}
    for r in receipts:
        receipts_by_issue.setdefault(int(r["issue_id"]), []).append(r)

    # 1. Every acknowledged request has its receipt, with the content and issue it was told.
    bad = []
    for k, a in acked.items():
        rs = by_key.get(k, [])
        if len(rs) != 1:
            bad.append(f"{k}: {len(rs)} receipts")
        elif (rs[0]["content_digest"] != a.content_digest or int(rs[0]["issue_id"]) != a.issue_id
              or int(rs[0]["issue_index"]) != a.issue_index):
            bad.append(f"{k}: receipt {rs[0]['content_digest'][:12]}/issue {rs[0]['issue_id']} "
                       f"but client was told {a.content_digest[:12]}/issue {a.issue_id}")
    checks.check(f"{p}every acknowledged (200/201) key has exactly one receipt with its content "
                 f"digest and issue", not bad, f"{len(acked)} acknowledged" if not bad
                 else f"{len(bad)} bad, e.g. {bad[:3]}")

    # 2. Each (grant, key) has at most one receipt.
    dup = {k: len(v) for k, v in by_key.items() if len(v) > 1}
    checks.check(f"{p}each (grant, request_key) has at most one receipt", not dup,
                 f"{len(by_key)} keys" if not dup else f"duplicates: {list(dup.items())[:3]}")

    # 3. Every receipt is for a key a client sent, with the content it sent.
    strange = [f"{k}" for k in by_key if k not in sent]
    wrong = [f"{k}" for k, rs in by_key.items() if k in sent and rs[0]["content_digest"] != sent[k]]
    checks.check(f"{p}every receipt is for a key a client sent, with that key's content",
                 not strange and not wrong,
                 f"{len(receipts)} receipts, {len(sent)} keys sent, {len(sent) - len(by_key)} sent "
                 f"but never committed" if not (strange or wrong)
                 else f"unknown keys {strange[:3]}, other content {wrong[:3]}")

    # 4. Every issue created by a submission has exactly one receipt.
    multi = {i: len(rs) for i, rs in receipts_by_issue.items() if len(rs) > 1}
    checks.check(f"{p}every issue created by a submission has exactly one receipt", not multi,
                 f"{len(receipts_by_issue)} issues with receipts" if not multi
                 else f"issues with several receipts: {list(multi.items())[:3]}")

    # 5. Each receipt's issue exists at the committed repository and index, posted by the
    #    agent, with exactly the content the digest covers.
    mismatched = []
    for r in receipts:
        i = issue_by_id.get(int(r["issue_id"]))
        if i is None:
            mismatched.append(f"receipt {r['id']}: issue {r['issue_id']} missing")
        elif (int(i["repository_id"]) != int(r["repository_id"])
              or int(i["issue_index"]) != int(r["issue_index"])):
            mismatched.append(f"receipt {r['id']}: issue at {i['repository_id']}#{i['issue_index']}, "
                              f"receipt says {r['repository_id']}#{r['issue_index']}")
        elif int(i["poster_id"]) != int(r["agent_id"]):
            mismatched.append(f"receipt {r['id']}: poster {i['poster_id']} != agent {r['agent_id']}")
        elif content_digest(r["proposal_digest"], i["title"], i["body"]) != r["content_digest"]:
            mismatched.append(f"receipt {r['id']}: issue text does not match the content digest")
    checks.check(f"{p}every receipt's issue exists with the same repository, index, poster and "
                 f"content", not mismatched,
                 f"{len(receipts)} receipts" if not mismatched else f"{mismatched[:3]}")

    # 6. No issue without a receipt (this run creates issues only through submissions).
    orphans = [int(i["id"]) for i in issues if int(i["id"]) not in receipts_by_issue]
    checks.check(f"{p}no issue exists without a receipt", not orphans,
                 f"{len(issues)} issues" if not orphans else f"orphan issues {orphans[:5]} "
                 f"(of {len(orphans)})")

    # 7. submission_count of each grant equals its receipts.
    counts = {int(g["id"]): int(g["submission_count"])
              for g in db.rows("SELECT id, submission_count FROM grants")}
    per_grant: dict[int, int] = {}
    for r in receipts:
        per_grant[int(r["grant_id"])] = per_grant.get(int(r["grant_id"]), 0) + 1
    off = {g: (counts[g], per_grant.get(g, 0)) for g in counts if counts[g] != per_grant.get(g, 0)}
    checks.check(f"{p}submission_count of each grant equals its receipt count", not off,
                 ", ".join(f"grant {g}: {counts[g]}" for g in sorted(counts) if g in grant_ids)
                 if not off else f"(count, receipts) by grant: {off}")

    # 8. Issue indexes are never reused: the repository counter is past every index.
    reuse = db.rows("SELECT r.id, r.next_issue_index, max(i.issue_index) AS max_index "
                    "FROM repositories r JOIN issues i ON i.repository_id = r.id "
                    "GROUP BY r.id, r.next_issue_index HAVING max(i.issue_index) >= r.next_issue_index")
    checks.check(f"{p}each repository's next_issue_index is past all its issue indexes", not reuse,
                 "" if not reuse else f"{reuse}")

    # 10. Every receipt committed with its audit outcome: a created receipt and its call's
    #     `tool_calls` outcome (201) are written in one transaction, so after any crash there
    #     are exactly as many submit calls recorded as 201 as there are receipts, for each
    #     (agent, repository) pair. (The record keeps argument names, never values, so it
    #     names no grant or key: the finest pairing it allows is by agent and repository.)
    if db.table_exists("tool_calls"):
        audited = db.rows("SELECT agent_id, repository, COUNT(*) AS n FROM tool_calls "
                          "WHERE lower(tool) = 'submit_agent_work_proposal' AND native_status = 201 "
                          "GROUP BY agent_id, repository")
        recorded = {(int(a["agent_id"]), a["repository"]): int(a["n"]) for a in audited}
        made: dict[tuple[int, str], int] = {}
        for r in db.rows("SELECT agent_id, repository_full_name FROM submissions"):
            pair = (int(r["agent_id"]), r["repository_full_name"])
            made[pair] = made.get(pair, 0) + 1
        off = {f"agent {a} on {repo}": (recorded.get((a, repo), 0), made.get((a, repo), 0))
               for (a, repo) in set(recorded) | set(made)
               if recorded.get((a, repo), 0) != made.get((a, repo), 0)}
        checks.check(f"{p}every receipt has exactly one submit call audited with 201, "
                     f"per agent and repository", not off,
                     f"{sum(recorded.values())} audited 201s, {len(receipts)} receipts, "
                     f"{len(made)} pairs" if not off else f"(audited, receipts): {off}")

    # 9. Every receipt has its handoff evaluation.
    # ------------------------------------------------------------------------------------
    # HANDOFF EVALUATION INVARIANT (issue 4, admission.md). Until the handoff admission
    # evaluation is persisted (table `admission_evaluations`) this check is skipped. Once the
    # table exists it runs: every receipt names an evaluation of phase 'handoff' for the same
    # grant and proposal digest whose status admitted it (allowed/warning), and every
    # non-blocked handoff evaluation belongs to exactly one receipt (a blocked one commits
    # alone, by design; anything else would be an evaluation without its submission).
    # ------------------------------------------------------------------------------------
    if not db.table_exists("admission_evaluations"):
        checks.skip(f"{p}every receipt has its handoff evaluation",
                    "the handoff admission evaluation is not built yet (issue 4)")
    else:
        evals = {int(e["id"]): e for e in db.rows(
            "SELECT id, grant_id, phase, status, proposal_digest FROM admission_evaluations "
            "WHERE phase = 'handoff'")}
        missing = []
        used: dict[int, int] = {}
        for r in receipts:
            eid = r["evaluation_id"]
            e = evals.get(int(eid)) if eid is not None else None
            if e is None:
                missing.append(f"receipt {r['id']}: evaluation {eid} is not a handoff evaluation")
            elif (int(e["grant_id"]) != int(r["grant_id"]) or e["status"] not in ("allowed", "warning")
                  or e["proposal_digest"] != r["proposal_digest"]):
                missing.append(f"receipt {r['id']}: evaluation {eid} is for grant {e['grant_id']}, "
                               f"status {e['status']}")
            else:
                used[int(eid)] = used.get(int(eid), 0) + 1
        shared = [e for e, n in used.items() if n > 1]
        stray = [i for i, e in evals.items() if e["status"] != "blocked" and i not in used]
        checks.check(f"{p}every receipt has its handoff evaluation, and every admitting handoff "
                     f"evaluation has its receipt", not missing and not shared and not stray,
                     f"{len(receipts)} receipts, {len(evals)} handoff evaluations"
                     if not (missing or shared or stray) else
                     f"{len(missing)} receipts without, e.g. {missing[:3]}; evaluations on several "
                     f"receipts {shared[:3]}; admitting evaluations without receipt "
                     f"{stray[:5]} (of {len(stray)})")

    # 10. Nothing else changed.
    if before is not None:
        after = snapshot_static(db)
        changed = [k for k in before if before[k] != after[k]]
        checks.check(f"{p}nothing but issues, receipts and counters changed", not changed,
                     "" if not changed else f"changed: {changed}")


def check_server_logs(checks: Checks, servers: list[Server], prefix: str = "") -> None:
    problems = []
    for s in servers:
        problems += [f"{s.port}: {line[:400]}" for line in s.problems()]
    checks.check(f"{prefix}server logs show no internal error or panic", not problems,
                 "" if not problems else f"{len(problems)} lines, e.g. {problems[:3]}")


class Run:
    """A run directory and database, cleaned up at the end (logs kept on failure)."""

    def __init__(self, args, backend: str, checks: Checks) -> None:
        self.args = args
        self.backend = backend
        self.checks = checks
        self.workdir = Path(tempfile.mkdtemp(prefix=f"writ-harness-{backend}-"))
        log(f"run directory {self.workdir}")
        self.db: Database | None = None

    def __enter__(self) -> "Run":
        try:
            self.binary = ensure_binary(self.args.binary)
            self.db = Database.create(self.backend, self.workdir, self.args.postgres_url)
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, *exc) -> None:
        stop_all_servers()
        keep = self.args.keep or self.checks.failed > 0 or exc[0] is not None
        if self.db is not None and not self.args.keep:
            try:
                self.db.drop()
            except Exception as e:  # noqa: BLE001
                log(f"could not drop the database: {e}")
        if keep and any(self.workdir.iterdir()):
            log(f"kept {self.workdir} (server logs)")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)
