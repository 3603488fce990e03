//! Resource exhaustion: the login throttle per (login, address), password
//! hashing only after the cheap checks and never more than the configured
//! slots at once, bounded pre-login state, and the connection loop's caps
//! and timeouts. (scripts/exhaustion drives the same limits at scale.)

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use reqwest::Client;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::browser::{Browser, nonce_in};
use crate::db::SqlConn;
use crate::helpers::{Auth, Resp, TestApp};

/// Loads the login page and returns the browser and its login nonce.
async fn login_page(app: &TestApp) -> (Browser, String) {
    let browser = Browser::new(&app.base);
    let page = browser.get_page("/user/login").await;
    page.assert_status(200);
    let nonce = nonce_in(&page.body, "/user/login").expect("the login page has a nonce");
    (browser, nonce)
}

/// Posts the login form with this nonce, as a client at `forwarded_for`
/// (behind the trusted proxy 127.0.0.1) when given.
async fn post_login(
    browser: &Browser,
    nonce: &str,
    login: &str,
    password: &str,
    forwarded_for: Option<&str>,
) -> Resp {
    let origin = browser.origin();
    let mut headers = vec![("Origin", origin.as_str())];
    if let Some(address) = forwarded_for {
        headers.push(("X-Forwarded-For", address));
    }
    let fields = [("login", login), ("password", password), ("nonce", nonce)];
    browser
        .post_form_with("/user/login", &fields, &headers)
        .await
}

/// A whole login attempt from `forwarded_for`.
async fn attempt(app: &TestApp, login: &str, password: &str, forwarded_for: &str) -> Resp {
    let (browser, nonce) = login_page(app).await;
    post_login(&browser, &nonce, login, password, Some(forwarded_for)).await
}

/// The `Retry-After` seconds of a response; panics when absent.
fn retry_after(resp: &Resp) -> i64 {
    resp.header("retry-after")
        .expect("Retry-After header")
        .parse()
        .expect("Retry-After in seconds")
}

fn hashes(app: &TestApp) -> u64 {
    app.writ().ctx().login_gate.hashes_run()
}

both_backends!(
    a_throttled_address_does_not_lock_out_another,
    |config: &mut writ::Config| {
        config.trusted_proxies = vec!["127.0.0.1".into()];
        config.login_throttle_failures = 3;
        config.login_throttle_login_ceiling = 6;
    }
);
async fn a_throttled_address_does_not_lock_out_another(app: TestApp) {
    app.create_user("vic", "human", Some("vic-password-1"))
        .await;
    let home = "203.0.113.5";
    // The user has logged in from home before.
    attempt(&app, "vic", "vic-password-1", home)
        .await
        .assert_status(303);
    // An attacker at one address exhausts the strict throttle there...
    for _ in 0..3 {
        attempt(&app, "vic", "guess-1", "198.51.100.1")
            .await
            .assert_status(401);
    }
    let refused = attempt(&app, "vic", "vic-password-1", "198.51.100.1").await;
    refused.assert_status(429);
    let wait = retry_after(&refused);
    assert!((1..=900).contains(&wait), "Retry-After {wait}");
    // ...while the user logs in from another address.
    attempt(&app, "vic", "vic-password-1", "192.0.2.44")
        .await
        .assert_status(303);

    // Guessing spread over addresses reaches the per-login ceiling (6):
    for _ in 0..3 {
        attempt(&app, "vic", "guess-2", "198.51.100.2")
            .await
            .assert_status(401);
    }
    // now a new address is refused even with the right password...
    let refused = attempt(&app, "vic", "vic-password-1", "198.51.100.3").await;
    refused.assert_status(429);
    assert!(retry_after(&refused) >= 1);
    // ...but never an address the user has logged in from.
    attempt(&app, "vic", "vic-password-1", home)
        .await
        .assert_status(303);
    attempt(&app, "vic", "vic-password-1", "192.0.2.44")
        .await
        .assert_status(303);
}

