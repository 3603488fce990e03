//! The form contract under real browser behaviour: two tabs on one grant,
//! the back button and a resubmitted form, and forms posted from another
//! origin.

use std::time::{Duration, Instant};

use axum::response::Html;
use tokio::net::TcpListener;

use crate::app::{ALICE, ALICE_PW, page_path};
use crate::harness::{
    Case, assert_says, click_approve, click_withdraw, fill_and_prepare, grant_id_on_page, plain,
    prepare, prepare_action,
};

both_backends!(two_tabs_on_one_grant);
async fn two_tabs_on_one_grant(case: Case) {
    let (web, app) = (&case.web, &case.app);
    web.login_ok(ALICE, ALICE_PW).await;
    let id = prepare(web, &plain("Close the issues fixed by the last release.")).await;
    app.confirm(id).await;

    // The same grant page, awaiting approval, in three tabs.
    let tab1 = web.c.window().await.expect("current window");
    web.goto(&page_path(id)).await;
    let tab2 = web.c.new_window(true).await.expect("new tab").handle;
    web.c.switch_to_window(tab2.clone()).await.expect("tab 2");
    web.goto(&page_path(id)).await;
    let tab3 = web.c.new_window(true).await.expect("new tab").handle;
    web.c.switch_to_window(tab3.clone()).await.expect("tab 3");
    web.goto(&page_path(id)).await;
    assert_eq!(web.grant_state().await, "awaiting_human");

    // Tab 1 withdraws.
    web.c.switch_to_window(tab1).await.expect("tab 1");
    assert_eq!(web.grant_state().await, "awaiting_human");
    web.shot("tab1-awaiting_human").await;
    click_withdraw(web, "Wrong release; preparing another grant.").await;
    assert_eq!(web.grant_state().await, "revoked");
    web.shot("tab1-revoked").await;
    let withdrawn = app.grant(id).await;
    assert_eq!(withdrawn["state"], "revoked");

    // Tab 2 still shows the approve form of the old revision: approving
    // gets the grant page again, says it changed, and changes nothing.
    web.c.switch_to_window(tab2).await.expect("tab 2");
    assert_eq!(
        web.grant_state().await,
        "awaiting_human",
        "tab 2 was reloaded"
    );
    click_approve(web).await;
    let stale = web.text().await;
    assert_says(&stale, "changed since you opened it");
    assert_eq!(
        web.grant_state().await,
        "revoked",
        "the stale page shows the current state"
    );
    assert_eq!(web.status().await, 409, "status of a stale approval");
    web.shot("tab2-stale-approve").await;
    app.assert_unchanged(id, &withdrawn).await;

    // Tab 3 withdraws again with its own stale revision: same answer; the
    // first reason stays.
    web.c.switch_to_window(tab3).await.expect("tab 3");
    click_withdraw(web, "A second withdrawal that must not count.").await;
    assert_says(&web.text().await, "changed since you opened it");
    assert_eq!(web.grant_state().await, "revoked");
    assert_eq!(web.status().await, 409, "status of a stale withdrawal");
    web.shot("tab3-stale-withdraw").await;
    app.assert_unchanged(id, &withdrawn).await;
}

both_backends!(replayed_nonce);
async fn replayed_nonce(case: Case) {
    let (web, app) = (&case.web, &case.app);
    web.login_ok(ALICE, ALICE_PW).await;

    // Prepare, go back to the form, and send it again.
    web.goto(&format!("{}/new", prepare_action())).await;
    let prepare_nonce = web.hidden(&prepare_action(), "nonce").await;
    let form = plain("Tag the issues that mention the old API.");
    fill_and_prepare(web, &form).await;
    let id = grant_id_on_page(web).await;
    web.shot("awaiting_agent").await;
    assert_eq!(app.bot_grants().await.len(), 1);

    web.c.back().await.expect("back");
    assert_eq!(web.path().await, format!("{}/new", prepare_action()));
    assert_eq!(
        web.hidden(&prepare_action(), "nonce").await,
        prepare_nonce,
        "going back did not show the already-submitted form (the browser reloaded it)"
    );
    fill_and_prepare(web, &form).await;
    let refused = web.text().await;
    assert_eq!(web.status().await, 403, "status of a replayed prepare form");
    assert!(
        !refused.contains("Grant #"),
        "a replayed prepare form made a grant page:\n{refused}"
    );
    assert_says(&refused, "Not allowed");
    web.shot("replayed-prepare-refused").await;
    let grants = app.bot_grants().await;
    assert_eq!(
        grants.len(),
        1,
        "the replayed prepare form made a second grant"
    );
    assert_eq!(grants[0]["id"], id);

    // Approve, then go back. The approve form redirects to the very URL of
    // the page it was on, so going back shows that URL as it is now: the
    // grant is active and the used approve form is not offered again.
    app.confirm(id).await;
    web.goto(&page_path(id)).await;
    web.shot("awaiting_human").await;
    click_approve(web).await;
    assert_eq!(web.grant_state().await, "active");
    web.shot("active").await;
    let approved = app.grant(id).await;
    web.c.back().await.expect("back");
    assert_eq!(web.path().await, page_path(id));
    assert_eq!(
        web.grant_state().await,
        "active",
        "back shows a stale grant page"
    );
    assert!(
        !web.exists("form[action$='/approve']").await,
        "going back offers the used approve form again"
    );
    web.shot("back-after-approve").await;
    app.assert_unchanged(id, &approved).await;
}

