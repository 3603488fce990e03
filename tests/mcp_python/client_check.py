#!/usr/bin/env python3
"""Drive Writ's MCP tools with the official MCP Python SDK.

A client Writ did not write: it connects (Streamable HTTP to BASE/mcp with the
bot's bearer token, or stdio to `writ mcp-stdio` with WRIT_TOKEN), negotiates
a protocol version, lists the tools, reads one grant with
`get_agent_work_grant` and confirms it with `confirm_agent_work_grant`,
repeating the proposal schema, version and digest it read.

It prints ONE JSON line on stdout with what it saw and exits 0, or prints one
JSON line with "ok": false and an "error" and exits 1 on any unexpected
result. tests/api/mcp/python_sdk.rs runs it (python_sdk_over_http, python_sdk_over_stdio).

    client_check.py --url http://127.0.0.1:3000 --token T \
        --owner acme --repo widgets --grant-id 1 [--mode auto|legacy]
    client_check.py --stdio-command "/path/to/writ mcp-stdio --url BASE" \
        --token T --owner acme --repo widgets --grant-id 1
"""

from __future__ import annotations

import argparse
import asyncio
import builtins
import importlib.metadata
import json
import shlex
import sys
from typing import Any

import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

TOOLS = {
    "list_agent_work_grants",
    "get_agent_work_grant",
    "confirm_agent_work_grant",
    "submit_agent_work_proposal",
    "get_agent_work_submission",
}


