//! A server shutting down answers its waiting requests and ends its event
//! streams, so its graceful shutdown is not held up by them.

use std::time::Duration;

use super::all_after;
use crate::helpers::{Auth, TestApp};
use crate::world::World;

both_backends!(a_shutdown_answers_waiting_requests_and_ends_streams);
async fn a_shutdown_answers_waiting_requests_and_ends_streams(app: TestApp) {
    let world = World::new(&app).await;
    world.prepare("Before the shutdown").await;
    let (_, cursor) = all_after(&app, Auth::Token(&world.bot), "").await;

    // A second server on the same database, which this test shuts down.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let config = writ::Config {
        database_url: app.database_url(),
        bind: listener.local_addr().unwrap().to_string(),
        public_url: Some(base.clone()),
        ..writ::Config::default()
    };
    let writ = writ::Writ::open(config).await.expect("open");
    let watched = writ.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(async move {
        writ.serve(listener, async {
            let _ = stopped.await;
        })
        .await
    });

    let token = world.bot.clone();
    let client = app.client.clone();
    let url = format!("{base}/api/v1/events?wait=60&after={cursor}");
    let poll = tokio::spawn({
        let (client, token) = (client.clone(), token.clone());
        async move {
            let resp = client
                .get(url)
                .header("authorization", format!("token {token}"))
                .send()
                .await
                .expect("long poll");
            (
                resp.status().as_u16(),
                resp.text().await.unwrap_or_default(),
            )
        }
    });
    let mut stream = client
        .get(format!("{base}/api/v1/events?after={cursor}"))
        .header("authorization", format!("token {token}"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("open the stream");
    assert_eq!(stream.status().as_u16(), 200);
    while watched.ctx().waiters.count() < 2 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    stop.send(()).expect("stop");
    let answered = tokio::time::timeout(Duration::from_secs(15), poll)
        .await
        .expect("the long poll is answered at the shutdown")
        .expect("join");
    assert_eq!(answered.0, 200, "{}", answered.1);
    let page: serde_json::Value = serde_json::from_str(&answered.1).expect("JSON");
    assert_eq!(page["events"], serde_json::json!([]));
    assert_eq!(page["next_after"], cursor.as_str());
    let ended = tokio::time::timeout(Duration::from_secs(15), async {
        while let Ok(Some(_)) = stream.chunk().await {}
    })
    .await;
    assert!(ended.is_ok(), "the stream ends at the shutdown");
    tokio::time::timeout(Duration::from_secs(15), served)
        .await
        .expect("the server stops within 15 s")
        .expect("join")
        .expect("serve");
}
