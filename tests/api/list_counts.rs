//! List totals and pages stay exact through every change of a grant: each
//! `X-Total-Count` and every page of `GET /api/v1/agent-work-grants` (per
//! token reducer and state filter) and of a repository's grant list in the
//! browser, against a brute-force model of the grants; and `grant_counts`
//! against a `GROUP BY` over `grants`.

use std::collections::BTreeMap;

use futures_util::future::join_all;
use serde_json::json;

use crate::db::SqlConn;
use crate::helpers::{Auth, Resp, TestApp, confirm_body, grant_path};
use crate::pagination::{list, page};
use crate::world::{BOT, BOT_SCOPES, OWNER, Prepare, REPO, RIVAL, World};

/// Public: every bot reads it.
const GADGETS: &str = "gadgets";
/// Private: builder-bot reads it while it is a collaborator.
const VAULT: &str = "vault";
/// Private: builder-bot never reads it.
const HIDDEN: &str = "hidden";

const STATE_QUERIES: [&str; 6] = [
    "",
    "state=awaiting_agent",
    "state=awaiting_human",
    "state=active",
    "state=revoked",
    "state=all",
];

/// What a token's resource reducer lets through.
#[derive(Clone, Copy)]
enum Reach {
    Any,
    PublicOnly,
    Repos(&'static [&'static str]),
}

#[derive(Clone, Debug)]
struct Grant {
    repo: &'static str,
    agent: &'static str,
    state: &'static str,
}

/// The grants as the test made them, and the tokens it lists with.
struct Ledger<'w, 'a> {
    world: &'w World<'a>,
    grants: BTreeMap<i64, Grant>,
    vault_readable: bool,
    tokens: Vec<(&'static str, String, Reach)>,
}

fn state_matches(query: &str, state: &str) -> bool {
    match query.strip_prefix("state=") {
        None => state != "revoked",
        Some("all") => true,
        Some(wanted) => wanted == state,
    }
}

impl<'w, 'a> Ledger<'w, 'a> {
    async fn new(world: &'w World<'a>) -> Ledger<'w, 'a> {
        let app = world.app;
        for (repo, private) in [(GADGETS, false), (VAULT, true), (HIDDEN, true)] {
            app.create_repo(OWNER, repo, private).await;
            app.set_collaborator(OWNER, repo, "alice", "admin").await;
        }
        app.set_collaborator(OWNER, VAULT, BOT, "read").await;
        let mut tokens = vec![("full", world.bot.clone(), Reach::Any)];
        for (name, extra, reach) in [
            ("public", json!({"public_only": true}), Reach::PublicOnly),
            (
                "widgets+vault",
                json!({"repositories": ["acme/widgets", "acme/vault"]}),
                Reach::Repos(&[REPO, VAULT]),
            ),
            (
                "hidden+gadgets",
                json!({"repositories": ["acme/hidden", "acme/gadgets", "acme/missing"]}),
                Reach::Repos(&[HIDDEN, GADGETS]),
            ),
        ] {
            let mut body = json!({"name": name, "scopes": BOT_SCOPES});
            body.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            let token = app.create_token_with(BOT, body).await.token;
            tokens.push((name, token, reach));
        }
        Ledger {
            world,
            grants: BTreeMap::new(),
            vault_readable: true,
            tokens,
        }
    }

    fn token_of(&self, agent: &str) -> &str {
        if agent == BOT {
            &self.world.bot
        } else {
            &self.world.rival
        }
    }

    async fn prepare(&mut self, repo: &'static str, agent: &'static str) -> i64 {
        let task = format!("Counted grant {}", self.grants.len());
        let id = self
            .world
            .alice
            .prepare_ok(OWNER, repo, &Prepare::new(agent, &task))
            .await;
        let state = "awaiting_agent";
        self.grants.insert(id, Grant { repo, agent, state });
        id
    }

    /// The grant's agent confirms it with its current digest.
    async fn confirm(&mut self, id: i64) {
        let g = self.grants[&id].clone();
        let token = self.token_of(g.agent).to_owned();
        let app = self.world.app;
        let read = app
            .get(&grant_path(OWNER, g.repo, id), Auth::Token(&token))
            .await;
        read.assert_status(200);
        let digest = read.json()["grant"]["proposal_digest"]
            .as_str()
            .unwrap()
            .to_owned();
        let path = format!("{}/confirm", grant_path(OWNER, g.repo, id));
        app.post_json(&path, Auth::Token(&token), confirm_body(&digest))
            .await
            .assert_status(200);
        self.grants.get_mut(&id).unwrap().state = "awaiting_human";
    }

