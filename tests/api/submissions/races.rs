//! Races: one key raced, many grants sharing the index sequence, the limit
//! and a withdrawal under concurrent submits, and two servers on one
//! database.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::helpers::{Auth, Resp, TestApp, confirm_body, grant_path};
use crate::world::{
    BOT, OWNER, Prepare, REPO, RIVAL, World, grant_of, new_key, submission_of, submit_body,
    submit_path,
};

both_backends!(concurrent_same_key_submits_make_one_issue);
async fn concurrent_same_key_submits_make_one_issue(app: TestApp) {
    let world = World::new(&app).await;
    let id = world.active("Racing one key").await;
    let digest = world.digest(id).await;
    let key = new_key();
    let body = submit_body(&digest, &key, "Raced", "same content");
    let results = join_all((0..16).map(|_| world.submit_with(id, body.clone()))).await;
    let mut created = 0;
    let mut issue_ids = BTreeSet::new();
    let mut submissions = BTreeSet::new();
    for resp in &results {
        match resp.status.as_u16() {
            201 => created += 1,
            200 => assert_eq!(resp.header("idempotent-replayed").as_deref(), Some("true")),
            other => panic!("unexpected {other}: {}", resp.body),
        }
        let submission = submission_of(resp);
        issue_ids.insert(submission["issue"]["id"].as_i64().unwrap());
        submissions.insert(submission.to_string());
    }
    assert_eq!(created, 1, "exactly one submit creates");
    assert_eq!(issue_ids.len(), 1);
    assert_eq!(submissions.len(), 1, "every answer shows the same receipt");
    let issues = world.all_issues().await;
    assert_eq!(issues.len(), 1);
    assert_eq!(issues[0]["id"], *issue_ids.first().unwrap());
    assert_eq!(world.grant(id).await["submission_count"], 1);

    // One key raced with two contents: one creates, its twins replay, the
    // others conflict.
    let key = new_key();
    let bodies = [
        submit_body(&digest, &key, "Content A", "a"),
        submit_body(&digest, &key, "Content B", "b"),
    ];
    let results = join_all((0..16).map(|n| world.submit_with(id, bodies[n % 2].clone()))).await;
    let winner: Vec<usize> = (0..16)
        .filter(|n| results[*n].status.as_u16() == 201)
        .collect();
    assert_eq!(winner.len(), 1, "exactly one submit creates");
    let side = winner[0] % 2;
    let receipt = submission_of(&results[winner[0]]);
    for (n, resp) in results.iter().enumerate() {
        if n == winner[0] {
            continue;
        }
        if n % 2 == side {
            resp.assert_status(200);
            assert_eq!(submission_of(resp), receipt);
        } else {
            resp.assert_error(409, "request_key_conflict");
        }
    }
    assert_eq!(world.receipt(id, &key).await, receipt);
    assert_eq!(world.all_issues().await.len(), 2);
    assert_eq!(world.grant(id).await["submission_count"], 2);
}

