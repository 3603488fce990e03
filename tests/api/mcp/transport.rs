//! Transport refusals: batches, body limits, methods, the Host guard and
//! credentials, none of them reaching a tool.

use reqwest::Method;
use serde_json::json;

use super::{EXCHANGE_LIMIT, audit_rows, post_mcp_raw, rpc_response};
use crate::helpers::{Auth, Body, TestApp, plain_client};
use crate::world::{ALICE, BOT, BOT_SCOPES, World};

/// How a raw POST frames its body.
#[derive(Clone, Copy)]
enum Framing {
    /// `Content-Length`, the body in one piece.
    Length,
    /// `Transfer-Encoding: chunked`, no `Content-Length`.
    Chunked,
}

/// POSTs a ping padded to `len` bytes to `/mcp` over a raw connection: the
/// status. The server may answer (413) and close before the whole body is
/// sent, which an HTTP client library reports as a broken pipe instead of
/// the answer; this reads the answer whatever happened to the writes.
async fn raw_post(app: &TestApp, authorization: &str, len: usize, framing: Framing) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let head = r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"pad":""#;
    let tail = r#""}}}"#;
    let mut body = head.as_bytes().to_vec();
    body.resize(len.max(head.len() + tail.len()) - tail.len(), b'x');
    body.extend_from_slice(tail.as_bytes());
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", app.port()))
            .await
            .expect("connect");
        let framing_header = match framing {
            Framing::Length => format!("Content-Length: {}", body.len()),
            Framing::Chunked => "Transfer-Encoding: chunked".to_owned(),
        };
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: {authorization}\r\n\
             Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             {framing_header}\r\nConnection: close\r\n\r\n",
            app.port()
        );
        stream
            .write_all(request.as_bytes())
            .await
            .expect("write head");
        for chunk in body.chunks(64 * 1024) {
            let framed = match framing {
                Framing::Length => chunk.to_vec(),
                Framing::Chunked => {
                    let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
                    framed.extend_from_slice(chunk);
                    framed.extend_from_slice(b"\r\n");
                    framed
                }
            };
            if stream.write_all(&framed).await.is_err() {
                break;
            }
        }
        if let Framing::Chunked = framing {
            let _ = stream.write_all(b"0\r\n\r\n").await;
        }
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer).await;
        let text = String::from_utf8_lossy(&answer);
        text.split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no HTTP status in {text:?}"))
    };
    tokio::time::timeout(EXCHANGE_LIMIT, exchange)
        .await
        .expect("raw POST did not finish")
}

both_backends!(transport_refusals);
async fn transport_refusals(app: TestApp) {
    let world = World::new(&app).await;
    let bearer = format!("Bearer {}", world.bot);
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});

    // JSON-RPC batches are refused.
    for batch in [
        format!("[{ping}]"),
        format!(" \n[{ping}, {ping}]"),
        "[]".to_owned(),
    ] {
        let resp = post_mcp_raw(&app, &app.client, Some(&bearer), &[], batch.into_bytes()).await;
        resp.assert_status(400);
        let json = resp.json();
        assert_eq!(json["jsonrpc"], "2.0", "{json}");
        assert_eq!(json["error"]["code"], -32600, "{json}");
    }

    // Bodies: exactly 1 MiB is read; one byte more is 413.
    let limit = 1024 * 1024;
    let sized = |len: usize| {
        let head = r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"pad":""#;
        let tail = r#""}}}"#;
        let pad = len - head.len() - tail.len();
        format!("{head}{}{tail}", "x".repeat(pad)).into_bytes()
    };
    let fresh = plain_client(false);
    let resp = post_mcp_raw(&app, &fresh, Some(&bearer), &[], sized(limit)).await;
    assert_eq!(rpc_response(&resp, &json!(1))["result"], json!({}));
    // Larger bodies go over a raw connection: the server answers 413 without
    // reading the rest, and may close while the client is still writing.
    for len in [limit + 1, 3 * limit] {
        let status = raw_post(&app, &bearer, len, Framing::Length).await;
        assert_eq!(status, 413, "{len}-byte body");
    }

    // A body streamed without Content-Length is bounded the same way.
    let status = raw_post(&app, &bearer, 2 * limit, Framing::Chunked).await;
    assert_eq!(status, 413, "chunked 2 MiB body");
    let status = raw_post(&app, &bearer, 1000, Framing::Chunked).await;
    assert_eq!(status, 200, "small chunked body");

    // Only POST is served (stateless, no SSE stream), with or without a token.
    for method in [Method::GET, Method::DELETE, Method::PUT] {
        for auth in [Auth::None, Auth::Bearer(&world.bot)] {
            let resp = app.send(method.clone(), "/mcp", auth, Body::None).await;
            assert_eq!(
                resp.status.as_u16(),
                405,
                "{method} {auth:?}: {}",
                resp.body
            );
        }
    }
    // The DNS-rebinding guard: a foreign Host is refused.
    let resp = post_mcp_raw(
        &app,
        &app.client,
        Some(&bearer),
        &[("Host", "evil.example")],
        ping.to_string().into_bytes(),
    )
    .await;
    assert_eq!(resp.status.as_u16(), 403, "{}", resp.body);

    // Credentials: none, a bad one, a human's token, a browser session.
    let body = ping.to_string().into_bytes();
    let resp = post_mcp_raw(&app, &app.client, None, &[], body.clone()).await;
    resp.assert_error(401, "unauthenticated");
    assert!(resp.header("www-authenticate").is_some(), "{resp:?}");
    let bad = format!("Bearer {}x", world.bot);
    post_mcp_raw(&app, &app.client, Some(&bad), &[], body.clone())
        .await
        .assert_error(401, "unauthenticated");
    let human = format!("Bearer {}", world.alice_token);
    post_mcp_raw(&app, &app.client, Some(&human), &[], body.clone())
        .await
        .assert_error(403, "agent_only");
    let admin = format!("Bearer {}", app.admin_token);
    post_mcp_raw(&app, &app.client, Some(&admin), &[], body.clone())
        .await
        .assert_error(403, "agent_only");
    // Basic with a human's password is never accepted; with her token it is
    // still a human.
    let basic = |login: &str, secret: &str| {
        use base64::Engine as _;
        let raw = format!("{login}:{secret}");
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )
    };
    post_mcp_raw(
        &app,
        &app.client,
        Some(&basic(ALICE, crate::world::ALICE_PW)),
        &[],
        body.clone(),
    )
    .await
    .assert_error(401, "unauthenticated");
    post_mcp_raw(
        &app,
        &app.client,
        Some(&basic(ALICE, &world.alice_token)),
        &[],
        body.clone(),
    )
    .await
    .assert_error(403, "agent_only");
    // The bot's own token in the other accepted forms.
    for authorization in [format!("token {}", world.bot), basic(BOT, &world.bot)] {
        let resp = post_mcp_raw(&app, &app.client, Some(&authorization), &[], body.clone()).await;
        assert_eq!(rpc_response(&resp, &json!(1))["result"], json!({}));
    }
    // alice's browser carries her session cookie: never a credential here.
    post_mcp_raw(&app, &world.alice.client, None, &[], body.clone())
        .await
        .assert_error(401, "unauthenticated");
    // A revoked bot token is refused.
    let spare = app.create_token(BOT, BOT_SCOPES).await;
    app.delete_token(BOT, spare.id).await;
    let revoked = format!("Bearer {}", spare.token);
    post_mcp_raw(&app, &app.client, Some(&revoked), &[], body)
        .await
        .assert_error(401, "unauthenticated");
    // None of these was a tools/call: nothing audited.
    assert!(audit_rows(&app).await.is_empty());
}
