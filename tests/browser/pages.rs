//! The pages as a whole: every page is reachable by following links from
//! the dashboard (a crawler), each reads in plain words, and each is usable
//! on a phone in the light and the dark colour scheme (no horizontal
//! scrolling, dark colours applied). axe-core checks each page on the way
//! ([`crate::axe`]).

use std::collections::{BTreeSet, VecDeque};

use serde_json::json;

use crate::app::{ALICE, ALICE_PW, OWNER, REPO, TestApp, page_path};

const CAROL: &str = "carol";
const CAROL_PW: &str = "carol-password-1";
use crate::driver::Web;
use crate::harness::{Case, PrepareForm, Requirement, click_approve, plain, prepare};

/// Grants in every state on alice/widgets, made as people and the bot do:
/// waiting for the bot, waiting for approval (blocked by the admission),
/// active with a receipt, withdrawn. Returns the blocked and the active
/// grant's ids.
async fn grants_in_every_state(web: &Web, app: &TestApp) -> (i64, i64) {
    // Installed and healthy: the blocked grant waits only for project
    // filesystem context.
    app.set_mcp_health("filesystem", true, true).await;
    prepare(web, &plain("Label the open issues by component.")).await;
    let blocked = PrepareForm {
        requirement: Some(Requirement {
            mcp_id: "filesystem",
            agent: "reader",
            requirement: "required",
            capabilities: &["filesystem.project.read"],
            fallback: "block",
        }),
        ..plain("Write a CONTRIBUTING guide from the code.")
    };
    let blocked = prepare(web, &blocked).await;
    app.confirm(blocked).await;
    let active = prepare(web, &plain("File one issue per flaky test.")).await;
    app.confirm(active).await;
    web.goto(&page_path(active)).await;
    click_approve(web).await;
    app.submit(active, "test_upload times out on slow disks")
        .await;
    let withdrawn = prepare(web, &plain("Rename the settings module.")).await;
    web.goto(&page_path(withdrawn)).await;
    crate::harness::click_withdraw(web, "Not needed after all.").await;
    (blocked, active)
}

