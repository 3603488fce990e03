//! Inputs and credentials against the fake: strict inputs never reach it,
//! path segments stay in their route, and a reflected credential is never
//! shown.

use percent_encoding::percent_decode_str;
use serde_json::{Map, Value, json};

use super::{
    FAKE_GRANT, FAKE_KEY, FAKE_OWNER, FAKE_REPO, FAKE_TOKEN, Fake, MARKER, Write, assert_uncertain,
    http, json_response,
};
use crate::helpers::within_time_limit;
use crate::mcp_stdio::{Cred, Stdio, is_error, native_refusal, tool_error};
use crate::world::BOT;

#[tokio::test]
async fn fake_strict_inputs_are_refused_before_any_request() {
    within_time_limit(async {
        let fake = Fake::axum(|_| http(500, &[], MARKER)).await;
        let mut adapter = Stdio::start(&fake.base, FAKE_TOKEN).await;
        let base = || {
            Write::Submit
                .arguments()
                .as_object()
                .expect("object")
                .clone()
        };
        let mut cases: Vec<(&str, Map<String, Value>)> = Vec::new();
        for (member, value) in [
            ("grant_id", json!(1.0)),
            ("grant_id", json!("7")),
            ("grant_id", json!(0)),
            ("grant_id", json!(-7)),
            ("grant_id", json!(u64::MAX)),
            ("grant_id", json!(true)),
            ("proposal_version", json!(1.0)),
            ("proposal_version", json!("1")),
            ("owner", json!("")),
            ("owner", json!(7)),
            ("repo", json!("r".repeat(101))),
            ("title", json!(null)),
            ("body", json!(["x"])),
            ("request_key", json!(1)),
            ("approved_by", json!("alice")),
        ] {
            let mut args = base();
            args.insert(member.to_owned(), value);
            cases.push((member, args));
        }
        let mut missing = base();
        missing.remove("request_key");
        cases.push(("missing request_key", missing));
        for (case, args) in cases {
            let result = adapter
                .call("submit_agent_work_proposal", Value::Object(args.clone()))
                .await;
            tool_error(&result, "invalid_input");
            // The same bad member, when confirm has it too.
            if ["request_key", "title", "body", "missing request_key"].contains(&case) {
                continue;
            }
            let mut confirm = args;
            for member in ["request_key", "title", "body"] {
                confirm.remove(member);
            }
            let result = adapter
                .call("confirm_agent_work_grant", Value::Object(confirm))
                .await;
            tool_error(&result, "invalid_input");
        }
        for args in [
            json!({"page": 0}),
            json!({"page": 1.0}),
            json!({"state": "open"}),
            json!({"limit": 100}),
        ] {
            let result = adapter.call("list_agent_work_grants", args).await;
            tool_error(&result, "invalid_input");
        }
        for args in [
            json!({"owner": FAKE_OWNER, "repo": FAKE_REPO, "grant_id": 1.0}),
            json!({"owner": FAKE_OWNER, "repo": FAKE_REPO}),
            json!({"owner": FAKE_OWNER, "repo": FAKE_REPO, "grant_id": 7, "request_key": FAKE_KEY}),
        ] {
            let result = adapter.call("get_agent_work_grant", args).await;
            tool_error(&result, "invalid_input");
        }
        let result = adapter.call("create_issue", json!({})).await;
        assert!(is_error(&result), "{result}");
        adapter.finish().await;
        assert_eq!(
            fake.requests(),
            Vec::<String>::new(),
            "a refused input reached upstream"
        );
    })
    .await;
}

/// The percent-decoded segments of a request target's path.
fn segments(target: &str) -> Vec<String> {
    let path = target.split('?').next().unwrap_or_default();
    path.split('/')
        .map(|s| percent_decode_str(s).decode_utf8_lossy().into_owned())
        .collect()
}

