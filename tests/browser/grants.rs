//! The life of a grant in the browser: prepare, the bot confirms over the
//! API, approve; an approval blocked by admission until filesystem context
//! is approved; withdraw.

use serde_json::json;

use crate::app::{ALICE, ALICE_PW, BOB, BOB_PW, BOT, OWNER, REPO, page_path};
use crate::harness::{
    Case, PrepareForm, Requirement, assert_says, click_approve, click_withdraw, fill_and_prepare,
    fill_prepare, grant_id_on_page, plain, prepare, prepare_action,
};

both_backends!(prepare_confirm_approve);
async fn prepare_confirm_approve(case: Case) {
    let (web, app) = (&case.web, &case.app);

    // bob (write collaborator) finds the prepare form from his dashboard.
    web.login_ok(BOB, BOB_PW).await;
    web.click_and_wait(&format!("main a[href='/{OWNER}/{REPO}']"))
        .await;
    web.click_and_wait(&format!("a[href='/{OWNER}/{REPO}/agent-work-grants/new']"))
        .await;
    let task =
        "Go through the open bug reports of widgets and file one issue per duplicate cluster.";
    let form = PrepareForm {
        agent: BOT,
        task,
        summary: "Deduplicate bug reports",
        requirement: None,
    };
    fill_and_prepare(web, &form).await;
    let id = grant_id_on_page(web).await;
    assert_eq!(web.grant_state().await, "awaiting_agent");
    web.shot("awaiting_agent").await;

    // What was typed is what the API shows; the page shows the digest.
    let grant = app.grant(id).await;
    assert_eq!(grant["state"], "awaiting_agent");
    assert_eq!(grant["issuer"]["login"], BOB);
    assert_eq!(grant["agent"]["login"], BOT);
    assert_eq!(grant["proposal"]["task"], task);
    assert_eq!(grant["proposal"]["summary"], "Deduplicate bug reports");
    assert_eq!(grant["proposal"]["limits"]["max_submissions"], 10);
    assert_eq!(
        web.text_of("#proposal-digest").await,
        grant["proposal_digest"].as_str().unwrap()
    );

    // The bot confirms over the API.
    let confirmed = app.confirm(id).await;
    assert_eq!(confirmed["state"], "awaiting_human");
    web.c.refresh().await.expect("reload");
    assert_eq!(web.grant_state().await, "awaiting_human");
    // bob may write but not approve: no approve form for him.
    assert!(
        !web.exists("form[action$='/approve']").await,
        "a write collaborator is offered the approve form"
    );
    web.shot("awaiting_human-as-bob").await;
    web.logout().await;

    // alice (owner) sees it waiting for her approval and approves it.
    web.login_ok(ALICE, ALICE_PW).await;
    let link = format!("main a[href='{}']", page_path(id));
    assert!(
        web.exists(&link).await,
        "the dashboard does not list grant {id} as waiting for alice:\n{}",
        web.text().await
    );
    web.click_and_wait(&link).await;
    assert_eq!(web.grant_state().await, "awaiting_human");
    web.shot("awaiting_human").await;
    let before = app.grant(id).await;
    click_approve(web).await;
    assert_eq!(
        web.path().await,
        page_path(id),
        "approve redirects to the grant"
    );
    assert_eq!(web.grant_state().await, "active");
    assert_says(&web.text().await, "approved by alice");
    web.shot("active").await;

    let after = app.grant(id).await;
    assert_eq!(after["state"], "active");
    assert_eq!(after["approver"]["login"], ALICE);
    assert_eq!(after["issuer"]["login"], BOB);
    assert_eq!(
        after["state_revision"].as_i64().unwrap(),
        before["state_revision"].as_i64().unwrap() + 1
    );
    assert_eq!(after["proposal_digest"], before["proposal_digest"]);
}

/// A required project filesystem requirement of the planning agent `qa`:
/// `{"mcp_id":"filesystem","agent":"qa","requirement":"required",
/// "capabilities":["filesystem.project.read"],"fallback":"block"}`.
const FS_REQUIREMENT: Requirement<'static> = Requirement {
    mcp_id: "filesystem",
    agent: "qa",
    requirement: "required",
    capabilities: &["filesystem.project.read"],
    fallback: "block",
};

