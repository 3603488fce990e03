//! Writes (confirm and submit) against the fake: only a well-formed success
//! or a native refusal is definite; anything else is delivery uncertain.

use serde_json::{Value, json};

use super::{
    FAKE_DIGEST, FAKE_GRANT, FAKE_KEY, FAKE_TOKEN, Fake, MARKER, Raw, WRITES, Write,
    assert_uncertain, fake_grant, fake_receipt, http, json_response, truncated, write_once,
};
use crate::helpers::{OTHER_DIGEST, within_time_limit};
use crate::mcp_stdio::{native_refusal, ok, without_status};

#[tokio::test]
async fn fake_write_well_formed_success_is_a_result() {
    within_time_limit(async {
        for write in WRITES {
            let fake =
                Fake::axum(move |_| json_response(write.created(), &write.good_body())).await;
            let result = write_once(write, &fake, "well-formed").await;
            let content = ok(&result);
            assert_eq!(content["native_status"], write.created(), "{result}");
            assert_eq!(without_status(content), write.good_body());
            // What went upstream: the bearer, and only the documented members.
            let seen = &fake.seen()[0];
            assert_eq!(
                seen.authorization.as_deref(),
                Some(format!("Bearer {FAKE_TOKEN}").as_str())
            );
            let sent: Value = serde_json::from_str(&seen.body).expect("JSON body");
            let mut expected = write.arguments();
            for member in ["owner", "repo", "grant_id"] {
                expected.as_object_mut().expect("object").remove(member);
            }
            assert_eq!(sent, expected, "{write:?}");
        }
    })
    .await;
}

#[tokio::test]
async fn fake_write_lost_response_is_delivery_uncertain_and_never_retried() {
    within_time_limit(async {
        for write in WRITES {
            let fake = Fake::raw(Raw::Close).await;
            let result = write_once(write, &fake, "lost response").await;
            assert_uncertain(write, &result, "lost response");
        }
    })
    .await;
}

#[tokio::test]
async fn fake_write_redirect_is_not_followed() {
    within_time_limit(async {
        for write in WRITES {
            let cases = [
                (307, "/api/v1/elsewhere/confirm".to_owned()),
                (302, "http://attacker.example.invalid/collect".to_owned()),
                (308, "/api/v1/elsewhere/issues".to_owned()),
                (303, "/api/v1/elsewhere".to_owned()),
                (301, "http://attacker.example.invalid/".to_owned()),
            ];
            for (status, location) in cases {
                let path = write.request_line();
                let target_location = location.clone();
                let fake = Fake::axum(move |seen| {
                    if seen.line() == path {
                        http(status, &[("location", target_location.as_str())], MARKER)
                    } else {
                        // A followed redirect would land on a success.
                        json_response(write.created(), &write.good_body())
                    }
                })
                .await;
                let case = format!("{status} to {location}");
                let result = write_once(write, &fake, &case).await;
                assert_uncertain(write, &result, &case);
                assert!(
                    !result.to_string().contains(&location),
                    "{case}: the Location is shown: {result}"
                );
            }
        }
    })
    .await;
}