    /// alice posts a grant page form; a 303 moves the model to `to`.
    async fn human(&mut self, id: i64, action: &str, extra: &[(String, String)], to: Grant) {
        let repo = self.grants[&id].repo;
        let resp = self
            .world
            .alice
            .grant_action(OWNER, repo, id, action, extra)
            .await;
        resp.assert_status(303);
        self.grants.insert(id, to);
    }

    async fn approve(&mut self, id: i64) {
        let to = Grant {
            state: "active",
            ..self.grants[&id].clone()
        };
        self.human(id, "approve", &[], to).await;
    }

    async fn withdraw(&mut self, id: i64) {
        let reason = [("reason".to_owned(), "counted out".to_owned())];
        let to = Grant {
            state: "revoked",
            ..self.grants[&id].clone()
        };
        self.human(id, "withdraw", &reason, to).await;
    }

    /// Edits the proposal for `agent`: back to awaiting_agent, maybe another bot.
    async fn edit(&mut self, id: i64, agent: &'static str) {
        let fields = Prepare::new(agent, &format!("Edited {id}")).fields();
        let to = Grant {
            agent,
            state: "awaiting_agent",
            ..self.grants[&id].clone()
        };
        self.human(id, "edit", &fields, to).await;
    }

    fn readable_by_bot(&self, repo: &str) -> bool {
        repo == REPO || repo == GADGETS || (repo == VAULT && self.vault_readable)
    }

    fn expected(&self, agent: &str, reach: Reach, query: &str) -> Vec<i64> {
        let reaches = |repo: &str| match reach {
            Reach::Any => true,
            Reach::PublicOnly => repo == GADGETS,
            Reach::Repos(list) => list.contains(&repo),
        };
        let readable = |repo: &str| {
            if agent == BOT {
                self.readable_by_bot(repo)
            } else {
                repo == REPO || repo == GADGETS
            }
        };
        self.grants
            .iter()
            .filter(|(_, g)| {
                g.agent == agent
                    && readable(g.repo)
                    && reaches(g.repo)
                    && state_matches(query, g.state)
            })
            .map(|(id, _)| *id)
            .collect()
    }

    /// Walks every page of one list query; each total and page must match.
    async fn walk(&self, label: &str, token: &str, query: &str, limit: usize, want: &[i64]) {
        let app = self.world.app;
        let pages = want.len().div_ceil(limit);
        for n in 1..=pages + 1 {
            let q = format!("{query}&limit={limit}&page={n}");
            let (ids, total) = page(&list(app, token, q.trim_start_matches('&')).await);
            let start = Ord::min((n - 1) * limit, want.len());
            let end = Ord::min(n * limit, want.len());
            assert_eq!(
                (ids.as_slice(), total),
                (&want[start..end], want.len() as u64),
                "{label}, {query:?}, limit {limit}, page {n} of {pages}"
            );
        }
    }

    /// Every list of both bots and every repository list against the model,
    /// and the counters against the grants.
    async fn check(&self, step: &str) {
        for (name, token, reach) in &self.tokens {
            for query in STATE_QUERIES {
                let want = self.expected(BOT, *reach, query);
                let label = format!("{step}: builder-bot token {name}");
                self.walk(&label, token, query, 4, &want).await;
            }
        }
        let want = self.expected(BOT, Reach::Any, "");
        self.walk(step, &self.world.bot, "", 50, &want).await;
        for query in ["", "state=all"] {
            let want = self.expected(RIVAL, Reach::Any, query);
            let label = format!("{step}: rival-bot");
            self.walk(&label, &self.world.rival, query, 3, &want).await;
        }
        for repo in [REPO, GADGETS, VAULT, HIDDEN] {
            self.check_repo_list(step, repo).await;
        }
        assert_counters_match_grants(self.world.app, step).await;
    }