class Unexpected(Exception):
    """A result the check did not expect."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="Writ's base URL (the endpoint is URL/mcp)")
    p.add_argument("--stdio-command", help="run this command as an MCP server over stdio instead (WRIT_TOKEN=--token)")
    p.add_argument("--token", required=True, help="the bot's native token")
    p.add_argument("--owner", required=True)
    p.add_argument("--repo", required=True)
    p.add_argument("--grant-id", required=True, type=int)
    p.add_argument(
        "--mode",
        default="auto",
        help="the SDK's connect mode: auto (probe server/discover, fall back to initialize), "
        "legacy (initialize handshake) or a modern version pin such as 2026-07-28",
    )
    p.add_argument(
        "--expect-tools",
        help="comma-separated tool names tools/list must show exactly (default: get and confirm among them)",
    )
    p.add_argument("--expect-state", default="awaiting_human", help="grant state expected after the confirm")
    p.add_argument(
        "--denied-repo",
        help="OWNER/REPO on which get_agent_work_grant must be refused with tool_not_granted",
    )
    p.add_argument("--timeout", type=float, default=90.0, help="seconds for the whole check")
    args = p.parse_args(argv)
    if (args.url is None) == (args.stdio_command is None):
        p.error("give exactly one of --url and --stdio-command")
    return args


def structured(result: Any, what: str) -> dict[str, Any]:
    """The structuredContent of a tool result, checked against its text copy."""
    content = result.structured_content
    if not isinstance(content, dict):
        raise Unexpected(f"{what}: no structuredContent object: {result!r}")
    texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
    if texts:
        try:
            as_text = json.loads(texts[0])
        except ValueError as e:
            raise Unexpected(f"{what}: text content is not JSON: {e}") from None
        if as_text != content:
            raise Unexpected(f"{what}: text content differs from structuredContent")
    return content


def ok_result(result: Any, what: str, status: int) -> dict[str, Any]:
    content = structured(result, what)
    if result.is_error:
        raise Unexpected(f"{what}: isError: {json.dumps(content)[:400]}")
    if content.get("native_status") != status:
        raise Unexpected(f"{what}: native_status {content.get('native_status')!r}, expected {status}")
    return content


async def check(args: argparse.Namespace, seen: dict[str, Any]) -> None:
    if args.stdio_command:
        argv = shlex.split(args.stdio_command)
        seen["transport"] = "stdio"
        server = StdioServerParameters(command=argv[0], args=argv[1:], env={"WRIT_TOKEN": args.token})
        async with Client(server, mode=args.mode) as client:
            await exercise(client, args, seen)
        return
    seen["transport"] = "streamable-http"
    headers = {"Authorization": f"Bearer {args.token}"}
    timeout = httpx2.Timeout(30.0, read=60.0)
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        endpoint = args.url.rstrip("/") + "/mcp"
        async with Client(streamable_http_client(endpoint, http_client=http), mode=args.mode) as client:
            await exercise(client, args, seen)


async def exercise(client: Client, args: argparse.Namespace, seen: dict[str, Any]) -> None:
    seen["protocol_version"] = client.protocol_version
    info = client.server_info
    seen["server_info"] = None if info is None else {"name": info.name, "version": info.version}

    listed = await client.list_tools()
    names = [t.name for t in listed.tools]
    seen["tools"] = names
    for tool in listed.tools:
        schema = tool.input_schema or {}
        if schema.get("type") != "object" or schema.get("additionalProperties") is not False:
            raise Unexpected(f"tools/list: {tool.name} has an open input schema")
    if not set(names) <= TOOLS or len(set(names)) != len(names):
        raise Unexpected(f"tools/list: unexpected tools {names}")
    if args.expect_tools is not None:
        expected = sorted(n for n in args.expect_tools.split(",") if n)
        if sorted(names) != expected:
            raise Unexpected(f"tools/list: {sorted(names)}, expected {expected}")
    elif not {"get_agent_work_grant", "confirm_agent_work_grant"} <= set(names):
        raise Unexpected(f"tools/list: get and confirm are not both listed: {names}")

    target = {"owner": args.owner, "repo": args.repo, "grant_id": args.grant_id}
    got = ok_result(await client.call_tool("get_agent_work_grant", target), "get", 200)
    grant = got.get("grant")
    if not isinstance(grant, dict) or grant.get("id") != args.grant_id:
        raise Unexpected(f"get: not grant {args.grant_id}: {json.dumps(got)[:400]}")
    digest = grant.get("proposal_digest")
    if not isinstance(digest, str) or len(digest) != 64:
        raise Unexpected("get: no proposal_digest")
    seen["get"] = {"native_status": got["native_status"], "state": grant.get("state"), "proposal_digest": digest}

    confirm_args = dict(
        target,
        proposal_schema="agent_work_grant.v1",
        proposal_version=1,
        proposal_digest=digest,
    )
    confirmed = ok_result(await client.call_tool("confirm_agent_work_grant", confirm_args), "confirm", 200)
    after = confirmed.get("grant") or {}
    seen["confirm"] = {"native_status": confirmed["native_status"], "state": after.get("state")}
    if after.get("id") != args.grant_id or after.get("state") != args.expect_state:
        raise Unexpected(f"confirm: grant {after.get('id')!r} in state {after.get('state')!r}, expected {args.expect_state}")

    if args.denied_repo:
        owner, _, repo = args.denied_repo.partition("/")
        denied = await client.call_tool("get_agent_work_grant", {"owner": owner, "repo": repo, "grant_id": args.grant_id})
        content = structured(denied, "denied get")
        if not denied.is_error or content.get("code") != "tool_not_granted":
            raise Unexpected(f"denied get: not refused with tool_not_granted: {json.dumps(content)[:400]}")
        seen["denied"] = {"code": content["code"], "reason": content.get("reason"), "repository": content.get("repository")}


def leaves(e: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, as anyio task groups raise them."""
    if isinstance(e, getattr(builtins, "BaseExceptionGroup", ())):
        return [leaf for inner in e.exceptions for leaf in leaves(inner)]
    return [e]


def describe(e: BaseException) -> str:
    return "; ".join(f"{type(leaf).__name__}: {leaf}" for leaf in leaves(e))


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    seen: dict[str, Any] = {
        "sdk": "mcp",
        "sdk_version": importlib.metadata.version("mcp"),
        "python": sys.version.split()[0],
        "mode": args.mode,
    }
    try:
        asyncio.run(asyncio.wait_for(check(args, seen), timeout=args.timeout))
    except Unexpected as e:
        seen.update(ok=False, error=str(e))
    except TimeoutError:
        seen.update(ok=False, error=f"timed out after {args.timeout}s")
    except Exception as e:  # noqa: BLE001 - report any failure as one line
        unexpected = [leaf for leaf in leaves(e) if isinstance(leaf, Unexpected)]
        seen.update(ok=False, error=str(unexpected[0]) if unexpected else describe(e)[:800])
    else:
        seen["ok"] = True
    print(json.dumps(seen, sort_keys=True), flush=True)
    return 0 if seen["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
