//! `writ serve --demo`: a grant in every state, two bots, and a printed
//! guide whose commands work when pasted.

use serde_json::Value;

use crate::helpers::{Auth, TestApp};

/// The bot's view of a demo grant.
async fn grant(app: &TestApp, token: &str, id: i64) -> Value {
    let path = format!("/api/v1/repos/alice/tiny-tracker/agent-work-grants/{id}");
    let resp = app.get(&path, Auth::Token(token)).await;
    resp.assert_status(200);
    resp.json()["grant"].clone()
}

/// The admission preview of a demo grant.
async fn admission(app: &TestApp, token: &str, id: i64) -> Value {
    let path = format!("/api/v1/repos/alice/tiny-tracker/agent-work-grants/{id}/admission");
    let resp = app.get(&path, Auth::Token(token)).await;
    resp.assert_status(200);
    resp.json()
}

both_backends!(
    the_demo_has_a_grant_in_every_state,
    spawn = crate::helpers::TestApp::spawn_demo
);
async fn the_demo_has_a_grant_in_every_state(app: TestApp) {
    let demo = app.demo.as_ref().expect("the demo was seeded");
    let g = &demo.grants;
    assert_eq!(demo.bots.len(), 2);
    let builder = demo.bots[0].token.as_str();
    let reviewer = demo.bots[1].token.as_str();

    let waiting = grant(&app, builder, g.awaiting_agent).await;
    assert_eq!(waiting["state"], "awaiting_agent");
    assert_eq!(waiting["proposal_digest"], g.awaiting_agent_digest.as_str());

    let allowed = grant(&app, reviewer, g.awaiting_approval).await;
    assert_eq!(allowed["state"], "awaiting_human");
    assert_eq!(
        admission(&app, reviewer, g.awaiting_approval).await["status"],
        "allowed"
    );

    let blocked = grant(&app, builder, g.blocked).await;
    assert_eq!(blocked["state"], "awaiting_human");
    let preview = admission(&app, builder, g.blocked).await;
    assert_eq!(preview["status"], "blocked", "{preview}");
    assert_eq!(
        preview["decisions"][0]["recovery_action"], "approve_project_filesystem_context",
        "{preview}"
    );

    let active = grant(&app, builder, g.active).await;
    assert_eq!(active["state"], "active");
    assert_eq!(active["submission_count"], 2);
    assert_eq!(active["approver"]["login"], "alice");
    for index in [1, 2] {
        let path = format!("/api/v1/repos/alice/tiny-tracker/issues/{index}");
        let issue = app.get(&path, Auth::Token(builder)).await;
        issue.assert_status(200);
        assert_eq!(
            issue.json()["agent_work_grant"]["grant_id"],
            g.active,
            "issue #{index} is attributed to the active grant"
        );
    }

    let withdrawn = grant(&app, reviewer, g.withdrawn).await;
    assert_eq!(withdrawn["state"], "revoked");
    assert_eq!(withdrawn["revoked_by"]["login"], "alice");
    assert!(!withdrawn["revoke_reason"].as_str().unwrap_or("").is_empty());

    // Each grant links its page.
    for (token, id) in [(builder, g.awaiting_agent), (reviewer, g.withdrawn)] {
        assert_eq!(
            grant(&app, token, id).await["html_url"],
            format!("{}/alice/tiny-tracker/agent-work-grants/{id}", app.base)
        );
    }
}

both_backends!(
    the_demo_guide_commands_work_when_pasted,
    spawn = crate::helpers::TestApp::spawn_demo
);
async fn the_demo_guide_commands_work_when_pasted(app: TestApp) {
    let demo = app.demo.as_ref().expect("the demo was seeded");
    let guide = demo.guide(&app.base);
    assert!(
        guide.contains(&format!("log in as alice / {}", demo.password)),
        "{guide}"
    );
    // The curl command, as printed (its continuation lines joined by sh).
    let start = guide.find("curl ").expect("a curl command");
    let end = guide[start..]
        .find("\n\n")
        .map_or(guide.len(), |n| start + n);
    let command = &guide[start..end];
    let out = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .output()
        .await
        .expect("run sh");
    assert!(out.status.success(), "{command}: {out:?}");
    let answer: Value = serde_json::from_slice(&out.stdout).expect("the answer is JSON");
    assert_eq!(answer["grant"]["state"], "awaiting_human", "{answer}");
    // The stdio adapter's line names the Core and the token.
    let token = &demo.bots[0].token;
    assert!(
        guide.contains(&format!(
            "WRIT_TOKEN={token} writ mcp-stdio --url {}",
            app.base
        )),
        "{guide}"
    );
}
