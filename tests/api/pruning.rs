//! Expired sessions, their nonces and old failed logins are swept when a new
//! pre-login session starts, so login-page visits cannot grow tables forever.

use std::time::Duration;

use crate::db::SqlConn;
use crate::helpers::{Auth, TestApp};

async fn count(conn: &mut SqlConn, table: &str) -> i64 {
    conn.integer(&format!("SELECT COUNT(*) FROM {table}")).await
}

both_backends!(
    expired_pre_login_sessions_are_swept,
    |config: &mut writ::Config| {
        // Pre-login sessions live as long as a nonce.
        config.nonce_seconds = 1;
    }
);
async fn expired_pre_login_sessions_are_swept(app: TestApp) {
    let mut conn = SqlConn::connect(&app.database_url()).await;
    // Each cookie-less visit starts a pre-login session with a login nonce.
    for _ in 0..3 {
        app.get("/user/login", Auth::None).await.assert_status(200);
    }
    assert_eq!(count(&mut conn, "sessions").await, 3);
    assert_eq!(count(&mut conn, "form_nonces").await, 3);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    app.get("/user/login", Auth::None).await.assert_status(200);
    assert_eq!(
        count(&mut conn, "sessions").await,
        1,
        "the expired ones are gone"
    );
    assert_eq!(count(&mut conn, "form_nonces").await, 1);
}
