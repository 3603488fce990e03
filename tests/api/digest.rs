//! Proposal digests: an independent JCS (RFC 8785) written here, checked
//! against the spec's vectors and against every prepared grant's digest.

use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::helpers::TestApp;
use crate::world::{BOT, OWNER, Prepare, REPO, World};

/// RFC 8785 canonical JSON of a value whose numbers are all integers.
pub fn jcs(value: &Value) -> String {
    let mut out = String::new();
    write_jcs(value, &mut out);
    out
}

fn write_jcs(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            assert!(
                n.is_i64() || n.is_u64(),
                "non-integer number {n} in a proposal"
            );
            out.push_str(&n.to_string());
        }
        // serde_json escapes exactly as JCS does: `"`, `\`, \b \f \n \r \t,
        // other controls as lowercase \u00xx, everything else verbatim.
        Value::String(s) => out.push_str(&serde_json::to_string(s).expect("string")),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_jcs(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(key).expect("key"));
                out.push(':');
                write_jcs(item, out);
            }
            out.push('}');
        }
    }
}

/// Lowercase hex SHA-256 of the canonical JSON.
pub fn digest(value: &Value) -> String {
    hex::encode(Sha256::digest(jcs(value).as_bytes()))
}

#[test]
fn jcs_passes_the_spec_vectors() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/digest-vectors.json"
    );
    let text = std::fs::read_to_string(path).expect("read digest-vectors.json");
    let file: Value = serde_json::from_str(&text).expect("vectors are JSON");
    let vectors = file["vectors"].as_array().expect("vectors");
    assert!(vectors.len() >= 3);
    for vector in vectors {
        let canonical = vector["canonical"].as_str().expect("canonical");
        let expected = vector["proposal_digest"].as_str().expect("digest");
        assert_eq!(jcs(&vector["proposal"]), canonical);
        assert_eq!(hex::encode(Sha256::digest(canonical.as_bytes())), expected);
        assert_eq!(digest(&vector["proposal"]), expected);
    }
}

#[test]
fn jcs_sorts_keys_by_utf16_code_units() {
    // U+1F600 is D83D DE00 in UTF-16, so it sorts before U+E000 (but after it
    // in code point or UTF-8 order).
    let value = json!({"\u{e000}": 1, "\u{1f600}": 2, "b": [true, null], "a": -3});
    assert_eq!(
        jcs(&value),
        "{\"a\":-3,\"b\":[true,null],\"\u{1f600}\":2,\"\u{e000}\":1}"
    );
}

#[test]
fn jcs_escapes_like_rfc_8785() {
    let value = Value::String("\u{1}\u{1f}\u{7f} \"\\/\u{8}\u{c}\n\r\t é".to_owned());
    assert_eq!(
        jcs(&value),
        "\"\\u0001\\u001f\u{7f} \\\"\\\\/\\b\\f\\n\\r\\t é\""
    );
}

const FILESYSTEM_REQUIREMENT: &str = r#"[{"mcp_id":"filesystem","agent":"frontend","requirement":"required","capabilities":["filesystem.project.read","filesystem.project.search"],"fallback":"block","prohibited_capabilities":[],"prompt_context":null}]"#;

/// Checks one grant: proposal shape, and digest == sha256(JCS(proposal)).
#[track_caller]
fn check_grant(grant: &Value, form: &Prepare) {
    let proposal = &grant["proposal"];
    assert_eq!(proposal["schema"], "agent_work_grant.v1");
    assert_eq!(proposal["version"], 1);
    assert_eq!(proposal["grant_id"], grant["id"]);
    assert_eq!(proposal["repository"]["id"], grant["repository"]["id"]);
    assert_eq!(
        proposal["repository"]["full_name"],
        format!("{OWNER}/{REPO}")
    );
    assert_eq!(proposal["agent"]["login"], BOT);
    assert_eq!(proposal["agent"]["id"], grant["agent"]["id"]);
    assert_eq!(proposal["task"], form.task.as_str());
    assert_eq!(proposal["summary"], form.summary.as_str());
    assert_eq!(
        proposal["limits"]["max_submissions"]
            .as_i64()
            .map(|n| n.to_string()),
        Some(form.max_submissions.clone())
    );
    match &form.expires_at {
        Some(at) => assert_eq!(proposal["limits"]["expires_at"], at.as_str()),
        None => assert!(proposal["limits"]["expires_at"].is_null()),
    }
    assert!(proposal["mcp_requirements"].is_array());
    let stated = grant["proposal_digest"].as_str().expect("proposal_digest");
    assert_eq!(stated.len(), 64);
    assert!(
        stated
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    );
    assert_eq!(digest(proposal), stated, "digest of {}", jcs(proposal));
    assert_eq!(grant["proposal_schema"], "agent_work_grant.v1");
    assert_eq!(grant["proposal_version"], 1);
}

