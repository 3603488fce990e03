//! When the database cannot serve (a full file, a read-only database, lost
//! connections), every call answers 503 `storage_unavailable` with
//! `Retry-After`, never 500; `/readyz` says so; and Writ recovers by itself
//! once the cause is gone, with every acknowledged submission kept once.

use reqwest::Method;

use crate::db::SqlConn;
use crate::helpers::{Auth, Backend, Resp, TestApp, postgres_admin_url};
use crate::world::{BOT, Prepare, World, new_key, submit_body};

/// The SQLite test's cap on the database file, in pages.
const MAX_PAGES: u64 = 3000;

/// A body large enough that a few submissions need new pages.
fn big_body() -> String {
    "lorem ipsum ".repeat(2000)
}

fn assert_storage_unavailable(resp: &Resp) {
    resp.assert_error(503, "storage_unavailable");
    assert_eq!(resp.header("retry-after").as_deref(), Some("1"));
}

async fn readyz(app: &TestApp) -> u16 {
    app.get("/readyz", Auth::None).await.status.as_u16()
}

/// Waits for `/readyz` to answer 200 again, as it must within a few
/// seconds of the last failed write.
async fn ready_again(app: &TestApp) {
    for _ in 0..100 {
        if readyz(app).await == 200 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("/readyz stayed 503 after recovery");
}

/// Submits with fresh keys until one is refused; every answer before it
/// must be 201. The keys acknowledged, and the key refused.
async fn submit_until_refused(world: &World<'_>, id: i64) -> (Vec<String>, String, Resp) {
    let mut acknowledged = Vec::new();
    for _ in 0..400 {
        let key = new_key();
        let resp = world.submit(id, &key, "Fill", &big_body()).await;
        if resp.status.as_u16() == 201 {
            acknowledged.push(key);
            continue;
        }
        return (acknowledged, key, resp);
    }
    panic!("the database never filled up");
}

async fn receipts(app: &TestApp, id: i64) -> usize {
    let mut sql = SqlConn::connect(&app.database_url()).await;
    let rows = sql
        .text_rows(&format!(
            "SELECT request_key FROM submissions WHERE grant_id = {id}"
        ))
        .await;
    sql.close().await;
    rows.len()
}

/// SQLite: the database file reaches its cap (`sqlite_max_page_count`);
/// room made by another connection lets writes commit again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_sqlite_database_answers_503_and_recovers() {
    let app = TestApp::spawn_with(Backend::Sqlite, |c| {
        c.sqlite_max_page_count = Some(MAX_PAGES)
    })
    .await;
    crate::helpers::within_time_limit(full_sqlite_database(app)).await;
}

async fn full_sqlite_database(app: TestApp) {
    let world = World::new(&app).await;
    let mut form = Prepare::new(BOT, "Fill the disk");
    form.max_submissions = "1000".into();
    let id = world.active_with(&form).await;
    // Another connection (not capped) fills the file to a few pages short
    // of the cap, as other data on a disk would.
    let mut sql = SqlConn::connect(&app.database_url()).await;
    sql.execute("CREATE TABLE filler (pad BLOB)").await.unwrap();
    loop {
        let pages = sql
            .text_rows("SELECT CAST(page_count AS TEXT) FROM pragma_page_count()")
            .await;
        let pages: u64 = pages[0][0].as_deref().unwrap().parse().unwrap();
        if pages + 8 >= MAX_PAGES {
            break;
        }
        sql.execute("INSERT INTO filler VALUES (zeroblob(16000))")
            .await
            .unwrap();
    }

    let (acknowledged, refused_key, refused) = submit_until_refused(&world, id).await;
    assert_storage_unavailable(&refused);
    assert_eq!(readyz(&app).await, 503, "/readyz while writes fail");
    // Reads still answer; an agent read records its call, which needs a
    // write too: 200 or 503, never 500.
    let read = world.read(id).await;
    assert!([200, 503].contains(&read.status.as_u16()), "{}", read.body);
    // A browser page answers 503 too, as a page.
    let page = world
        .alice
        .client
        .request(Method::GET, app.url("/"))
        .send()
        .await
        .unwrap();
    assert_ne!(page.status().as_u16(), 500);

    // Room again: the same request now succeeds, once.
    sql.execute("DELETE FROM filler").await.unwrap();
    sql.close().await;
    let retried = world.submit(id, &refused_key, "Fill", &big_body()).await;
    retried.assert_status(201);
    ready_again(&app).await;
    assert_eq!(receipts(&app, id).await, acknowledged.len() + 1);
    let metrics = app.get("/metrics", Auth::None).await.body;
    assert!(
        metrics.contains("writ_storage_unavailable_total"),
        "the refusals are counted"
    );
}