both_backends!(concurrent_submits_on_many_grants_share_the_index_sequence);
async fn concurrent_submits_on_many_grants_share_the_index_sequence(app: TestApp) {
    let world = World::new(&app).await;
    let mut grants = Vec::new();
    for n in 0..3 {
        let id = world.active(&format!("Parallel grant {n}")).await;
        grants.push((id, world.bot.clone(), world.digest(id).await));
    }
    // rival-bot's grant on the same repository, confirmed by rival-bot.
    let rival_id = world
        .alice
        .prepare_ok(OWNER, REPO, &Prepare::new(RIVAL, "Rival's parallel grant"))
        .await;
    let rival_grant = app
        .get(
            &grant_path(OWNER, REPO, rival_id),
            Auth::Token(&world.rival),
        )
        .await
        .json()["grant"]
        .clone();
    let rival_digest = rival_grant["proposal_digest"].as_str().unwrap().to_owned();
    app.post_json(
        &format!("{}/confirm", grant_path(OWNER, REPO, rival_id)),
        Auth::Token(&world.rival),
        confirm_body(&rival_digest),
    )
    .await
    .assert_status(200);
    world.approve(rival_id).await.assert_status(303);
    grants.push((rival_id, world.rival.clone(), rival_digest));

    let mut jobs = Vec::new();
    for (id, token, digest) in &grants {
        for n in 0..4 {
            jobs.push((*id, token.clone(), digest.clone(), new_key(), n));
        }
    }
    let app = &app;
    let submits = join_all(jobs.iter().map(|(id, token, digest, key, n)| async move {
        app.post_json(
            &submit_path(OWNER, REPO, id),
            Auth::Token(token),
            submit_body(digest, key, &format!("Grant {id} work {n}"), ""),
        )
        .await
    }));
    let alice = world.alice_token.as_str();
    let ordinary = join_all((0..4).map(|n| async move {
        app.post_json(
            &crate::world::issues_path(OWNER, REPO),
            Auth::Token(alice),
            json!({"title": format!("Ordinary {n}"), "body": ""}),
        )
        .await
    }));
    let (submitted, opened) = tokio::join!(submits, ordinary);
    let mut expected = BTreeMap::new();
    for ((id, _, _, key, _), resp) in jobs.iter().zip(&submitted) {
        resp.assert_status(201);
        let submission = submission_of(resp);
        let index = submission["issue"]["index"].as_i64().unwrap();
        let attribution = json!({"grant_id": id, "request_key": key});
        assert!(
            expected.insert(index, attribution).is_none(),
            "index {index} twice"
        );
    }
    for resp in &opened {
        resp.assert_status(201);
        let index = resp.json()["index"].as_i64().unwrap();
        assert!(
            expected.insert(index, Value::Null).is_none(),
            "index {index} twice"
        );
    }
    assert_eq!(
        expected.keys().copied().collect::<Vec<_>>(),
        (1..=20).collect::<Vec<i64>>()
    );
    let issues = world.all_issues().await;
    assert_eq!(issues.len(), 20);
    let mut ids = BTreeSet::new();
    for issue in &issues {
        let index = issue["index"].as_i64().unwrap();
        assert_eq!(issue["agent_work_grant"], expected[&index], "issue {index}");
        assert!(ids.insert(issue["id"].as_i64().unwrap()));
    }
    for (id, token, _) in &grants {
        let grant = app
            .get(&grant_path(OWNER, REPO, id), Auth::Token(token))
            .await
            .json()["grant"]
            .clone();
        assert_eq!(grant["submission_count"], 4, "grant {id}");
    }
}