    /// alice's browser list of one repository, every page, per state filter.
    async fn check_repo_list(&self, step: &str, repo: &str) {
        for filter in ["open", "all", "awaiting_human", "revoked"] {
            let query = match filter {
                "open" => String::new(),
                s => format!("state={s}"),
            };
            let want: Vec<i64> = self
                .grants
                .iter()
                .filter(|(_, g)| g.repo == repo && state_matches(&query, g.state))
                .map(|(id, _)| *id)
                .collect();
            let pages = want.len().div_ceil(30).max(1);
            for n in 1..=pages + 1 {
                let path = format!("/{OWNER}/{repo}/agent-work-grants?state={filter}&page={n}");
                let resp = self.world.alice.get_page(&path).await;
                let (ids, total) = repo_page(&resp);
                let start = Ord::min((n - 1) * 30, want.len());
                let end = Ord::min(n * 30, want.len());
                assert_eq!(
                    (ids.as_slice(), total),
                    (&want[start..end], want.len() as u64),
                    "{step}: {path}"
                );
            }
        }
    }
}

/// The grant ids and the total of a repository's grant list page.
#[track_caller]
fn repo_page(resp: &Resp) -> (Vec<i64>, u64) {
    resp.assert_status(200);
    let number_after = |rest: &str| -> u64 {
        rest.split('"')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no number in {}", resp.body))
    };
    let total = resp
        .body
        .split_once("data-total=\"")
        .map(|(_, rest)| number_after(rest))
        .unwrap_or_else(|| panic!("no total in {}", resp.body));
    let ids = resp
        .body
        .split("data-grant-id=\"")
        .skip(1)
        .map(|rest| number_after(rest) as i64)
        .collect();
    (ids, total)
}

/// `grant_counts` holds exactly the counts of a `GROUP BY` over `grants`.
async fn assert_counters_match_grants(app: &TestApp, step: &str) {
    let mut sql = SqlConn::connect(&app.database_url()).await;
    let key = "CAST(agent_id AS TEXT), CAST(repository_id AS TEXT), state";
    let order = "ORDER BY agent_id, repository_id, state";
    let counters = sql
        .text_rows(&format!(
            "SELECT {key}, CAST(n AS TEXT) FROM grant_counts WHERE n <> 0 {order}"
        ))
        .await;
    let grouped = sql
        .text_rows(&format!(
            "SELECT {key}, CAST(COUNT(*) AS TEXT) FROM grants \
             GROUP BY agent_id, repository_id, state {order}"
        ))
        .await;
    sql.close().await;
    assert_eq!(counters, grouped, "{step}: grant_counts drifted");
}

both_backends!(list_totals_follow_every_change);
async fn list_totals_follow_every_change(app: TestApp) {
    let world = World::new(&app).await;
    let mut ledger = Ledger::new(&world).await;
    // More than 30 (the browser's page) on acme/widgets.
    let repos = [REPO, REPO, GADGETS, REPO, VAULT, HIDDEN, REPO, GADGETS];
    let mut ids = Vec::new();
    for n in 0..64 {
        let agent = if n % 5 == 4 { RIVAL } else { BOT };
        ids.push((ledger.prepare(repos[n % repos.len()], agent).await, agent));
    }
    ledger.check("prepared").await;

    // The agents confirm on the repositories they read.
    let confirmable = |(id, agent): &(i64, &str), ledger: &Ledger| {
        let repo = ledger.grants[id].repo;
        (*agent == BOT && ledger.readable_by_bot(repo)) || repo == REPO || repo == GADGETS
    };
    let to_confirm: Vec<i64> = ids
        .iter()
        .enumerate()
        .filter(|(n, pair)| n % 3 != 1 && confirmable(pair, &ledger))
        .map(|(_, (id, _))| *id)
        .collect();
    for id in &to_confirm {
        ledger.confirm(*id).await;
    }
    ledger.check("confirmed").await;

    for id in to_confirm.iter().step_by(2) {
        ledger.approve(*id).await;
    }
    ledger.check("approved").await;

    // Withdrawn from each state.
    let in_state = |ledger: &Ledger, state: &str| -> Vec<i64> {
        let grants = ledger.grants.iter();
        grants
            .filter(|(_, g)| g.state == state)
            .map(|(id, _)| *id)
            .collect()
    };
    for state in ["awaiting_agent", "awaiting_human", "active"] {
        for id in in_state(&ledger, state).into_iter().step_by(3) {
            ledger.withdraw(id).await;
        }
    }
    ledger.check("withdrawn").await;

    // Edits: back to awaiting_agent, and to another bot (the counters of
    // both agents move), or to the same bot.
    let waiting = in_state(&ledger, "awaiting_human");
    for (n, id) in waiting.into_iter().enumerate() {
        let agent = if n % 2 == 0 { RIVAL } else { BOT };
        ledger.edit(id, agent).await;
    }
    // Agent-only moves (awaiting_agent stays), one way so no two cancel out.
    let bots_waiting = in_state(&ledger, "awaiting_agent")
        .into_iter()
        .filter(|id| ledger.grants[id].agent == BOT)
        .step_by(3)
        .collect::<Vec<_>>();
    for id in bots_waiting {
        ledger.edit(id, RIVAL).await;
    }
    ledger.check("edited").await;

    refused_changes_move_nothing(&mut ledger).await;
    ledger.check("refused").await;

    // builder-bot loses read access to acme/vault, then gets it back.
    app.remove_collaborator(OWNER, VAULT, BOT).await;
    ledger.vault_readable = false;
    ledger.check("vault unreadable").await;
    app.set_collaborator(OWNER, VAULT, BOT, "read").await;
    ledger.vault_readable = true;
    ledger.check("vault readable again").await;
}

/// A stale form, a wrong digest, a submission, an issue deleted and one
/// transferred: no grant changes state, so no total moves.
async fn refused_changes_move_nothing(ledger: &mut Ledger<'_, '_>) {
    let world = ledger.world;
    let id = ledger.prepare(REPO, BOT).await;
    let stale = world.alice.grant_page(OWNER, REPO, id).await;
    ledger.withdraw(id).await;
    let resp = world
        .alice
        .submit_from(
            &stale,
            OWNER,
            REPO,
            id,
            "edit",
            &Prepare::new(BOT, "x").fields(),
        )
        .await;
    resp.assert_status(409);

    let waiting = ledger.prepare(REPO, BOT).await;
    let digest = "0".repeat(64);
    world
        .confirm_with(waiting, confirm_body(&digest))
        .await
        .assert_error(409, "proposal_mismatch");

    let active = world.active("Submits twice").await;
    ledger.grants.insert(
        active,
        Grant {
            repo: REPO,
            agent: BOT,
            state: "active",
        },
    );
    for key in [crate::world::new_key(), crate::world::new_key()] {
        world.submitted(active, &key, "Counted issue", "").await;
    }
    world.delete_issue(OWNER, REPO, 1).await.assert_status(204);
    world
        .transfer_issue(OWNER, REPO, 2, "acme/gadgets")
        .await
        .assert_status(200);
}

both_backends!(list_totals_exact_under_concurrent_changes);
async fn list_totals_exact_under_concurrent_changes(app: TestApp) {
    let world = World::new(&app).await;
    let replica = app.spawn_replica().await;
    let mut awaiting_agent = Vec::new();
    let mut awaiting_human = Vec::new();
    let mut active = Vec::new();
    for n in 0..12 {
        awaiting_agent.push(world.prepare(&format!("Raced {n}")).await);
        awaiting_human.push(world.confirmed(&format!("Raced back {n}")).await);
    }
    for n in 0..6 {
        active.push(world.active(&format!("Raced active {n}")).await);
    }
    // Every page the human forms post from, loaded before the race.
    let mut pages = Vec::new();
    for id in awaiting_human.iter().chain(&active) {
        pages.push((*id, world.alice.grant_page(OWNER, REPO, *id).await));
    }
    let mut digests = Vec::new();
    for id in &awaiting_agent {
        digests.push((*id, world.digest(*id).await));
    }

    // Confirms through both servers (awaiting_agent -> awaiting_human), while
    // alice moves grants back (edit: awaiting_human -> awaiting_agent) and
    // withdraws active ones: the counter rows are taken in opposite
    // directions at once.
    let servers = [app.base.clone(), replica.base.clone()];
    let confirms = digests.iter().enumerate().map(|(n, (id, digest))| {
        let url = format!("{}{}/confirm", servers[n % 2], grant_path(OWNER, REPO, id));
        let request = app
            .client
            .post(url)
            .header("Authorization", format!("token {}", world.bot))
            .json(&confirm_body(digest));
        async move { Resp::read(request.send().await.expect("send")).await }
    });
    let forms = pages.iter().map(|(id, page)| {
        let (action, extra) = if active.contains(id) {
            let reason = vec![("reason".to_owned(), "raced".to_owned())];
            ("withdraw", reason)
        } else {
            (
                "edit",
                Prepare::new(BOT, &format!("Raced edit {id}")).fields(),
            )
        };
        let alice = &world.alice;
        async move {
            alice
                .submit_from(page, OWNER, REPO, *id, action, &extra)
                .await
        }
    });
    let (confirmed, posted) = futures_util::join!(join_all(confirms), join_all(forms));
    for resp in &confirmed {
        resp.assert_status(200);
    }
    for resp in &posted {
        resp.assert_status(303);
    }

    assert_counters_match_grants(&app, "after the race").await;
    let (ids, total) = page(&list(&app, &world.bot, "state=all&limit=50").await);
    assert_eq!((ids.len(), total), (30, 30));
    let counts = [
        ("awaiting_agent", 12),
        ("awaiting_human", 12),
        ("active", 0),
        ("revoked", 6),
    ];
    for (state, want) in counts {
        let (ids, total) = page(&list(&app, &world.bot, &format!("state={state}&limit=50")).await);
        assert_eq!((ids.len(), total), (want, want as u64), "{state}");
    }
}