/// PostgreSQL: the database turns read-only and every connection is cut
/// (as a failover to a standby would); then it is writable again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_postgres_answers_503_and_recovers() {
    let Some(admin_url) = postgres_admin_url() else {
        crate::helpers::skip_postgres();
        return;
    };
    let app = TestApp::spawn(Backend::Postgres).await;
    crate::helpers::within_time_limit(read_only_postgres(app, admin_url)).await;
}

async fn read_only_postgres(app: TestApp, admin_url: String) {
    let world = World::new(&app).await;
    let id = world.active_with(&Prepare::new(BOT, "Failover")).await;
    // Read before the failover: a grant read records its call, a write.
    let digest = world.digest(id).await;
    let submit = |key: String| {
        let body = submit_body(&digest, &key, "During the failover", "");
        world.submit_with(id, body)
    };
    let url = app.database_url();
    let name = url
        .rsplit('/')
        .next()
        .unwrap()
        .split('?')
        .next()
        .unwrap()
        .to_owned();
    let mut admin = SqlConn::connect(&admin_url).await;
    let cut = format!(
        "SELECT CAST(pg_terminate_backend(pid) AS TEXT) FROM pg_stat_activity \
         WHERE datname = '{name}' AND pid <> pg_backend_pid()"
    );
    admin
        .execute(&format!(
            "ALTER DATABASE \"{name}\" SET default_transaction_read_only = on"
        ))
        .await
        .unwrap();
    admin.text_rows(&cut).await;

    // Every answer is 503 storage_unavailable (never 500) until the
    // database is writable again.
    let key = new_key();
    for _ in 0..3 {
        let resp = submit(key.clone()).await;
        assert_storage_unavailable(&resp);
    }
    assert_eq!(readyz(&app).await, 503, "/readyz while writes fail");

    admin
        .execute(&format!(
            "ALTER DATABASE \"{name}\" RESET default_transaction_read_only"
        ))
        .await
        .unwrap();
    admin.text_rows(&cut).await;
    admin.close().await;
    // A cut connection may fail the first call after it (503); then the
    // same key commits once.
    let mut answers = Vec::new();
    for _ in 0..5 {
        let resp = submit(key.clone()).await;
        let status = resp.status.as_u16();
        answers.push(status);
        if status == 201 {
            break;
        }
        assert_storage_unavailable(&resp);
    }
    assert_eq!(answers.last(), Some(&201), "answers {answers:?}");
    ready_again(&app).await;
    assert_eq!(receipts(&app, id).await, 1);
}

/// The same refusal reaches a bot over MCP as a tool error carrying
/// `native_status` 503, and the raw body is JSON with no driver text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unavailable_database_never_leaks_driver_text() {
    let app = TestApp::spawn_with(Backend::Sqlite, |c| {
        c.sqlite_max_page_count = Some(MAX_PAGES)
    })
    .await;
    crate::helpers::within_time_limit(async {
        let world = World::new(&app).await;
        let mut form = Prepare::new(BOT, "No leaks");
        form.max_submissions = "1000".into();
        let id = world.active_with(&form).await;
        let mut sql = SqlConn::connect(&app.database_url()).await;
        sql.execute("CREATE TABLE filler (pad BLOB)").await.unwrap();
        sql.execute(&format!(
            "INSERT INTO filler VALUES (zeroblob({}))",
            (MAX_PAGES - 40) * 4096
        ))
        .await
        .unwrap();
        sql.close().await;
        let (_, _, refused) = submit_until_refused(&world, id).await;
        assert_storage_unavailable(&refused);
        let body = refused.body.to_lowercase();
        for leak in ["sqlite", "disk", "full", "constraint"] {
            assert!(!body.contains(leak), "{leak} in {}", refused.body);
        }
    })
    .await;
}