both_backends!(forwarded_for_counts_only_from_trusted_proxies, |config| {
    config.login_throttle_failures = 2;
});
async fn forwarded_for_counts_only_from_trusted_proxies(app: TestApp) {
    app.create_user("wes", "human", Some("wes-password-1"))
        .await;
    // No trusted proxy: the header is the client's own claim, and ignored.
    for forged in ["198.51.100.1", "198.51.100.2"] {
        attempt(&app, "wes", "guess-1", forged)
            .await
            .assert_status(401);
    }
    attempt(&app, "wes", "wes-password-1", "198.51.100.3")
        .await
        .assert_status(429);
}

both_backends!(junk_nonces_are_refused_without_hashing);
async fn junk_nonces_are_refused_without_hashing(app: TestApp) {
    app.create_user("xia", "human", Some("xia-password-1"))
        .await;
    let (browser, nonce) = login_page(&app).await;
    let before = hashes(&app);
    let junk = ["", "x", &"0".repeat(64), &"f".repeat(64), &nonce[..63]];
    for _ in 0..10 {
        for bad in junk {
            post_login(&browser, bad, "xia", "guess-1", None)
                .await
                .assert_status(403);
        }
    }
    assert_eq!(hashes(&app), before, "a refused nonce cost a hash");

    // The page's own nonce is checked: one hash, then it is spent.
    post_login(&browser, &nonce, "xia", "guess-1", None)
        .await
        .assert_status(401);
    assert_eq!(hashes(&app), before + 1);
    post_login(&browser, &nonce, "xia", "xia-password-1", None)
        .await
        .assert_status(403);
    assert_eq!(hashes(&app), before + 1, "a spent nonce cost a hash");
}

both_backends!(throttled_logins_are_refused_without_hashing, |config| {
    config.login_throttle_failures = 2;
});
async fn throttled_logins_are_refused_without_hashing(app: TestApp) {
    app.create_user("yan", "human", Some("yan-password-1"))
        .await;
    for _ in 0..2 {
        let (browser, nonce) = login_page(&app).await;
        post_login(&browser, &nonce, "yan", "guess-1", None)
            .await
            .assert_status(401);
    }
    let before = hashes(&app);
    for _ in 0..5 {
        let (browser, nonce) = login_page(&app).await;
        let resp = post_login(&browser, &nonce, "yan", "yan-password-1", None).await;
        resp.assert_status(429);
        assert!(retry_after(&resp) >= 1);
    }
    assert_eq!(hashes(&app), before, "a throttled attempt cost a hash");
}

both_backends!(saturated_hashing_answers_503_with_retry_after, |config| {
    config.login_hash_concurrency = 1;
    config.login_hash_wait_ms = 100;
});
async fn saturated_hashing_answers_503_with_retry_after(app: TestApp) {
    app.create_user("zoe", "human", Some("zoe-password-1"))
        .await;
    let (browser, nonce) = login_page(&app).await;
    let before = hashes(&app);
    {
        // Every hashing slot busy, as under a flood of logins.
        let _all = app.writ().ctx().login_gate.occupy_all().await;
        let started = Instant::now();
        let resp = post_login(&browser, &nonce, "zoe", "zoe-password-1", None).await;
        resp.assert_status(503);
        assert!(retry_after(&resp) >= 1);
        assert!(
            started.elapsed() >= Duration::from_millis(100),
            "did not wait"
        );
        assert_eq!(hashes(&app), before);
    }
    // Nothing was consumed: the same form goes through once a slot is free.
    post_login(&browser, &nonce, "zoe", "zoe-password-1", None)
        .await
        .assert_status(303);
    assert_eq!(hashes(&app), before + 1);
}

async fn count(conn: &mut SqlConn, sql: &str) -> i64 {
    conn.integer(&format!("SELECT COUNT(*) FROM {sql}")).await
}

