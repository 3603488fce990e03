//! The handshake: each protocol revision negotiated, the stateless
//! `server/discover` probe answered in JSON-RPC.

use serde_json::json;

use super::{DISCOVER_VERSION, HANDSHAKE_VERSIONS, Mcp, lone_bot, post_mcp, rpc_response};
use crate::helpers::TestApp;

both_backends!(handshake_negotiates_each_version);
async fn handshake_negotiates_each_version(app: TestApp) {
    let token = lone_bot(&app).await;
    for (n, version) in HANDSHAKE_VERSIONS.iter().enumerate() {
        let id = json!(n + 1);
        let init = json!({
            "jsonrpc": "2.0", "id": id, "method": "initialize",
            "params": {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "writ-tests", "version": "1"},
            },
        });
        let resp = post_mcp(&app, &token, &[], &init).await;
        let result = rpc_response(&resp, &id)["result"].clone();
        assert_eq!(result["protocolVersion"], *version, "{result}");
        assert_eq!(result["serverInfo"]["name"], "writ", "{result}");
        assert!(result["capabilities"]["tools"].is_object(), "{result}");

        // The session-less follow-ups of that client, with the version header.
        let headers = [("MCP-Protocol-Version", *version)];
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let resp = post_mcp(&app, &token, &headers, &note).await;
        resp.assert_status(202);
        assert!(resp.body.is_empty(), "{}", resp.body);
        let ping = json!({"jsonrpc": "2.0", "id": "ping-1", "method": "ping"});
        let resp = post_mcp(&app, &token, &headers, &ping).await;
        assert_eq!(rpc_response(&resp, &json!("ping-1"))["result"], json!({}));
        let list = json!({"jsonrpc": "2.0", "id": 99, "method": "tools/list"});
        let resp = post_mcp(&app, &token, &headers, &list).await;
        assert_eq!(
            rpc_response(&resp, &json!(99))["result"]["tools"],
            json!([])
        );
    }

    // Without the header (a 2025-03-26 client) ping works too.
    let mcp = Mcp::new(&app, &token);
    assert_eq!(mcp.result("ping", None).await, json!({}));
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    post_mcp(&app, &token, &[], &note).await.assert_status(202);

    // A version Writ does not speak is answered with one it does.
    let old = mcp
        .result(
            "initialize",
            Some(json!({
                "protocolVersion": "2024-11-05",
                "capabilities": {},
                "clientInfo": {"name": "writ-tests", "version": "1"},
            })),
        )
        .await;
    let offered = old["protocolVersion"].as_str().unwrap_or_default();
    assert!(HANDSHAKE_VERSIONS.contains(&offered), "{old}");

    // An unknown method is a JSON-RPC error, not an HTTP one.
    let json = mcp
        .request_with_id(json!(7), "resources/unknown", None)
        .await;
    assert_eq!(json["error"]["code"], -32601, "{json}");
}

both_backends!(server_discover_is_answered_in_json_rpc);
async fn server_discover_is_answered_in_json_rpc(app: TestApp) {
    let token = lone_bot(&app).await;
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": DISCOVER_VERSION,
        "io.modelcontextprotocol/clientInfo": {"name": "writ-tests", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    // The probe as current official clients send it.
    let probe = json!({
        "jsonrpc": "2.0", "id": 1, "method": "server/discover",
        "params": {"_meta": meta},
    });
    let headers = [
        ("MCP-Protocol-Version", DISCOVER_VERSION),
        ("Mcp-Method", "server/discover"),
    ];
    let resp = post_mcp(&app, &token, &headers, &probe).await;
    let json = rpc_response(&resp, &json!(1));
    match (json.get("result"), json.get("error")) {
        (Some(result), None) => {
            let supported = result["supportedVersions"]
                .as_array()
                .unwrap_or_else(|| panic!("no supportedVersions: {json}"));
            for version in HANDSHAKE_VERSIONS.iter().chain([&DISCOVER_VERSION]) {
                assert!(supported.contains(&json!(version)), "{version}: {json}");
            }
            assert!(result["capabilities"]["tools"].is_object(), "{json}");
        }
        (None, Some(error)) => assert_eq!(error["code"], -32601, "{json}"),
        _ => panic!("neither result nor error: {json}"),
    }

    // The same stateless revision then serves tools/list.
    let list = json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/list",
        "params": {"_meta": meta},
    });
    let headers = [
        ("MCP-Protocol-Version", DISCOVER_VERSION),
        ("Mcp-Method", "tools/list"),
    ];
    let resp = post_mcp(&app, &token, &headers, &list).await;
    assert_eq!(rpc_response(&resp, &json!(2))["result"]["tools"], json!([]));

    // A bare probe (no params, no header) is a JSON-RPC error on a 200.
    let bare = json!({"jsonrpc": "2.0", "id": 3, "method": "server/discover"});
    let resp = post_mcp(&app, &token, &[], &bare).await;
    let json = rpc_response(&resp, &json!(3));
    let code = json["error"]["code"].as_i64();
    assert!(
        json.get("result").is_some() || matches!(code, Some(-32601 | -32602)),
        "{json}"
    );

    // Malformed probes (no `_meta`, or `_meta` without the version header)
    // are refused in JSON-RPC: never a hang, never a bare HTTP error. The
    // 2026-07-28 transport answers them with HTTP 400 and a JSON-RPC error
    // naming the request.
    let malformed = [
        (json!({}), vec![]),
        (json!({"_meta": meta}), vec![]),
        (json!({}), vec![("MCP-Protocol-Version", DISCOVER_VERSION)]),
    ];
    for (n, (params, headers)) in malformed.into_iter().enumerate() {
        let id = json!(10 + n);
        let body =
            json!({"jsonrpc": "2.0", "id": id, "method": "server/discover", "params": params});
        let resp = post_mcp(&app, &token, &headers, &body).await;
        let status = resp.status.as_u16();
        assert!(
            status == 200 || status == 400,
            "probe {n}: status {status}: {}",
            resp.body
        );
        let json = resp.json();
        assert_eq!(json["id"], id, "probe {n}: {json}");
        let code = json["error"]["code"].as_i64().unwrap_or(0);
        assert!(
            [-32601, -32602, -32600, -32020].contains(&code),
            "probe {n}: {json}"
        );
    }
}