both_backends!(prepared_grants_carry_the_digest_of_their_proposal);
async fn prepared_grants_carry_the_digest_of_their_proposal(app: TestApp) {
    let world = World::new(&app).await;
    let mut forms = Vec::new();
    let mut tricky = Prepare::new(BOT, "Add a \"due date\" field\nto tasks ✓ 🚀");
    tricky.summary = "Añadir fecha\tlímite <b>&amp;</b> \\ / \u{e000}".to_owned();
    forms.push(tricky);
    let mut limited = Prepare::new(BOT, "Read and search the project");
    limited.max_submissions = "3".to_owned();
    limited.expires_at = Some("2099-12-31T00:00:00Z".to_owned());
    limited.mcp_requirements = Some(FILESYSTEM_REQUIREMENT.to_owned());
    forms.push(limited);
    // Same content twice: the digests differ because they cover grant_id.
    forms.push(Prepare::new(BOT, "Identical task"));
    forms.push(Prepare::new(BOT, "Identical task"));

    let mut digests = Vec::new();
    for form in &forms {
        let id = world.alice.prepare_ok(OWNER, REPO, form).await;
        let grant = world.grant(id).await;
        assert_eq!(grant["id"], id);
        check_grant(&grant, form);
        digests.push(grant["proposal_digest"].clone());
    }
    assert_ne!(digests[2], digests[3], "the digest must cover grant_id");

    // Editing changes the proposal and the digest, which still matches.
    let id = world.alice.prepare_ok(OWNER, REPO, &forms[0]).await;
    let before = world.grant(id).await;
    let mut edited = forms[0].clone();
    edited.task = "Edited task: ünïcødé".to_owned();
    let resp = world
        .alice
        .grant_action(OWNER, REPO, id, "edit", &edited.fields())
        .await;
    resp.assert_status(303);
    let after = world.grant(id).await;
    check_grant(&after, &edited);
    assert_ne!(after["proposal_digest"], before["proposal_digest"]);
    assert_eq!(after["state"], "awaiting_agent");
    assert_eq!(after["state_revision"], 2);
}

both_backends!(mcp_requirements_are_part_of_the_digest);
async fn mcp_requirements_are_part_of_the_digest(app: TestApp) {
    let world = World::new(&app).await;
    let mut form = Prepare::new(BOT, "Needs the filesystem");
    form.mcp_requirements = Some(FILESYSTEM_REQUIREMENT.to_owned());
    let id = world.alice.prepare_ok(OWNER, REPO, &form).await;
    let grant = world.grant(id).await;
    let requirements = grant["proposal"]["mcp_requirements"]
        .as_array()
        .expect("requirements");
    assert_eq!(requirements.len(), 1);
    assert_eq!(requirements[0]["mcp_id"], "filesystem");
    assert_eq!(requirements[0]["agent"], "frontend");
    assert_eq!(requirements[0]["requirement"], "required");
    assert_eq!(requirements[0]["fallback"], "block");
    assert_eq!(
        requirements[0]["capabilities"],
        json!(["filesystem.project.read", "filesystem.project.search"])
    );
    assert_eq!(
        digest(&grant["proposal"]),
        grant["proposal_digest"].as_str().unwrap()
    );
}
