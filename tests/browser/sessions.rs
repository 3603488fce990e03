//! Logging in and out through the login page and the header's button, and
//! a bot's credentials refused at the login form.

use crate::app::{ALICE, ALICE_PW, BOT, OWNER, REPO};
use crate::harness::{Case, assert_says};

const COOKIE: &str = "writ_session";

both_backends!(login_and_logout);
async fn login_and_logout(case: Case) {
    let web = &case.web;

    // Without a session the dashboard sends the person to the login page.
    web.goto("/").await;
    assert_eq!(web.path().await, "/user/login");
    web.shot("login-page").await;
    let pre_login = web
        .c
        .get_named_cookie(COOKIE)
        .await
        .expect("the login page sets a pre-login cookie")
        .value()
        .to_owned();

    web.login_ok(ALICE, ALICE_PW).await;
    let dashboard = web.text().await;
    assert_says(&dashboard, "Waiting for my approval");
    assert_says(&dashboard, &format!("{OWNER}/{REPO}"));
    web.shot("dashboard").await;

    // The session cookie: replaced at login, HttpOnly, SameSite=Strict,
    // not Secure on plain http, Path=/.
    let cookie = web
        .c
        .get_named_cookie(COOKIE)
        .await
        .expect("a session cookie after login");
    let session = cookie.value().to_owned();
    let old = cookie.clone();
    assert_ne!(
        session, pre_login,
        "the session id was not replaced at login"
    );
    assert_eq!(cookie.http_only(), Some(true), "cookie: {cookie}");
    assert_eq!(
        format!("{:?}", cookie.same_site()),
        "Some(Strict)",
        "cookie: {cookie}"
    );
    assert_ne!(cookie.secure(), Some(true), "cookie: {cookie}");
    assert_eq!(cookie.path(), Some("/"), "cookie: {cookie}");

    // Log out with the header's button: back on the login page.
    web.logout().await;
    assert_eq!(web.path().await, "/user/login", "after logout");
    web.shot("logged-out").await;
    web.goto("/").await;
    assert_eq!(
        web.path().await,
        "/user/login",
        "the dashboard after logout must redirect to the login page"
    );
    web.goto(&format!("/{OWNER}/{REPO}/agent-work-grants"))
        .await;
    assert_eq!(web.path().await, "/user/login");

    // Logout revoked the session server-side: putting the old cookie back
    // does not sign anyone in.
    web.c.add_cookie(old).await.expect("restore the old cookie");
    web.goto("/").await;
    assert_eq!(
        web.path().await,
        "/user/login",
        "a logged-out session cookie still opens the dashboard"
    );

    // And logging in again works.
    web.login_ok(ALICE, ALICE_PW).await;
}

both_backends!(bot_credentials_refused_at_login);
async fn bot_credentials_refused_at_login(case: Case) {
    let web = &case.web;

    // A bot's login with its own (valid) API token as the password.
    web.login_as(BOT, &case.app.bot_token).await;
    assert_eq!(web.path().await, "/user/login");
    let refused = web.text().await;
    assert_says(&refused, "Wrong login or password.");
    assert!(
        !refused.contains("Signed in as"),
        "a bot looks signed in:\n{refused}"
    );
    assert_eq!(web.status().await, 401, "status of the bot's failed login");
    web.shot("bot-refused").await;

    // No session: the dashboard still redirects to the login page.
    web.goto("/").await;
    assert_eq!(web.path().await, "/user/login", "the bot got a session");

    // The bot's failure is the same page as a human's wrong password.
    web.login_as(ALICE, "not-alice-password").await;
    assert_eq!(web.path().await, "/user/login");
    let wrong = web.text().await;
    assert_says(&wrong, "Wrong login or password.");
    assert_eq!(web.status().await, 401, "status of a wrong password");
    web.shot("wrong-password").await;

    // The form still works for the right password.
    web.login_ok(ALICE, ALICE_PW).await;
}