#[tokio::test]
async fn fake_write_malformed_success_is_never_a_receipt() {
    within_time_limit(async {
        let marker_html = format!("<html>{MARKER}</html>");
        for write in WRITES {
            let status = write.created();
            let mut cases: Vec<(&str, u16, String)> = vec![
                ("non-JSON", status, marker_html.clone()),
                ("empty body", status, String::new()),
                ("a JSON array", status, json!([MARKER]).to_string()),
                ("an empty object", status, "{}".to_owned()),
            ];
            match write {
                Write::Submit => {
                    let mut no_issue = fake_receipt(FAKE_GRANT, FAKE_KEY);
                    no_issue["submission"]
                        .as_object_mut()
                        .expect("submission")
                        .remove("issue");
                    let mut other_grant = fake_receipt(FAKE_GRANT, FAKE_KEY);
                    other_grant["grant"] = fake_grant(FAKE_GRANT + 1, "active", FAKE_DIGEST);
                    cases.extend([
                        (
                            "no submission",
                            201,
                            json!({"grant": fake_grant(FAKE_GRANT, "active", FAKE_DIGEST)})
                                .to_string(),
                        ),
                        (
                            "another request_key",
                            201,
                            fake_receipt(FAKE_GRANT, "1b6f5c2e-8d5e-4d8e-9b7a-2f4a1c3e5d6f")
                                .to_string(),
                        ),
                        (
                            "another receipt grant id",
                            201,
                            fake_receipt(FAKE_GRANT + 1, FAKE_KEY).to_string(),
                        ),
                        ("another grant", 201, other_grant.to_string()),
                        ("no issue", 201, no_issue.to_string()),
                        (
                            "a replay that is not a receipt",
                            200,
                            json!({"grant": fake_grant(FAKE_GRANT, "active", FAKE_DIGEST), "submission": MARKER}).to_string(),
                        ),
                    ]);
                }
                Write::Confirm => {
                    let mut other_repo =
                        json!({"grant": fake_grant(FAKE_GRANT, "awaiting_human", FAKE_DIGEST)});
                    other_repo["grant"]["repository"]["full_name"] = json!("other/repo");
                    cases.extend([
                        (
                            "another grant id",
                            200,
                            json!({"grant": fake_grant(FAKE_GRANT + 1, "awaiting_human", FAKE_DIGEST)})
                                .to_string(),
                        ),
                        (
                            "another digest",
                            200,
                            json!({"grant": fake_grant(FAKE_GRANT, "awaiting_human", OTHER_DIGEST)})
                                .to_string(),
                        ),
                        ("another repository", 200, other_repo.to_string()),
                        (
                            "still awaiting the agent",
                            200,
                            json!({"grant": fake_grant(FAKE_GRANT, "awaiting_agent", FAKE_DIGEST)})
                                .to_string(),
                        ),
                        (
                            "an unknown state",
                            200,
                            json!({"grant": fake_grant(FAKE_GRANT, MARKER, FAKE_DIGEST)})
                                .to_string(),
                        ),
                    ]);
                }
            }
            for (case, status, body) in cases {
                let fake = Fake::axum(move |_| {
                    http(status, &[("content-type", "application/json")], body.clone())
                })
                .await;
                let result = write_once(write, &fake, case).await;
                assert_uncertain(write, &result, case);
            }
            // A success body cut short by a closed connection.
            let body = write.good_body().to_string();
            let fake = Fake::raw(Raw::Bytes(truncated(status, &body))).await;
            let result = write_once(write, &fake, "truncated body").await;
            assert_uncertain(write, &result, "truncated body");
        }
    })
    .await;
}

#[tokio::test]
async fn fake_write_unexpected_status_is_delivery_uncertain() {
    within_time_limit(async {
        for write in WRITES {
            let native_looking = json!({"code": "internal", "message": MARKER}).to_string();
            let mut cases: Vec<(u16, String)> = vec![
                (500, native_looking.clone()),
                (502, format!("<html>{MARKER}</html>")),
                (503, native_looking),
                (418, format!("I'm a teapot {MARKER}")),
                (204, String::new()),
                (202, write.good_body().to_string()),
            ];
            if let Write::Confirm = write {
                // Confirm answers 200; a 201 is not its answer.
                cases.push((201, write.good_body().to_string()));
            }
            for (status, body) in cases {
                let fake = Fake::axum(move |_| {
                    http(
                        status,
                        &[("content-type", "application/json")],
                        body.clone(),
                    )
                })
                .await;
                let case = format!("status {status}");
                let result = write_once(write, &fake, &case).await;
                assert_uncertain(write, &result, &case);
            }
        }
    })
    .await;
}

#[tokio::test]
async fn fake_write_native_refusal_is_definite() {
    within_time_limit(async {
        for write in WRITES {
            for (status, code) in [
                (409, "grant_not_active"),
                (409, "proposal_mismatch"),
                (404, "not_found"),
                (403, "insufficient_scope"),
                (401, "unauthenticated"),
                (400, "invalid_request_key"),
            ] {
                let body = json!({
                    "message": "the grant is not active",
                    "code": code,
                    "url": "http://127.0.0.1/api/errors#grant_not_active",
                });
                let fake = Fake::axum(move |_| json_response(status, &body)).await;
                let case = format!("{status} {code}");
                let result = write_once(write, &fake, &case).await;
                let content = native_refusal(&result, status, code);
                assert_ne!(content["code"], "delivery_uncertain", "{case}");
            }
        }
    })
    .await;
}
