//! The served OpenAPI document states the rules the parsers enforce: its
//! constraints are generated from the parsers' own constants.

use regex::Regex;
use serde_json::Value;

use crate::helpers::{Auth, TestApp};
use crate::world::World;
use writ::domain::ids::{REQUEST_KEY_PATTERN, RequestKey};
use writ::domain::text::check_title;

const GRANT: &str = "/api/v1/repos/{owner}/{repo}/agent-work-grants/{grant_id}";

async fn document(app: &TestApp) -> Value {
    let resp = app.get("/api/v1/openapi.json", Auth::None).await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    serde_json::from_str(&resp.body).expect("the document is JSON")
}

/// A `$ref` resolved against the document's components, or the schema itself.
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str() {
        Some(r) => {
            let name = r.rsplit('/').next().unwrap();
            &doc["components"]["schemas"][name]
        }
        None => schema,
    }
}

/// The schema of parameter `name` of `method path`.
fn param<'a>(doc: &'a Value, path: &str, method: &str, name: &str) -> &'a Value {
    let params = doc["paths"][path][method]["parameters"]
        .as_array()
        .unwrap_or_else(|| panic!("{method} {path} has parameters"));
    let p = params
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{method} {path} has parameter {name}"));
    resolve(doc, &p["schema"])
}

/// The first value of `key` anywhere under `value` (inlined schemas are
/// wrapped in `oneOf`).
fn find<'a>(value: &'a Value, key: &str) -> Option<&'a Value> {
    match value {
        Value::Object(map) => map
            .get(key)
            .or_else(|| map.values().find_map(|v| find(v, key))),
        Value::Array(items) => items.iter().find_map(|v| find(v, key)),
        _ => None,
    }
}

