//! Uncertain delivery: a lost response resolved by readback and a same-key
//! retry, and chunked bodies limited like any other.

use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncWriteExt as _;

use crate::helpers::{Auth, Resp, TestApp};
use crate::world::{OWNER, REPO, World, new_key, submission_of, submit_body, submit_path};

/// How a raw submit ends.
#[derive(Clone, Copy, Debug)]
enum Cut {
    /// Half the body is sent, then the connection is dropped.
    MidBody,
    /// The whole request is sent and the connection dropped at once.
    AfterRequest,
    /// The whole request is sent; the connection is held (never read) until
    /// the receipt is readable, then dropped.
    AfterCommit,
}

/// Sends a submit over a raw TCP connection and drops it without reading
/// the answer.
async fn submit_and_drop(world: &World<'_>, id: i64, body: &Value, key: &str, cut: Cut) {
    let app = world.app;
    let bytes = serde_json::to_vec(body).unwrap();
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: token {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        submit_path(OWNER, REPO, id),
        app.port(),
        world.bot,
        bytes.len()
    );
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", app.port()))
        .await
        .expect("connect");
    stream.write_all(head.as_bytes()).await.unwrap();
    match cut {
        Cut::MidBody => {
            stream.write_all(&bytes[..bytes.len() / 2]).await.unwrap();
            stream.flush().await.unwrap();
        }
        Cut::AfterRequest => {
            stream.write_all(&bytes).await.unwrap();
            stream.flush().await.unwrap();
        }
        Cut::AfterCommit => {
            stream.write_all(&bytes).await.unwrap();
            stream.flush().await.unwrap();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            loop {
                let resp = world.readback(id, key).await;
                if resp.status.as_u16() == 200 {
                    break;
                }
                resp.assert_error(404, "not_found");
                assert!(tokio::time::Instant::now() < deadline, "never committed");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    drop(stream);
}

/// Reads back a key for up to `patience`, while it is 404.
async fn readback_soon(world: &World<'_>, id: i64, key: &str, patience: Duration) -> Resp {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        let resp = world.readback(id, key).await;
        if resp.status.as_u16() != 404 || tokio::time::Instant::now() >= deadline {
            return resp;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

both_backends!(a_lost_response_is_resolved_by_readback_and_same_key_retry);
async fn a_lost_response_is_resolved_by_readback_and_same_key_retry(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.active("Uncertain delivery").await;
    let digest = world.digest(id).await;
    let mut keys = Vec::new();
    for (n, cut) in [Cut::MidBody, Cut::AfterRequest, Cut::AfterCommit]
        .into_iter()
        .enumerate()
    {
        let key = new_key();
        let body = submit_body(&digest, &key, &format!("Lost answer {n}"), "body");
        submit_and_drop(&world, id, &body, &key, cut).await;

        // The adapter's rule: read back the same key, then retry it.
        let patience = match cut {
            Cut::MidBody => Duration::from_millis(300),
            _ => Duration::from_secs(3),
        };
        let readback = readback_soon(&world, id, &key, patience).await;
        let known = match readback.status.as_u16() {
            200 => Some(submission_of(&readback)),
            404 => None,
            other => panic!("{cut:?}: readback {other}: {}", readback.body),
        };
        match cut {
            Cut::MidBody => assert!(known.is_none(), "a half-sent request committed"),
            Cut::AfterCommit => assert!(known.is_some()),
            Cut::AfterRequest => {}
        }
        let retry = world.submit_with(id, body.clone()).await;
        match &known {
            Some(submission) => {
                retry.assert_status(200);
                assert_eq!(retry.header("idempotent-replayed").as_deref(), Some("true"));
                assert_eq!(&submission_of(&retry), submission);
            }
            None => {
                // Either it never committed (201 now), or it committed just
                // after the last readback (a replay): never a second issue.
                let status = retry.status.as_u16();
                assert!(status == 201 || status == 200, "{cut:?}: {}", retry.body);
            }
        }
        let final_receipt = world.receipt(id, &key).await;
        assert_eq!(final_receipt, submission_of(&retry));
        eprintln!("{cut:?}: readback found it: {}", known.is_some());
        keys.push(key);
    }

    // Exactly one issue per key, and the count matches.
    let issues = world.all_issues().await;
    for key in &keys {
        let n = issues
            .iter()
            .filter(|i| i["agent_work_grant"]["request_key"] == key.as_str())
            .count();
        assert_eq!(n, 1, "issues for {key}");
    }
    assert_eq!(issues.len(), keys.len());
    assert_eq!(world.grant(id).await["submission_count"], keys.len() as i64);
    // The server is still well.
    app.get("/readyz", Auth::None).await.assert_status(200);
}

/// Sends a submit with a chunked body (no Content-Length) over a raw
/// connection and returns the answer's status and text.
async fn chunked_submit(world: &World<'_>, id: i64, body: &[u8]) -> (u16, String) {
    use tokio::io::AsyncReadExt as _;
    let app = world.app;
    let mut request = format!(
        "POST {} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: token {}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        submit_path(OWNER, REPO, id),
        app.port(),
        world.bot,
    )
    .into_bytes();
    for chunk in body.chunks(64 * 1024) {
        request.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        request.extend_from_slice(chunk);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", app.port()))
        .await
        .expect("connect");
    // The server may answer and close before reading everything.
    let _ = stream.write_all(&request).await;
    let _ = stream.flush().await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "no answer within 30 s");
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
    (status, text)
}

both_backends!(chunked_bodies_are_limited_too);
async fn chunked_bodies_are_limited_too(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.active("Chunked bodies").await;
    let digest = world.digest(id).await;

    // A small chunked body is accepted.
    let key = new_key();
    let body = serde_json::to_vec(&submit_body(&digest, &key, "Chunked", "in pieces")).unwrap();
    let (status, text) = chunked_submit(&world, id, &body).await;
    assert_eq!(status, 201, "{text}");
    let submission = world.receipt(id, &key).await;
    let issue = world
        .issue_at(OWNER, REPO, submission["issue"]["index"].as_i64().unwrap())
        .await
        .json();
    assert_eq!(issue["body"], "in pieces");

    // Without a Content-Length, more than 1 MiB is still 413.
    let key = new_key();
    let base = serde_json::to_vec(&submit_body(&digest, &key, "Chunked, too large", ""))
        .unwrap()
        .len();
    let large = "x".repeat(1024 * 1024 + 1 - base);
    let body =
        serde_json::to_vec(&submit_body(&digest, &key, "Chunked, too large", &large)).unwrap();
    assert_eq!(body.len(), 1024 * 1024 + 1);
    let (status, text) = chunked_submit(&world, id, &body).await;
    assert_eq!(status, 413, "{}", &text[..text.len().min(500)]);
    assert!(text.contains("payload_too_large"), "{text}");
    world
        .readback(id, &key)
        .await
        .assert_error(404, "not_found");
    assert_eq!(world.grant(id).await["submission_count"], 1);
    assert_eq!(world.all_issues().await.len(), 1);
}