/// The same-origin links of the page now shown (path and query), without
/// fragments.
async fn links(web: &Web) -> Vec<String> {
    let found = web
        .c
        .execute(
            "return Array.from(document.querySelectorAll('a[href]'))\
               .map(a => new URL(a.href, location.href))\
               .filter(u => u.origin === location.origin)\
               .map(u => u.pathname + u.search);",
            vec![],
        )
        .await
        .expect("read the page's links");
    found
        .as_array()
        .map(|all| {
            all.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

both_backends!(every_page_is_reachable_from_the_dashboard);
async fn every_page_is_reachable_from_the_dashboard(case: Case) {
    let (web, app) = (&case.web, &case.app);
    web.login_ok(ALICE, ALICE_PW).await;
    let (_, active) = grants_in_every_state(web, app).await;
    // carol, a site admin and an admin of the repository, sees every page.
    app.add_site_admin(CAROL, CAROL_PW).await;
    web.logout().await;
    web.login_ok(CAROL, CAROL_PW).await;

    let mut seen = BTreeSet::new();
    let mut queue = VecDeque::from(["/".to_owned()]);
    while let Some(path) = queue.pop_front() {
        if !seen.insert(path.clone()) {
            continue;
        }
        assert!(seen.len() <= 200, "more than 200 pages reachable: {seen:?}");
        web.goto(&path).await;
        let status = web.status().await;
        assert!(
            status < 400,
            "{path} answers {status}; it is linked from a page the crawler visited:\n{}",
            web.text().await
        );
        for link in links(web).await {
            if !seen.contains(&link) {
                queue.push_back(link);
            }
        }
    }
    let repo = format!("/{OWNER}/{REPO}");
    for expected in [
        "/repositories".to_owned(),
        "/admin".to_owned(),
        "/admin/mcp".to_owned(),
        "/admin/tool-grants".to_owned(),
        "/admin/webhooks".to_owned(),
        repo.clone(),
        format!("{repo}/agent-work-grants/new"),
        format!("{repo}/settings/filesystem-context"),
        page_path(active),
        format!("{repo}/issues/1"),
    ] {
        assert!(
            seen.contains(&expected),
            "{expected} is not reachable by links from the dashboard; reached: {seen:#?}"
        );
    }
    eprintln!("crawled {} pages", seen.len());
}

both_backends!(the_dashboard_says_what_needs_me);
async fn the_dashboard_says_what_needs_me(case: Case) {
    let (web, app) = (&case.web, &case.app);
    web.login_ok(ALICE, ALICE_PW).await;
    // A first visit: nothing yet, and how to start.
    assert!(
        web.exists("#first-grant a[href$='/agent-work-grants/new']")
            .await
    );
    web.shot("dashboard-empty").await;
    grants_in_every_state(web, app).await;
    web.goto("/").await;
    assert!(!web.exists("#first-grant").await);
    for (section, count) in [
        ("awaiting-me", "1"),
        ("awaiting-agent", "1"),
        ("active", "1"),
        ("finished", "1"),
    ] {
        assert_eq!(
            web.text_of(&format!("#{section}-count")).await,
            count,
            "section {section}"
        );
    }
    let text = web.text().await;
    for said in [
        // The blocked grant waits for alice, with the reason.
        "Needs approval",
        "Blocked",
        "filesystem context",
        "Waiting for builder-bot to confirm this proposal.",
        "builder-bot may file issues: 1 of 10 submissions used.",
        "Issue filed",
        "Withdrawn by alice: “Not needed after all.”",
    ] {
        assert!(
            text.contains(said),
            "the dashboard does not say {said:?}:\n{text}"
        );
    }
    // Times are relative, with the exact UTC time on hover.
    let title = web.attr("main time", "title").await.unwrap_or_default();
    assert!(title.ends_with(" UTC"), "time title {title:?}");
    web.shot("dashboard").await;
}

both_backends!(the_grant_page_answers_first);
async fn the_grant_page_answers_first(case: Case) {
    let (web, app) = (&case.web, &case.app);
    web.login_ok(ALICE, ALICE_PW).await;
    let id = prepare(
        web,
        &PrepareForm {
            summary: "Deduplicate bug reports",
            ..plain("Go through the open bug reports and file one issue per duplicate cluster.")
        },
    )
    .await;
    app.confirm(id).await;
    web.goto(&page_path(id)).await;
    // What, who, where, reach, limits and what approving does come before
    // any form or detail.
    let order = web
        .c
        .execute(
            "const ids = ['grant-summary', 'grant-task', 'grant-agent', 'grant-reach', \
             'grant-limits', 'approving-does', 'approve-h', 'timeline', 'receipts-h', 'proposal'];\
             return ids.map(id => { const e = document.getElementById(id); \
               return e ? e.getBoundingClientRect().top + window.scrollY : null; });",
            vec![],
        )
        .await
        .expect("positions");
    let tops: Vec<f64> = order
        .as_array()
        .expect("an array")
        .iter()
        .map(|v| v.as_f64().expect("every element is on the page"))
        .collect();
    assert!(
        tops.windows(2).all(|w| w[0] <= w[1]),
        "the grant page's parts are out of order: {tops:?}"
    );
    assert_eq!(
        web.text_of("#grant-summary").await,
        "Deduplicate bug reports"
    );
    assert_eq!(
        web.text_of("#state-sentence").await,
        "builder-bot confirmed; waiting for a repository admin to approve."
    );
    assert!(
        web.text_of("#approving-does")
            .await
            .starts_with("Approving lets builder-bot file up to 10 issues in alice/widgets")
    );
    // The proposal JSON is folded away, its digest shown.
    assert!(web.exists("details pre").await);
    assert!(!web.find("details pre").await.is_displayed().await.unwrap());
    // Breadcrumbs lead back.
    assert!(
        web.exists(&format!(
            "nav[aria-label='Breadcrumb'] a[href='/{OWNER}/{REPO}']"
        ))
        .await
    );
    web.shot("grant-awaiting_human").await;
}

/// Visits the main pages on a phone: no horizontal scrolling, each
/// screenshot kept, a form posted.
async fn on_a_phone(case: &Case, dark: bool) {
    let (web, app) = (&case.web, &case.app);
    web.login_ok(ALICE, ALICE_PW).await;
    let (blocked, active) = grants_in_every_state(web, app).await;
    let scheme = web
        .c
        .execute(
            "return [window.innerWidth, matchMedia('(prefers-color-scheme: dark)').matches, \
             getComputedStyle(document.body).backgroundColor];",
            vec![],
        )
        .await
        .expect("viewport");
    assert_eq!(scheme[0], json!(390), "the phone's viewport width");
    assert_eq!(scheme[1], json!(dark), "prefers-color-scheme: dark");
    let dark_background = scheme[2] == json!("rgb(13, 17, 23)");
    assert_eq!(dark_background, dark, "body background {}", scheme[2]);
    let repo = format!("/{OWNER}/{REPO}");
    for (path, name) in [
        ("/".to_owned(), "dashboard"),
        (repo.clone(), "repository"),
        (format!("{repo}/agent-work-grants/new"), "prepare"),
        (page_path(active), "grant-active"),
        (page_path(blocked), "grant-blocked"),
        (
            format!("{repo}/settings/filesystem-context"),
            "filesystem-context",
        ),
        (format!("{repo}/issues/1"), "issue"),
    ] {
        web.goto(&path).await;
        let widths = web
            .c
            .execute(
                "return [document.documentElement.scrollWidth, window.innerWidth];",
                vec![],
            )
            .await
            .expect("widths");
        assert!(
            widths[0].as_u64() <= widths[1].as_u64(),
            "{path} scrolls horizontally on a phone: content {} px in a {} px viewport",
            widths[0],
            widths[1]
        );
        web.shot(name).await;
    }
    // The forms work there: approve the blocked grant's filesystem context
    // from its page.
    web.goto(&page_path(blocked)).await;
    web.click_and_wait("form[action$='/settings/filesystem-context'] button[type='submit']")
        .await;
    assert_eq!(web.path().await, page_path(blocked));
    assert_eq!(
        web.attr("#admission-status", "data-status")
            .await
            .as_deref(),
        Some("allowed")
    );
}

both_backends!(
    a_phone_in_light_mode,
    crate::harness::Device::Phone { dark: false }
);
async fn a_phone_in_light_mode(case: Case) {
    on_a_phone(&case, false).await;
}

both_backends!(
    a_phone_in_dark_mode,
    crate::harness::Device::Phone { dark: true }
);
async fn a_phone_in_dark_mode(case: Case) {
    on_a_phone(&case, true).await;
}