both_backends!(approval_blocked_until_filesystem_context);
async fn approval_blocked_until_filesystem_context(case: Case) {
    let (web, app) = (&case.web, &case.app);
    app.set_mcp_health("filesystem", true, true).await;

    web.login_ok(ALICE, ALICE_PW).await;
    let form = PrepareForm {
        agent: BOT,
        task: "Read the project's README and docs and list what is out of date.",
        summary: "Docs audit",
        requirement: Some(FS_REQUIREMENT),
    };
    web.goto(&format!("{}/new", prepare_action())).await;
    fill_prepare(web, &form).await;
    web.shot("prepare-form-filled").await;
    web.click_and_wait(&format!(
        "form[action='{}'] button[type='submit']",
        prepare_action()
    ))
    .await;
    let id = grant_id_on_page(web).await;
    let grant = app.grant(id).await;
    let requirements = grant["proposal"]["mcp_requirements"]
        .as_array()
        .expect("mcp_requirements in the proposal");
    assert_eq!(requirements.len(), 1, "requirements: {requirements:?}");
    for (key, value) in FS_REQUIREMENT.json().as_object().unwrap() {
        assert_eq!(
            &requirements[0][key], value,
            "{key} of the typed requirement: {requirements:?}"
        );
    }
    app.confirm(id).await;

    web.goto(&page_path(id)).await;
    assert_eq!(web.grant_state().await, "awaiting_human");
    let preview = web.text().await;
    assert_says(&preview, "filesystem");
    web.shot("awaiting_human-needs-filesystem-context").await;

    // Approving is blocked by admission: nothing changes.
    let before = app.grant(id).await;
    click_approve(web).await;
    let blocked_status = web.status().await;
    let blocked = web.text().await;
    web.shot("approval-blocked").await;
    assert_eq!(blocked_status, 409, "status of a blocked approval");
    assert!(
        blocked.to_lowercase().contains("blocked"),
        "the page does not say the approval was blocked:\n{blocked}"
    );
    let after = app.grant(id).await;
    assert_eq!(after["state"], "awaiting_human");
    assert_eq!(after["state_revision"], before["state_revision"]);
    assert_eq!(after["approver"], json!(null));
    assert_eq!(after["admission"]["phase"], "approval");
    assert_eq!(after["admission"]["status"], "blocked");
    assert_says(&blocked, "project filesystem context");
    // browser.md: "An approval that the admission blocks re-renders the page
    // with the blocking decisions and their recovery actions". Checked
    // softly so the rest of the flow still runs; reported at the end.
    let mut violations = Vec::new();
    if web.exists("#grant-state").await {
        assert_eq!(web.grant_state().await, "awaiting_human");
        if !web.exists("form[action$='/approve']").await {
            violations.push("the re-rendered grant page has no approve form".to_owned());
        }
    } else {
        violations.push(format!(
            "a blocked approval answers a bare error page at {} instead of \
             re-rendering the grant page with the blocking decisions and their \
             recovery actions (browser.md); it says:\n{blocked}",
            web.path().await
        ));
    }

    // alice approves read access to the project's files.
    let settings = format!("/{OWNER}/{REPO}/settings/filesystem-context");
    let link = format!("a[href='{settings}']");
    if web.exists(&link).await {
        web.click_and_wait(&link).await;
    } else {
        web.goto(&settings).await;
    }
    assert_eq!(web.path().await, settings);
    assert_eq!(
        web.status().await,
        200,
        "alice (repository owner) cannot open {settings}; it says:\n{}{}",
        web.text().await,
        if violations.is_empty() {
            String::new()
        } else {
            format!("\nalso: {}", violations.join("\n"))
        }
    );
    web.shot("filesystem-context-settings").await;
    let read = web
        .find("form input[name='capabilities'][value='read']")
        .await;
    if !read.is_selected().await.expect("checkbox state") {
        read.click().await.expect("tick read");
    }
    web.click_and_wait("form button[name='action'][value='approve']")
        .await;
    assert_eq!(
        web.path().await,
        settings,
        "approving context stays on settings"
    );
    web.shot("filesystem-context-approved").await;
    let fs_state = web.text_of("#fs-state").await;
    assert!(
        fs_state.contains("approved"),
        "filesystem context state after approving read: {fs_state}"
    );
    let read = web
        .find("form input[name='capabilities'][value='read']")
        .await;
    assert!(
        read.is_selected().await.expect("checkbox state"),
        "the approved read capability is not shown ticked"
    );

    // Back to the grant: approval now goes through.
    web.goto(&page_path(id)).await;
    assert_eq!(web.grant_state().await, "awaiting_human");
    web.shot("awaiting_human-filesystem-context-approved").await;
    if web
        .exists("form[action$='/approve'] input[name='acknowledge_warnings']")
        .await
    {
        panic!(
            "the admission warns once read context is approved:\n{}",
            web.text().await
        );
    }
    click_approve(web).await;
    assert_eq!(web.path().await, page_path(id));
    assert_eq!(web.grant_state().await, "active");
    web.shot("active").await;
    let active = app.grant(id).await;
    assert_eq!(active["state"], "active");
    assert_eq!(active["approver"]["login"], ALICE);
    assert_eq!(active["admission"]["phase"], "approval");
    assert_eq!(active["admission"]["status"], "allowed");
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

both_backends!(withdraw_with_a_reason);
async fn withdraw_with_a_reason(case: Case) {
    let (web, app) = (&case.web, &case.app);
    web.login_ok(ALICE, ALICE_PW).await;
    let id = prepare(web, &plain("Label every stale issue.")).await;
    app.confirm(id).await;
    web.goto(&page_path(id)).await;
    click_approve(web).await;
    assert_eq!(web.grant_state().await, "active");
    web.shot("active").await;

    let reason = "The labels were cleaned up by hand.";
    click_withdraw(web, reason).await;
    assert_eq!(web.path().await, page_path(id));
    assert_eq!(web.grant_state().await, "revoked");
    let page = web.text().await;
    assert_says(&page, reason);
    for form in ["approve", "withdraw", "edit"] {
        assert!(
            !web.exists(&format!("form[action$='/{form}']")).await,
            "a withdrawn grant still offers the {form} form"
        );
    }
    web.shot("revoked").await;

    let grant = app.grant(id).await;
    assert_eq!(grant["state"], "revoked");
    assert_eq!(grant["revoke_reason"], reason);
    assert_eq!(grant["revoked_by"]["login"], ALICE);
    assert!(grant["revoked_at"].is_string());
    // The bot can no longer use it.
    let digest = grant["proposal_digest"].as_str().unwrap().to_owned();
    let resp = app.confirm_with(id, &digest).await;
    resp.assert_status(409);
    assert_eq!(resp.json()["code"], "grant_revoked");
}