both_backends!(pre_login_rows_stay_bounded, |config: &mut writ::Config| {
    config.trusted_proxies = vec!["127.0.0.1".into()];
    config.prelogin_sessions_per_address = 16;
    config.prelogin_sessions_total = 40;
});
async fn pre_login_rows_stay_bounded(app: TestApp) {
    app.create_user("abe", "human", Some("abe-password-1"))
        .await;
    let mut conn = SqlConn::connect(&app.database_url()).await;
    // 1,000 cookie-less visits from one address, eight at a time.
    let visits = (0..8).map(|_| {
        let client = app.client.clone();
        let url = app.url("/user/login");
        tokio::spawn(async move {
            for _ in 0..125 {
                let resp = client.get(&url).send().await.expect("GET /user/login");
                assert_eq!(resp.status().as_u16(), 200);
            }
        })
    });
    for visit in futures_util::future::join_all(visits).await {
        visit.expect("visits");
    }
    // Concurrent visits may overshoot a cap by as many as run at once
    // (PostgreSQL); the next visit trims back.
    let pre = "sessions WHERE user_id IS NULL";
    assert!(count(&mut conn, pre).await <= 16 + 8, "per-address cap");
    app.get("/user/login", Auth::None).await.assert_status(200);
    assert!(count(&mut conn, pre).await <= 16, "per-address cap");
    assert!(count(&mut conn, "form_nonces").await <= 16);

    // Visits from many addresses stay within the total.
    for i in 0..100 {
        let resp = app
            .client
            .get(app.url("/user/login"))
            .header(
                "X-Forwarded-For",
                format!("10.0.{}.{}", i / 200, i % 200 + 1),
            )
            .send()
            .await
            .expect("GET /user/login");
        assert_eq!(resp.status().as_u16(), 200);
    }
    assert!(count(&mut conn, pre).await <= 40, "total cap");
    assert!(count(&mut conn, "form_nonces").await <= 40);

    // One session reloading the page keeps a few login nonces, not one per visit.
    let (browser, _) = login_page(&app).await;
    for _ in 0..30 {
        browser.get_page("/user/login").await.assert_status(200);
    }
    let browser_nonce_rows = count(
        &mut conn,
        "form_nonces WHERE session_id = (SELECT MAX(id) FROM sessions WHERE user_id IS NULL)",
    )
    .await;
    assert!(browser_nonce_rows <= 8, "{browser_nonce_rows} nonces");
    // The newest pre-login session still logs in.
    let page = browser.get_page("/user/login").await;
    let nonce = nonce_in(&page.body, "/user/login").expect("nonce");
    post_login(&browser, &nonce, "abe", "abe-password-1", None)
        .await
        .assert_status(303);
}

/// A TCP connection to the app from a loopback address of our choosing.
async fn connect_from(app: &TestApp, from: &str) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind(SocketAddr::new(from.parse().expect("ip"), 0))
        .expect("bind the client address");
    let to: SocketAddr = format!("127.0.0.1:{}", app.port()).parse().unwrap();
    socket.connect(to).await.expect("connect")
}

/// Waits up to `limit` for the server to close the connection; true if it did.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

/// Sends one request and reads its answer's head; true when it was 200.
async fn request_ok(stream: &mut TcpStream, path: &str) -> bool {
    let request = format!("GET {path} HTTP/1.1\r\nHost: writ\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut buf = vec![0u8; 4096];
    let mut got = Vec::new();
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => return false,
        }
    }
    // Drain the (small) body so the connection is idle again.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _ = tokio::time::timeout(Duration::from_millis(50), stream.read(&mut buf)).await;
    got.starts_with(b"HTTP/1.1 200")
}

both_backends!(
    timeouts_cut_stalled_headers_and_idle_connections,
    |config: &mut writ::Config| {
        config.header_read_timeout_seconds = 1;
        config.idle_timeout_seconds = 3;
    }
);
async fn timeouts_cut_stalled_headers_and_idle_connections(app: TestApp) {
    // A connection that never sends a byte.
    let mut silent = connect_from(&app, "127.0.0.1").await;
    let started = Instant::now();
    assert!(closed_within(&mut silent, Duration::from_secs(5)).await);
    assert!(started.elapsed() >= Duration::from_millis(900));

    // Headers that never end (slowloris).
    let mut slow = connect_from(&app, "127.0.0.1").await;
    slow.write_all(b"GET /readyz HTTP/1.1\r\nHost: writ\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let _ = slow.write_all(b"X-Slow: 1\r\n").await;
    }
    assert!(closed_within(&mut slow, Duration::from_secs(5)).await);
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(3),
        "cut after {elapsed:?}"
    );

    // A kept-alive connection may idle longer than the header-read timeout,
    // but not longer than the idle timeout.
    let mut kept = connect_from(&app, "127.0.0.1").await;
    assert!(request_ok(&mut kept, "/readyz").await);
    tokio::time::sleep(Duration::from_millis(1800)).await;
    assert!(request_ok(&mut kept, "/readyz").await, "cut while idle");
    let started = Instant::now();
    assert!(closed_within(&mut kept, Duration::from_secs(6)).await);
    assert!(
        started.elapsed() >= Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
}

