//! Reads and listing against the fake: lost responses, redirects, and
//! pages continued by `X-Total-Count`, never by `Link`.

use serde_json::{Value, json};

use super::{
    FAKE_DIGEST, FAKE_GRANT, FAKE_KEY, FAKE_OWNER, FAKE_REPO, FAKE_TOKEN, Fake, MARKER, Raw,
    fake_grant, grant_path, http, json_response,
};
use crate::helpers::within_time_limit;
use crate::mcp_stdio::{Stdio, is_error, ok, tool_error};

#[tokio::test]
async fn fake_read_lost_response_is_upstream_unavailable() {
    within_time_limit(async {
        let reads = [
            (
                "get_agent_work_grant",
                json!({"owner": FAKE_OWNER, "repo": FAKE_REPO, "grant_id": FAKE_GRANT}),
                format!("GET {}", grant_path(FAKE_OWNER, FAKE_REPO, FAKE_GRANT)),
            ),
            (
                "get_agent_work_submission",
                json!({"owner": FAKE_OWNER, "repo": FAKE_REPO, "grant_id": FAKE_GRANT, "request_key": FAKE_KEY}),
                format!(
                    "GET {}/submissions/",
                    grant_path(FAKE_OWNER, FAKE_REPO, FAKE_GRANT)
                ),
            ),
            (
                "list_agent_work_grants",
                json!({}),
                "GET /api/v1/agent-work-grants?page=1&limit=30".to_owned(),
            ),
        ];
        for (tool, args, line) in reads {
            let fake = Fake::raw(Raw::Close).await;
            let mut adapter = Stdio::start(&fake.base, FAKE_TOKEN).await;
            let result = adapter.call(tool, args).await;
            adapter.finish().await;
            let content = tool_error(&result, "upstream_unavailable");
            assert!(content.get("readback").is_none(), "{tool}: {result}");
            let requests = fake.requests();
            assert_eq!(requests.len(), 1, "{tool}: {requests:?}");
            assert!(requests[0].starts_with(&line), "{tool}: {requests:?}");
        }
    })
    .await;
}

#[tokio::test]
async fn fake_read_redirect_is_not_followed() {
    within_time_limit(async {
        let fake = Fake::axum(|seen| {
            if seen.target.starts_with("/api/v1/repos/") {
                http(302, &[("location", "/api/v1/elsewhere")], MARKER)
            } else {
                json_response(
                    200,
                    &json!({"grant": fake_grant(FAKE_GRANT, "active", FAKE_DIGEST)}),
                )
            }
        })
        .await;
        let mut adapter = Stdio::start(&fake.base, FAKE_TOKEN).await;
        let result = adapter
            .call(
                "get_agent_work_grant",
                json!({"owner": FAKE_OWNER, "repo": FAKE_REPO, "grant_id": FAKE_GRANT}),
            )
            .await;
        adapter.finish().await;
        assert!(is_error(&result), "{result}");
        assert_eq!(
            result["structuredContent"]["native_status"], 302,
            "{result}"
        );
        assert!(!result.to_string().contains("elsewhere"), "{result}");
        assert!(!result.to_string().contains(MARKER), "{result}");
        assert_eq!(
            fake.requests(),
            [format!(
                "GET {}",
                grant_path(FAKE_OWNER, FAKE_REPO, FAKE_GRANT)
            )]
        );
    })
    .await;
}

/// A list page of the fake: grants `first..=last`.
fn fake_page(first: i64, last: i64) -> Value {
    Value::Array(
        (first..=last)
            .map(|id| fake_grant(id, "awaiting_agent", FAKE_DIGEST))
            .collect(),
    )
}

#[tokio::test]
async fn fake_list_continues_by_total_count_never_by_link() {
    within_time_limit(async {
        let fake = Fake::axum(|seen| {
            let (first, last) = match seen.target.as_str() {
                "/api/v1/agent-work-grants?page=1&limit=30" => (1, 30),
                "/api/v1/agent-work-grants?page=2&limit=30" => (31, 60),
                "/api/v1/agent-work-grants?page=3&limit=30" => (61, 61),
                // A followed Link lands here and looks like a page.
                _ => (100, 129),
            };
            http(
                200,
                &[
                    ("content-type", "application/json"),
                    ("x-total-count", "61"),
                    (
                        "link",
                        "<http://other-host.example.invalid/api/v1/agent-work-grants?page=2&limit=30>; rel=\"next\", \
                         </api/v1/elsewhere?page=9>; rel=\"last\"",
                    ),
                ],
                fake_page(first, last).to_string(),
            )
        })
        .await;
        let mut adapter = Stdio::start(&fake.base, FAKE_TOKEN).await;

        let first = ok(&adapter.call("list_agent_work_grants", json!({})).await);
        assert_eq!(
            fake.requests(),
            ["GET /api/v1/agent-work-grants?page=1&limit=30"],
            "the Link was followed"
        );
        assert_eq!(first["native_status"], 200);
        assert_eq!(first["total_count"], 61);
        assert_eq!(first["page"], 1);
        assert_eq!(first["has_more"], true);
        assert_eq!(first["next_page"], 2);
        assert_eq!(first["snapshot"], false);
        assert_eq!(first["grants"], fake_page(1, 30));
        assert!(!first.to_string().contains("other-host"), "{first}");

        let second = ok(&adapter
            .call("list_agent_work_grants", json!({"page": 2}))
            .await);
        assert_eq!(second["grants"], fake_page(31, 60));
        assert_eq!(second["has_more"], true);
        assert_eq!(second["next_page"], 3);
        let third = ok(&adapter
            .call("list_agent_work_grants", json!({"page": 3}))
            .await);
        assert_eq!(third["grants"], fake_page(61, 61));
        assert_eq!(third["has_more"], false);
        assert_eq!(third["next_page"], Value::Null);

        let with_state = ok(&adapter
            .call("list_agent_work_grants", json!({"page": 1, "state": "all"}))
            .await);
        assert_eq!(with_state["total_count"], 61);
        adapter.finish().await;

        assert_eq!(
            fake.requests(),
            [
                "GET /api/v1/agent-work-grants?page=1&limit=30",
                "GET /api/v1/agent-work-grants?page=2&limit=30",
                "GET /api/v1/agent-work-grants?page=3&limit=30",
                "GET /api/v1/agent-work-grants?page=1&limit=30&state=all",
            ],
            "each page is one fresh request to the fixed origin"
        );
    })
    .await;
}

#[tokio::test]
async fn fake_list_without_total_count_is_malformed() {
    within_time_limit(async {
        let fake = Fake::axum(|_| {
            http(
                200,
                &[
                    ("content-type", "application/json"),
                    (
                        "link",
                        "</api/v1/agent-work-grants?page=2&limit=30>; rel=\"next\"",
                    ),
                ],
                fake_page(1, 30).to_string(),
            )
        })
        .await;
        let mut adapter = Stdio::start(&fake.base, FAKE_TOKEN).await;
        let result = adapter.call("list_agent_work_grants", json!({})).await;
        tool_error(&result, "malformed_response");
        let result = adapter
            .call("list_agent_work_grants", json!({"page": 2}))
            .await;
        tool_error(&result, "malformed_response");
        adapter.finish().await;
        assert_eq!(
            fake.requests(),
            [
                "GET /api/v1/agent-work-grants?page=1&limit=30",
                "GET /api/v1/agent-work-grants?page=2&limit=30",
            ]
        );
    })
    .await;
}