/// `.` and `..` percent-encode to `%2E`/`%2E%2E`, which URL parsing treats
/// as dot segments and removes: the adapter must refuse such names itself or
/// otherwise keep every request on its own route.
#[tokio::test]
async fn fake_owner_and_repo_stay_one_path_segment_each() {
    within_time_limit(async {
        let fake = Fake::axum(|_| {
            json_response(404, &json!({"code": "not_found", "message": "not found"}))
        })
        .await;
        let mut adapter = Stdio::start(&fake.base, FAKE_TOKEN).await;
        let grant = |owner: &str, repo: &str| -> Vec<String> {
            ["", "api", "v1", "repos", owner, repo, "agent-work-grants", "7"]
                .iter()
                .map(|s| (*s).to_owned())
                .collect()
        };
        // (tool, arguments, the path segments the request must have)
        let mut calls: Vec<(&str, Value, Vec<String>)> = Vec::new();
        for (owner, repo) in [
            ("..", FAKE_REPO),
            (FAKE_OWNER, ".."),
            ("..", ".."),
            (".", FAKE_REPO),
            ("%2E%2E", FAKE_REPO),
            ("%2e%2e", FAKE_REPO),
            ("acme/widgets", "x"),
            ("a?b", "c#d"),
            ("a\\b", "w"),
        ] {
            calls.push((
                "get_agent_work_grant",
                json!({"owner": owner, "repo": repo, "grant_id": FAKE_GRANT}),
                grant(owner, repo),
            ));
            let mut readback = grant(owner, repo);
            readback.extend(["submissions".to_owned(), FAKE_KEY.to_owned()]);
            calls.push((
                "get_agent_work_submission",
                json!({"owner": owner, "repo": repo, "grant_id": FAKE_GRANT, "request_key": FAKE_KEY}),
                readback,
            ));
            let mut submit = Write::Submit.arguments();
            submit["owner"] = json!(owner);
            submit["repo"] = json!(repo);
            let mut issues = grant(owner, repo);
            issues.push("issues".to_owned());
            calls.push(("submit_agent_work_proposal", submit, issues));
        }
        // The request key is one segment too.
        for key in ["..", ".", "a/b", "%2E%2E"] {
            let mut readback = grant(FAKE_OWNER, FAKE_REPO);
            readback.extend(["submissions".to_owned(), key.to_owned()]);
            calls.push((
                "get_agent_work_submission",
                json!({"owner": FAKE_OWNER, "repo": FAKE_REPO, "grant_id": FAKE_GRANT, "request_key": key}),
                readback,
            ));
        }
        let mut misrouted = Vec::new();
        for (tool, args, expected) in calls {
            let before = fake.seen().len();
            let result = adapter.call(tool, args.clone()).await;
            assert!(is_error(&result), "{tool} {args}: {result}");
            let seen = fake.seen();
            let new = &seen[before..];
            if new.is_empty() {
                // Refused locally: fine, as long as it says so.
                tool_error(&result, "invalid_input");
                continue;
            }
            assert_eq!(new.len(), 1, "{tool} {args}: {new:?}");
            if segments(&new[0].target) != expected {
                misrouted.push(format!(
                    "{tool} owner={} repo={} request_key={} -> {} {}",
                    args["owner"], args["repo"], args["request_key"], new[0].method, new[0].target
                ));
                continue;
            }
            native_refusal(&result, 404, "not_found");
        }
        adapter.finish().await;
        assert!(
            misrouted.is_empty(),
            "requests left their route:\n{}",
            misrouted.join("\n")
        );
    })
    .await;
}

/// Spec: errors never carry a credential; the seed: reflected credentials
/// are not exposed. This includes the message of a well-formed native error.
#[tokio::test]
async fn fake_reflected_credential_is_never_shown() {
    within_time_limit(async {
        // The upstream echoes the Authorization header it got into its
        // answer: a native error message, a malformed body, a Location.
        // None of it may reach a result, with Bearer or Basic.
        let fake = Fake::axum(|seen| {
            let auth = seen.authorization.clone().unwrap_or_default();
            if seen.target.ends_with("/confirm") {
                json_response(
                    409,
                    &json!({"code": "grant_not_active", "message": format!("refused for {auth}")}),
                )
            } else if seen.target.ends_with("/issues") {
                http(201, &[("content-type", "application/json")], format!("{{\"oops\": \"{auth}\""))
            } else if seen.target.contains("/submissions/") {
                let location = format!("/steal?auth={}", auth.replace(' ', "+"));
                http(302, &[("location", location.as_str())], auth)
            } else {
                json_response(
                    401,
                    &json!({"code": "unauthenticated", "message": format!("bad credential {auth}")}),
                )
            }
        })
        .await;
        let calls = [
            ("confirm_agent_work_grant", Write::Confirm.arguments()),
            ("submit_agent_work_proposal", Write::Submit.arguments()),
            (
                "get_agent_work_submission",
                json!({"owner": FAKE_OWNER, "repo": FAKE_REPO, "grant_id": FAKE_GRANT, "request_key": FAKE_KEY}),
            ),
            (
                "get_agent_work_grant",
                json!({"owner": FAKE_OWNER, "repo": FAKE_REPO, "grant_id": FAKE_GRANT}),
            ),
        ];
        let mut leaks = Vec::new();
        for cred in [Cred::Env(FAKE_TOKEN), Cred::Basic(BOT, FAKE_TOKEN)] {
            let scheme = match cred {
                Cred::Basic(..) => "Basic",
                _ => "Bearer",
            };
            let mut adapter = Stdio::start_with(&fake.base, cred, FAKE_TOKEN).await;
            let secrets = adapter.secrets.clone();
            for (tool, args) in &calls {
                let answer = adapter
                    .request_unchecked("tools/call", json!({"name": tool, "arguments": args}))
                    .await;
                let result = &answer["result"];
                assert!(is_error(result), "{scheme} {tool}: {answer}");
                if secrets.iter().any(|s| answer.to_string().contains(s.as_str())) {
                    leaks.push(format!("{scheme} {tool}: {answer}"));
                    continue;
                }
                match *tool {
                    "confirm_agent_work_grant" => {
                        native_refusal(result, 409, "grant_not_active");
                    }
                    "submit_agent_work_proposal" => {
                        assert_uncertain(Write::Submit, result, "reflected body")
                    }
                    "get_agent_work_grant" => {
                        native_refusal(result, 401, "unauthenticated");
                    }
                    _ => {}
                }
            }
            adapter.finish().await;
        }
        assert_eq!(fake.seen().len(), 2 * calls.len());
        assert!(
            leaks.is_empty(),
            "the credential reached a result:\n{}",
            leaks.join("\n")
        );
    })
    .await;
}