/// A page of another site, served on loopback.
struct ForeignSite {
    url: String,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for ForeignSite {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl ForeignSite {
    async fn serve(ip: &str, page: String) -> ForeignSite {
        let listener = TcpListener::bind(format!("{ip}:0"))
            .await
            .unwrap_or_else(|e| panic!("bind {ip}: {e}"));
        let url = format!("http://{}/", listener.local_addr().expect("addr"));
        let router = axum::Router::new().route(
            "/",
            axum::routing::get(move || {
                let page = page.clone();
                async move { Html(page) }
            }),
        );
        let server = tokio::spawn(async move {
            axum::serve(listener, router)
                .await
                .expect("serve the foreign site");
        });
        ForeignSite { url, server }
    }
}

/// A foreign page whose form posts Writ's approve form with the copied nonce
/// and revision; with `auto`, it submits itself when loaded.
fn foreign_page(action: &str, nonce: &str, revision: &str, auto: bool) -> String {
    let onload = if auto {
        " onload=\"document.forms[0].submit()\""
    } else {
        ""
    };
    format!(
        "<!doctype html><html><head><title>Win a prize</title></head><body{onload}>\
         <h1>Claim your prize</h1>\
         <form method=\"post\" action=\"{action}\">\
         <input type=\"hidden\" name=\"nonce\" value=\"{nonce}\">\
         <input type=\"hidden\" name=\"state_revision\" value=\"{revision}\">\
         <button type=\"submit\" id=\"claim\">Claim</button></form></body></html>"
    )
}

both_backends!(form_posted_from_a_foreign_origin);
async fn form_posted_from_a_foreign_origin(case: Case) {
    let (web, app) = (&case.web, &case.app);
    web.login_ok(ALICE, ALICE_PW).await;
    let id = prepare(web, &plain("Merge duplicate feature requests.")).await;
    app.confirm(id).await;

    // alice's real grant page, kept open in tab 1.
    let tab1 = web.c.window().await.expect("current window");
    web.goto(&page_path(id)).await;
    web.shot("awaiting_human").await;
    let nonce = web.hidden("/approve", "nonce").await;
    let revision = web.hidden("/approve", "state_revision").await;
    let action = app.url(&format!("{}/approve", page_path(id)));
    let before = app.grant(id).await;

    // Same host, another port: another origin (but the same site, so the
    // SameSite=Strict cookie goes along). alice clicks its button.
    let same_site =
        ForeignSite::serve("127.0.0.1", foreign_page(&action, &nonce, &revision, false)).await;
    let tab2 = web.c.new_window(true).await.expect("new tab").handle;
    web.c.switch_to_window(tab2).await.expect("tab 2");
    web.goto(&same_site.url).await;
    web.shot("foreign-page").await;
    web.click_and_wait("#claim").await;
    assert!(
        web.url().await.starts_with(&app.base),
        "the foreign form did not reach Writ: {}",
        web.url().await
    );
    let refused = web.text().await;
    assert_eq!(web.status().await, 403, "status of a cross-origin post");
    assert_says(&refused, "Not allowed");
    assert_says(&refused, "not posted from this site");
    web.shot("foreign-port-post-refused").await;
    app.assert_unchanged(id, &before).await;

    // Another loopback address: another site; the page posts by itself.
    let cross_site =
        ForeignSite::serve("127.0.0.2", foreign_page(&action, &nonce, &revision, true)).await;
    web.goto(&cross_site.url).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let url = web.url().await;
        let ready = web
            .c
            .execute("return document.readyState === 'complete';", vec![])
            .await
            .ok();
        if url.starts_with(&app.base) && ready == Some(serde_json::Value::Bool(true)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the auto-posting page did not reach Writ (at {url})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let refused = web.text().await;
    assert_eq!(web.status().await, 403, "status of a cross-site post");
    assert_says(&refused, "Not allowed");
    web.shot("foreign-site-autopost-refused").await;
    app.assert_unchanged(id, &before).await;

    // Nothing was consumed: alice's own page, with that same nonce, works.
    web.c.switch_to_window(tab1).await.expect("tab 1");
    assert_eq!(web.hidden("/approve", "nonce").await, nonce);
    click_approve(web).await;
    assert_eq!(web.grant_state().await, "active");
    web.shot("active").await;
    let after = app.grant(id).await;
    assert_eq!(after["state"], "active");
    assert_eq!(after["approver"]["login"], ALICE);
}