both_backends!(concurrent_submits_respect_the_limit);
async fn concurrent_submits_respect_the_limit(app: TestApp) {
    let world = World::new(&app).await;
    let mut form = Prepare::new(BOT, "Five at most, raced");
    form.max_submissions = "5".to_owned();
    let id = world.active_with(&form).await;
    let digest = world.digest(id).await;
    let keys: Vec<String> = (0..16).map(|_| new_key()).collect();
    let results = join_all(keys.iter().enumerate().map(|(n, key)| {
        world.submit_with(id, submit_body(&digest, key, &format!("Raced {n}"), ""))
    }))
    .await;
    let mut created = BTreeMap::new();
    let mut limited = Vec::new();
    for (key, resp) in keys.iter().zip(&results) {
        match resp.status.as_u16() {
            201 => {
                created.insert(key.clone(), submission_of(resp));
            }
            409 => {
                assert_eq!(resp.code(), "submission_limit", "{}", resp.body);
                limited.push(key.clone());
            }
            other => panic!("unexpected {other}: {}", resp.body),
        }
    }
    assert_eq!(created.len(), 5);
    assert_eq!(limited.len(), 11);
    assert_eq!(world.grant(id).await["submission_count"], 5);
    for (key, submission) in &created {
        assert_eq!(&world.receipt(id, key).await, submission);
    }
    for key in &limited {
        world.readback(id, key).await.assert_error(404, "not_found");
    }
    let issues = world.all_issues().await;
    let indexes: Vec<i64> = issues
        .iter()
        .map(|i| i["index"].as_i64().unwrap())
        .collect();
    assert_eq!(indexes, vec![1, 2, 3, 4, 5]);
    let attributed: BTreeSet<String> = issues
        .iter()
        .map(|i| {
            i["agent_work_grant"]["request_key"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(attributed, created.keys().cloned().collect());
}

both_backends!(withdraw_racing_submits_keeps_every_receipt);
async fn withdraw_racing_submits_keeps_every_receipt(app: TestApp) {
    let world = World::new(&app).await;
    let mut form = Prepare::new(BOT, "Withdrawn while submitting");
    form.max_submissions = "100".to_owned();
    let id = world.active_with(&form).await;
    let digest = world.digest(id).await;
    let keys: Vec<String> = (0..16).map(|_| new_key()).collect();
    let page = world.alice.grant_page(OWNER, REPO, id).await;
    let reason = vec![("reason".to_owned(), "stop".to_owned())];
    let submits = join_all(keys.iter().enumerate().map(|(n, key)| {
        world.submit_with(id, submit_body(&digest, key, &format!("Race {n}"), ""))
    }));
    let withdraw = async {
        // Let some submits start first.
        tokio::time::sleep(Duration::from_millis(5)).await;
        world
            .alice
            .submit_from(&page, OWNER, REPO, id, "withdraw", &reason)
            .await
    };
    let (results, withdrawn) = tokio::join!(submits, withdraw);
    withdrawn.assert_status(303);

    let mut created = BTreeMap::new();
    let mut refused = Vec::new();
    for (key, resp) in keys.iter().zip(&results) {
        match resp.status.as_u16() {
            201 => {
                created.insert(key.clone(), submission_of(resp));
            }
            409 => {
                assert_eq!(resp.code(), "grant_revoked", "{}", resp.body);
                assert_eq!(grant_of(resp)["state"], "revoked");
                refused.push(key.clone());
            }
            other => panic!("unexpected {other}: {}", resp.body),
        }
    }
    let grant = world.grant(id).await;
    assert_eq!(grant["state"], "revoked");
    assert_eq!(grant["submission_count"], created.len() as i64);
    for (key, submission) in &created {
        assert_eq!(&world.receipt(id, key).await, submission);
    }
    for key in &refused {
        world.readback(id, key).await.assert_error(404, "not_found");
    }
    let issues = world.all_issues().await;
    assert_eq!(issues.len(), created.len());
    let attributed: BTreeSet<String> = issues
        .iter()
        .map(|i| {
            i["agent_work_grant"]["request_key"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(attributed, created.keys().cloned().collect());
    eprintln!(
        "{} created before the withdrawal, {} refused",
        created.len(),
        refused.len()
    );
}

/// POSTs JSON to `base` + `path` (another server of the same app).
async fn post_to(app: &TestApp, base: &str, path: &str, token: &str, body: &Value) -> Resp {
    let response = app
        .client
        .post(format!("{base}{path}"))
        .header("Authorization", format!("token {token}"))
        .json(body)
        .send()
        .await
        .expect("send request");
    Resp::read(response).await
}

both_backends!(two_servers_on_one_database_keep_the_invariants);
async fn two_servers_on_one_database_keep_the_invariants(app: TestApp) {
    let world = World::new(&app).await;
    let replica = app.spawn_replica().await;
    let servers = [app.base.clone(), replica.base.clone()];
    let mut form = Prepare::new(BOT, "Two servers, one ledger");
    form.max_submissions = "5".to_owned();
    let id = world.active_with(&form).await;
    let digest = world.digest(id).await;
    let path = submit_path(OWNER, REPO, id);

    // One key raced through both servers: one issue.
    let key = new_key();
    let body = submit_body(&digest, &key, "Raced through two servers", "");
    let results =
        join_all((0..16).map(|n| post_to(&app, &servers[n % 2], &path, &world.bot, &body))).await;
    let created = results.iter().filter(|r| r.status.as_u16() == 201).count();
    assert_eq!(created, 1, "exactly one submit creates");
    let receipt = world.receipt(id, &key).await;
    for resp in &results {
        assert!(
            resp.status.as_u16() == 201 || resp.status.as_u16() == 200,
            "{}",
            resp.body
        );
        assert_eq!(submission_of(resp), receipt);
    }

    // Different keys through both servers: the limit holds across them.
    let keys: Vec<String> = (0..16).map(|_| new_key()).collect();
    let bodies: Vec<Value> = keys
        .iter()
        .enumerate()
        .map(|(n, k)| submit_body(&digest, k, &format!("Replica work {n}"), ""))
        .collect();
    let results = join_all(
        bodies
            .iter()
            .enumerate()
            .map(|(n, b)| post_to(&app, &servers[n % 2], &path, &world.bot, b)),
    )
    .await;
    let mut won = Vec::new();
    for (key, resp) in keys.iter().zip(&results) {
        match resp.status.as_u16() {
            201 => won.push(key.clone()),
            409 => assert_eq!(resp.code(), "submission_limit", "{}", resp.body),
            other => panic!("unexpected {other}: {}", resp.body),
        }
    }
    assert_eq!(won.len(), 4, "5 allowed, 1 already used");
    assert_eq!(world.grant(id).await["submission_count"], 5);
    let issues = world.all_issues().await;
    let indexes: Vec<i64> = issues
        .iter()
        .map(|i| i["index"].as_i64().unwrap())
        .collect();
    assert_eq!(indexes, vec![1, 2, 3, 4, 5]);
    for key in &won {
        world.receipt(id, key).await;
    }
}

both_backends!(a_burst_of_new_replayed_conflicting_and_refused_submits_gets_each_answer);
/// A burst of submissions on several grants at once: new ones, a replay, a
/// conflict and some over a grant's limit. Each gets the answer it gets
/// alone, each call has its one record, each new issue its one event.
async fn a_burst_of_new_replayed_conflicting_and_refused_submits_gets_each_answer(app: TestApp) {
    let world = World::new(&app).await;
    let mut sql = crate::db::SqlConn::connect(&app.database_url()).await;
    // Records, records of created submissions, `submission.created` events.
    const COUNTS: [&str; 3] = [
        "SELECT COUNT(*) FROM tool_calls",
        "SELECT COUNT(*) FROM tool_calls WHERE native_status = 201",
        "SELECT COUNT(*) FROM events WHERE type = 'submission.created'",
    ];
    let mut grants = Vec::new();
    for n in 0..5 {
        let id = world.active(&format!("Burst grant {n}")).await;
        grants.push((id, world.digest(id).await));
    }
    let mut form = Prepare::new(BOT, "Burst limited");
    form.max_submissions = "1".to_owned();
    let limited = world.active_with(&form).await;
    let limited_digest = world.digest(limited).await;
    let (first, first_digest) = grants[0].clone();
    let used = new_key();
    let earlier = world.submitted(first, &used, "Earlier", "e").await;

    // (grant, body, what it must get)
    let mut burst = Vec::new();
    for (id, digest) in &grants {
        for n in 0..4 {
            let body = submit_body(digest, &new_key(), &format!("Burst {id} {n}"), "");
            burst.push((*id, body, "new"));
        }
    }
    for n in 0..3 {
        let body = submit_body(&limited_digest, &new_key(), &format!("Limited {n}"), "");
        burst.push((limited, body, "limited"));
    }
    burst.push((
        first,
        submit_body(&first_digest, &used, "Earlier", "e"),
        "replay",
    ));
    burst.push((
        first,
        submit_body(&first_digest, &used, "Other", "o"),
        "conflict",
    ));
    let mut before = Vec::new();
    for q in COUNTS {
        before.push(sql.integer(q).await);
    }
    let answers = join_all(
        burst
            .iter()
            .map(|(id, body, _)| world.submit_with(*id, body.clone())),
    )
    .await;
    let mut after = Vec::new();
    for q in COUNTS {
        after.push(sql.integer(q).await);
    }

    let mut indexes = BTreeSet::new();
    let (mut created, mut limited_created) = (0, 0);
    for ((id, _, expected), resp) in burst.iter().zip(&answers) {
        match (*expected, resp.status.as_u16()) {
            ("new", _) | ("limited", 201) => {
                resp.assert_status(201);
                let submission = submission_of(resp);
                let index = submission["issue"]["index"].as_i64().unwrap();
                assert!(indexes.insert(index), "index {index} given twice");
                assert_eq!(grant_of(resp)["id"], *id);
                created += 1;
                limited_created += i32::from(*expected == "limited");
            }
            ("limited", _) => {
                resp.assert_error(409, "submission_limit");
            }
            ("replay", _) => {
                resp.assert_status(200);
                assert_eq!(submission_of(resp), earlier);
            }
            ("conflict", _) => {
                resp.assert_error(409, "request_key_conflict");
            }
            (other, _) => unreachable!("no expectation {other:?}"),
        }
    }
    assert_eq!(limited_created, 1, "one within the limit");
    for (id, _) in &grants {
        let expected = if *id == first { 5 } else { 4 };
        assert_eq!(world.grant(*id).await["submission_count"], expected);
    }
    assert_eq!(world.grant(limited).await["submission_count"], 1);
    assert_eq!(
        after[0] - before[0],
        burst.len() as i64,
        "one record a call"
    );
    assert_eq!(after[1] - before[1], created);
    assert_eq!(after[2] - before[2], created, "one event a new issue");
}
