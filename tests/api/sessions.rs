//! Browser sessions: the cookie, login failures, throttling, expiry.

use std::time::Duration;

use crate::browser::{Browser, location_path, nonce_in};
use crate::helpers::{Resp, TestApp};
use crate::world::{OWNER, REPO, World, action_path};

/// `name=value` and attributes of every `Set-Cookie` of a response.
fn set_cookies(resp: &Resp) -> Vec<String> {
    resp.headers
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().expect("text cookie").to_owned())
        .collect()
}

fn value_of(cookie: &str) -> &str {
    let pair = cookie.split(';').next().unwrap_or_default();
    pair.split_once('=').map_or("", |(_, v)| v.trim())
}

fn is_removal(cookie: &str) -> bool {
    let lower = cookie.to_ascii_lowercase();
    lower.contains("max-age=0") || value_of(cookie).is_empty()
}

/// Asserts the browser has no session: the home page sends it to login.
async fn assert_logged_out(browser: &Browser) {
    let home = browser.get_page("/").await;
    home.assert_status(303);
    let location = location_path(&home, &browser.base);
    assert!(location.starts_with("/user/login"), "{location}");
}

both_backends!(login_sets_a_fresh_strict_session_cookie);
async fn login_sets_a_fresh_strict_session_cookie(app: TestApp) {
    app.create_user("dora", "human", Some("dora-password-1"))
        .await;
    let mut browser = Browser::new(&app.base);
    assert_logged_out(&browser).await;
    let page = browser.get_page("/user/login").await;
    page.assert_status(200);
    let before: Vec<String> = set_cookies(&page)
        .iter()
        .map(|c| value_of(c).to_owned())
        .collect();

    let resp = browser.login("dora", "dora-password-1").await;
    resp.assert_status(303);
    let session: Vec<String> = set_cookies(&resp)
        .into_iter()
        .filter(|c| !is_removal(c))
        .collect();
    assert!(!session.is_empty(), "login set no cookie");
    for cookie in &session {
        let lower = cookie.to_ascii_lowercase();
        assert!(lower.contains("httponly"), "{cookie}");
        assert!(lower.contains("samesite=strict"), "{cookie}");
        assert!(lower.contains("path=/"), "{cookie}");
        assert!(
            !lower.contains("secure"),
            "Secure on an http public URL: {cookie}"
        );
        // At least 128 random bits, however encoded.
        assert!(value_of(cookie).len() >= 22, "short session id: {cookie}");
        // No fixation: the id is new at login.
        assert!(!before.iter().any(|v| v == value_of(cookie)), "{cookie}");
    }
    browser.get_page("/").await.assert_status(200);
}

both_backends!(failed_logins_look_the_same);
async fn failed_logins_look_the_same(app: TestApp) {
    app.create_user("zed-human-x", "human", Some("right-password-1"))
        .await;
    app.create_user("zed-bot-x", "bot", None).await;
    let mut pages = Vec::new();
    for login in ["zed-human-x", "zed-bot-x", "zed-nobody-x"] {
        let mut browser = Browser::new(&app.base);
        let resp = browser.login(login, "wrong-password-1").await;
        assert_eq!(resp.status.as_u16(), 401, "{login}: {}", resp.body);
        assert_logged_out(&browser).await;
        let mut page = resp.body.replace(login, "LOGIN");
        if let Some(nonce) = nonce_in(&resp.body, "/user/login") {
            page = page.replace(&nonce, "NONCE");
        }
        pages.push(page);
    }
    assert_eq!(pages[0], pages[1], "a bot's failure page differs");
    assert_eq!(
        pages[0], pages[2],
        "an unknown login's failure page differs"
    );
}

both_backends!(repeated_failures_are_throttled, |config| {
    config.login_throttle_failures = 3;
});
async fn repeated_failures_are_throttled(app: TestApp) {
    app.create_user("erin", "human", Some("erin-password-1"))
        .await;
    app.create_user("fred", "human", Some("fred-password-1"))
        .await;
    for _ in 0..3 {
        let mut browser = Browser::new(&app.base);
        browser
            .login("erin", "wrong-password-1")
            .await
            .assert_status(401);
    }
    // Now even the right password does not open a session for erin...
    let mut browser = Browser::new(&app.base);
    let resp = browser.login("erin", "erin-password-1").await;
    assert_ne!(resp.status.as_u16(), 303, "throttled login succeeded");
    assert_logged_out(&browser).await;
    // ...while other logins are unaffected.
    Browser::logged_in(&app.base, "fred", "fred-password-1").await;
}

both_backends!(idle_sessions_expire, |config| {
    config.session_idle_seconds = 2;
});
async fn idle_sessions_expire(app: TestApp) {
    app.create_user("gina", "human", Some("gina-password-1"))
        .await;
    let browser = Browser::logged_in(&app.base, "gina", "gina-password-1").await;
    browser.get_page("/").await.assert_status(200);
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_logged_out(&browser).await;
}

both_backends!(the_absolute_cap_ends_busy_sessions, |config| {
    config.session_absolute_seconds = 2;
});
async fn the_absolute_cap_ends_busy_sessions(app: TestApp) {
    app.create_user("hank", "human", Some("hank-password-1"))
        .await;
    let browser = Browser::logged_in(&app.base, "hank", "hank-password-1").await;
    // Busy all along, so only the absolute cap can end it.
    for _ in 0..3 {
        browser.get_page("/").await.assert_status(200);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_logged_out(&browser).await;
}

both_backends!(expired_nonces_are_refused, |config| {
    config.nonce_seconds = 1;
});
async fn expired_nonces_are_refused(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.confirmed("Slow approver").await;
    let before = world.grant(id).await;
    let page = world.alice.grant_page(OWNER, REPO, id).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let resp = world
        .alice
        .submit_from(&page, OWNER, REPO, id, "approve", &[])
        .await;
    assert_eq!(resp.status.as_u16(), 403, "expired nonce: {}", resp.body);
    world.assert_unchanged(id, &before).await;
    // A freshly loaded form works.
    let approve = action_path(OWNER, REPO, id, "approve");
    let page = world.alice.grant_page(OWNER, REPO, id).await;
    assert!(nonce_in(&page, &approve).is_some());
    world
        .alice
        .submit_from(&page, OWNER, REPO, id, "approve", &[])
        .await
        .assert_status(303);
    assert_eq!(world.grant(id).await["state"], "active");
}