both_backends!(a_slow_request_is_never_cut, |config: &mut writ::Config| {
    config.header_read_timeout_seconds = 1;
    config.idle_timeout_seconds = 1;
});
async fn a_slow_request_is_never_cut(app: TestApp) {
    // Its headers come at once; its body takes three seconds.
    let body = br#"{"login":"slow-bot","kind":"bot"}"#;
    let mut stream = connect_from(&app, "127.0.0.1").await;
    let head = format!(
        "POST /api/v1/admin/users HTTP/1.1\r\nHost: writ\r\nAuthorization: token {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        app.admin_token,
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    for chunk in body.chunks(body.len() / 6 + 1) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        stream
            .write_all(chunk)
            .await
            .expect("the server kept reading");
    }
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("an answer")
            .expect("read");
        assert!(n > 0, "closed before answering");
        answer.extend_from_slice(&buf[..n]);
    }
    assert!(
        answer.starts_with(b"HTTP/1.1 201"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
}

/// A client whose connections come from `from`.
fn client_from(from: &str) -> Client {
    Client::builder()
        .local_address(from.parse::<IpAddr>().ok())
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client")
}

both_backends!(
    the_per_address_cap_leaves_room_for_others,
    |config: &mut writ::Config| {
        config.max_connections_per_address = 3;
        config.max_connections_total = 64;
        config.idle_timeout_seconds = 1;
        config.header_read_timeout_seconds = 30;
    }
);
async fn the_per_address_cap_leaves_room_for_others(app: TestApp) {
    app.create_user("agent-a", "bot", None).await;
    let token = app.create_token("agent-a", &["read:repository"]).await;
    // Let the setup's kept-alive connections idle out.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // One client holds its share of silent connections.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(connect_from(&app, "127.0.0.1").await);
    }
    let mut extra = connect_from(&app, "127.0.0.1").await;
    assert!(
        closed_within(&mut extra, Duration::from_secs(2)).await,
        "a fourth connection from one address was kept"
    );
    assert!(
        !closed_within(&mut held[0], Duration::from_millis(200)).await,
        "a connection within the cap was closed"
    );

    // Another address is served: readiness and an agent's request.
    let other = client_from("127.0.0.2");
    let ready = other.get(app.url("/readyz")).send().await.expect("readyz");
    assert_eq!(ready.status().as_u16(), 200);
    let grants = other
        .get(app.url("/api/v1/agent-work-grants"))
        .header("Authorization", format!("token {}", token.token))
        .send()
        .await
        .expect("agent request");
    assert_eq!(grants.status().as_u16(), 200);

    // Once the client lets go, its address is served again.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut again = connect_from(&app, "127.0.0.1").await;
        if request_ok(&mut again, "/readyz").await {
            break;
        }
        assert!(Instant::now() < deadline, "127.0.0.1 stayed refused");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

both_backends!(the_total_cap_closes_extra_connections, |config| {
    config.max_connections_total = 4;
    config.max_connections_per_address = 4;
    config.idle_timeout_seconds = 1;
    config.header_read_timeout_seconds = 30;
});
async fn the_total_cap_closes_extra_connections(app: TestApp) {
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The per-address cap is at most half the total: two each.
    let mut held = Vec::new();
    for from in ["127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.2"] {
        held.push(connect_from(&app, from).await);
    }
    let mut over = connect_from(&app, "127.0.0.3").await;
    assert!(
        closed_within(&mut over, Duration::from_secs(2)).await,
        "a connection over the total was kept"
    );
    assert!(!closed_within(&mut held[3], Duration::from_millis(200)).await);
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut again = connect_from(&app, "127.0.0.3").await;
        if request_ok(&mut again, "/readyz").await {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still refused after the others left"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    app.get("/readyz", Auth::None).await.assert_status(200);
}