both_backends!(openapi_states_the_parsers_rules, |config| {
    config.min_password_length = 15;
});
async fn openapi_states_the_parsers_rules(app: TestApp) {
    let doc = document(&app).await;

    // request_key: the parser's pattern, in the path and in the submit body;
    // keys Writ makes match it, a non-canonical one does not.
    let key = param(
        &doc,
        &format!("{GRANT}/submissions/{{request_key}}"),
        "get",
        "request_key",
    );
    assert_eq!(key["pattern"], REQUEST_KEY_PATTERN);
    let body_key = &doc["components"]["schemas"]["SubmitBody"]["properties"]["request_key"];
    assert_eq!(find(body_key, "pattern").unwrap(), REQUEST_KEY_PATTERN);
    let re = Regex::new(REQUEST_KEY_PATTERN).unwrap();
    for seed in 0u8..32 {
        let generated = RequestKey::from_random([seed.wrapping_mul(37); 16]);
        assert!(re.is_match(generated.as_str()), "{}", generated.as_str());
    }
    let uuid = uuid::Uuid::new_v4().to_string();
    assert!(re.is_match(&uuid) && RequestKey::parse(&uuid).is_ok());
    let upper = uuid.to_uppercase();
    assert!(!re.is_match(&upper) && RequestKey::parse(&upper).is_err());

    // page: 1 to the maximum page; limit: any integer (it is clamped), so no
    // int64 format and no bounds.
    for path in [
        "/api/v1/agent-work-grants",
        "/api/v1/repos/{owner}/{repo}/issues",
    ] {
        let page = param(&doc, path, "get", "page");
        assert_eq!(page["minimum"], 1, "{path}");
        assert_eq!(page["maximum"], 1_000_000_000u64, "{path}");
        let limit = param(&doc, path, "get", "limit");
        assert_eq!(limit["type"], "integer", "{path}");
        assert!(
            limit.get("format").is_none() && limit.get("maximum").is_none(),
            "{limit}"
        );
    }
    let world = World::new(&app).await;
    for (page, status) in [
        ("0", 400),
        ("1", 200),
        ("1000000000", 200),
        ("1000000001", 400),
    ] {
        let resp = app
            .get(
                &format!("/api/v1/agent-work-grants?page={page}&limit=99999999999999999999999"),
                Auth::Token(&world.bot),
            )
            .await;
        assert_eq!(resp.status, status, "page {page}: {}", resp.body);
    }

    // ids: positive int64 on every route that takes one.
    for (path, method, name) in [
        (GRANT, "get", "grant_id"),
        (&format!("{GRANT}/confirm") as &str, "post", "grant_id"),
        (&format!("{GRANT}/issues"), "post", "grant_id"),
        (
            "/api/v1/repos/{owner}/{repo}/issues/{index}",
            "delete",
            "index",
        ),
        (
            "/api/v1/admin/users/{login}/tokens/{token_id}",
            "delete",
            "token_id",
        ),
    ] {
        let id = param(&doc, path, method, name);
        assert_eq!(id["type"], "integer", "{method} {path}");
        assert_eq!(id["format"], "int64", "{method} {path}");
        assert_eq!(id["minimum"], 1, "{method} {path}");
    }

    // Every route that parses a path segment may answer 400.
    for path in [
        "/api/v1/repos/{owner}/{repo}/issues/{index}",
        "/api/v1/admin/users/{login}/tokens/{token_id}",
        "/api/v1/repos/{owner}/{repo}/collaborators/{login}",
    ] {
        assert!(
            doc["paths"][path]["delete"]["responses"]
                .get("400")
                .is_some(),
            "DELETE {path} lists 400"
        );
    }

    // Titles: the pattern and lengths agree with the parser on edge cases.
    let title = &doc["components"]["schemas"]["NewIssueBody"]["properties"]["title"];
    let pattern = Regex::new(find(title, "pattern").unwrap().as_str().unwrap()).unwrap();
    assert_eq!(find(title, "maxLength").unwrap(), 255);
    assert_eq!(find(title, "minLength").unwrap(), 1);
    for sample in [
        "x",
        " padded ",
        "",
        " \t\n",
        "\u{3000}\u{a0}",
        "a\0b",
        "\u{feff}",
        "é",
    ] {
        assert_eq!(
            pattern.is_match(sample),
            check_title(sample).is_ok(),
            "{sample:?}"
        );
    }

    // The proposal triple is exact.
    let confirm = &doc["components"]["schemas"]["ConfirmBody"]["properties"];
    assert_eq!(
        find(&confirm["proposal_schema"], "enum").unwrap(),
        &serde_json::json!(["agent_work_grant.v1"])
    );
    assert_eq!(
        find(&confirm["proposal_version"], "enum").unwrap(),
        &serde_json::json!([1])
    );
    let digest = Regex::new(
        find(&confirm["proposal_digest"], "pattern")
            .unwrap()
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert!(digest.is_match(&"a".repeat(64)));
    assert!(!digest.is_match(&"A".repeat(64)) && !digest.is_match(&"a".repeat(65)));

    // The deployment's password minimum is the one served.
    assert_eq!(doc["components"]["schemas"]["Password"]["minLength"], 15);
}

both_backends!(nul_in_a_path_or_a_report_filter_is_400);
async fn nul_in_a_path_or_a_report_filter_is_400(app: TestApp) {
    let admin = Auth::Token(&app.admin_token);
    for path in [
        "/api/v1/admin/agents/a%00b/tool-grants",
        "/api/v1/admin/users/root%00/tokens/1",
        "/api/v1/repos/a%00/b/collaborators/c",
        "/api/v1/admin/reports/grants?repo=a%00b",
        "/api/v1/admin/reports/grants?agent=%00&format=json",
    ] {
        let method = if path.contains("/tokens/") || path.contains("/collaborators/") {
            reqwest::Method::DELETE
        } else {
            reqwest::Method::GET
        };
        app.send(method, path, admin, crate::helpers::Body::None)
            .await
            .assert_error(400, "invalid_input");
    }
}
