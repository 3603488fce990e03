//! Events (docs/events.md): every change writes its event in its own
//! transaction ([`on_grant`], [`emit`]); the feed serves them in commit
//! order to whoever may see them, and holds a request until one commits
//! ([`feed`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::auth::Caller;
use super::{Ctx, Error, Result, access};
use crate::domain::events::{Cursor, SCHEMA_VERSION};
use crate::domain::scope::Scope;
use crate::store::Tx;
use crate::store::events::{
    self as store, EventRow, FeedQuery, GrantAt, NewEvent, Position, Reader,
};
use crate::store::grants::{GrantFilter, GrantRow};
use crate::store::repos;

/// Writes the event of a change to a grant of `repository_id` (the grant
/// as the change left it is `after`) in the change's transaction.
pub async fn on_grant(
    tx: &mut Tx,
    kind: &str,
    actor_id: i64,
    repository_id: i64,
    after: GrantAt<'_>,
    data: Value,
    at: &str,
) -> Result<()> {
    emit(
        tx,
        kind,
        at,
        Some(actor_id),
        Some(repository_id),
        Some(after),
        data,
    )
    .await
}

/// The state a grant is left in by a change that does not move it.
pub fn unchanged(grant: &GrantRow) -> GrantAt<'_> {
    GrantAt {
        id: grant.id,
        from_state: None,
        state: &grant.state,
        state_revision: grant.state_revision,
        proposal_digest: &grant.proposal_digest,
    }
}

/// Writes an event in the change's transaction.
pub async fn emit(
    tx: &mut Tx,
    kind: &str,
    at: &str,
    actor_id: Option<i64>,
    repository_id: Option<i64>,
    grant: Option<GrantAt<'_>>,
    data: Value,
) -> Result<()> {
    let data = data.to_string();
    let event = NewEvent {
        kind,
        at,
        actor_id,
        repository_id,
        grant,
        data: &data,
    };
    Ok(store::insert(tx, &event).await?)
}

/// One event, as the feed and the webhooks show it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EventView {
    /// Always 1: adding a type or a field is compatible, removing or
    /// renaming is not.
    pub schema_version: u32,
    /// Unique and stable.
    pub id: i64,
    /// `grant.approved`, … (docs/events.md).
    #[serde(rename = "type")]
    pub kind: String,
    /// When the change committed its transaction's work (UTC).
    pub occurred_at: String,
    /// Who made the change; `null` for Writ itself.
    pub actor: Option<ActorRef>,
    /// The repository, for an event about one.
    pub repository: Option<RepositoryRef>,
    /// The grant as the change left it, for an event about one.
    pub grant: Option<EventGrant>,
    /// The type's own fields.
    #[schema(value_type = Object)]
    pub data: Value,
    /// Where the feed stands after this event.
    #[serde(skip)]
    pub cursor: Cursor,
}

/// `{"login", "kind"}`
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ActorRef {
    pub login: String,
    /// `human` or `bot`.
    pub kind: String,
}

/// `{"id", "full_name"}`
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RepositoryRef {
    pub id: i64,
    pub full_name: String,
}

/// The grant of an event, as the change left it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EventGrant {
    pub id: i64,
    /// The bot's login.
    pub agent: String,
    pub state: String,
    pub state_revision: i64,
    pub proposal_digest: String,
}

impl EventView {
    /// The view of a row the feed (or a delivery) read.
    pub fn from_row(row: EventRow) -> EventView {
        let repository = match (row.repository_id, &row.repo_owner, &row.repo_name) {
            (Some(id), Some(owner), Some(name)) => Some(RepositoryRef {
                id,
                full_name: format!("{owner}/{name}"),
            }),
            _ => None,
        };
        let grant = match (row.grant_id, row.agent_login, row.state, row.state_revision) {
            (Some(id), Some(agent), Some(state), Some(state_revision)) => Some(EventGrant {
                id,
                agent,
                state,
                state_revision,
                proposal_digest: row.proposal_digest.unwrap_or_default(),
            }),
            _ => None,
        };
        EventView {
            cursor: Cursor {
                xact: row.xact,
                id: row.id,
            },
            schema_version: SCHEMA_VERSION,
            id: row.id,
            kind: row.kind,
            occurred_at: row.occurred_at,
            actor: row
                .actor_login
                .zip(row.actor_kind)
                .map(|(login, kind)| ActorRef { login, kind }),
            repository,
            grant,
            data: serde_json::from_str(&row.data).unwrap_or(Value::Object(Default::default())),
        }
    }
}

/// What a feed request asks for (parsed and bounded by the caller).
#[derive(Debug, Clone)]
pub struct FeedParams {
    pub after: Cursor,
    /// 1–100.
    pub limit: u64,
    /// 0–60 s.
    pub wait: Duration,
    /// Only these types; empty: all.
    pub types: Vec<&'static str>,
    /// Only this repository (`owner`, `name`).
    pub repo: Option<(String, String)>,
}

/// One answer of the feed.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FeedPage {
    pub events: Vec<EventView>,
    /// The cursor to pass as `after` next.
    pub next_after: String,
}

/// The longest a waiting request goes without looking again, in case a
/// wake-up was lost (another process's `NOTIFY`, or a transaction that
/// held the PostgreSQL feed back and wrote no event of its own).
pub(super) const SAFETY_POLL: Duration = Duration::from_secs(2);

/// The events visible to `caller` after `params.after`; with `wait` and
/// none yet, held (without a database connection) until one commits or the
/// time ends.
pub async fn feed(ctx: &Ctx, caller: &Caller, params: &FeedParams) -> Result<FeedPage> {
    // A site administrator's token with `read:admin` sees every event; any
    // other token needs `read:repository`, and sees no administrative type.
    let admin_types = caller.is_admin && caller.scopes.grants(Scope::ReadAdmin);
    let repository_events = admin_types || caller.scopes.grants(Scope::ReadRepository);
    if !repository_events {
        return Err(Error::InsufficientScope(Scope::ReadRepository.as_str()));
    }
    let mut tx = ctx.store.single().await?;
    let repository_id = match &params.repo {
        Some((owner, name)) if caller.is_admin => {
            repos::repo_by_name(&mut tx, owner, name)
                .await?
                .ok_or(Error::NotFound)?
                .id
        }
        Some((owner, name)) => {
            access::readable_repo(&mut tx, owner, name, caller.user_id)
                .await?
                .0
                .id
        }
        None => 0,
    };
    let limited_ids = match &caller.reducer.repositories {
        Some(names) => Some(super::agent::resolve_repo_ids(&mut tx, names).await?),
        None => None,
    };
    drop(tx);
    let filter = GrantFilter {
        agent_id: None,
        issuer_id: None,
        repository_id: None,
        readable_by: (!caller.is_admin).then_some(caller.user_id),
        public_only: caller.reducer.public_only,
        repository_ids: limited_ids.as_deref(),
        states: &[],
    };
    let query = FeedQuery {
        after: Position {
            xact: params.after.xact,
            id: params.after.id,
        },
        limit: params.limit,
        reader: Reader {
            agent_id: caller.is_bot.then_some(caller.user_id),
            repositories: &filter,
            repository_events,
            admin_types,
        },
        types: &params.types,
        repository_id: params.repo.as_ref().map(|_| repository_id),
    };
    let deadline = tokio::time::Instant::now() + params.wait;
    let mut commits = ctx.store.events().subscribe();
    let mut waiting = None;
    loop {
        let rows = {
            let mut tx = ctx.store.single().await?;
            store::feed(&mut tx, &query).await?
        };
        let now = tokio::time::Instant::now();
        if !rows.is_empty() || now >= deadline || ctx.waiters.is_closing() {
            let events: Vec<EventView> = rows.into_iter().map(EventView::from_row).collect();
            let next = events.last().map_or(params.after, |e| e.cursor);
            return Ok(FeedPage {
                events,
                next_after: next.encode(),
            });
        }
        if waiting.is_none() {
            waiting = Some(ctx.waiters.enter(caller.token_id)?);
        }
        let nap = (deadline - now).min(SAFETY_POLL);
        ctx.waiters.nap(&mut commits, nap).await;
    }
}

/// Sets `writ_events_feed_lag_seconds`: how long the oldest transaction
/// still running on the PostgreSQL cluster has held the feed back (0 when
/// none, and on SQLite). Called when `/metrics` is read; a database that
/// cannot answer leaves the last value.
pub async fn export_feed_lag(ctx: &Ctx) {
    let lag = async {
        let mut tx = ctx.store.single().await?;
        store::feed_lag_seconds(&mut tx).await
    };
    if let Ok(seconds) = lag.await {
        metrics::gauge!("writ_events_feed_lag_seconds").set(seconds);
    }
}

/// The requests waiting for events: at most [`Waiters::PER_TOKEN`] per
/// token and `total` in all; a request over either cap is refused (429).
/// When the server shuts down ([`Waiters::close`]) every wait ends at once
/// and event streams end, so a graceful shutdown is not held up by them.
#[derive(Debug)]
pub struct Waiters {
    total: usize,
    by_token: Mutex<HashMap<i64, usize>>,
    closing: tokio::sync::watch::Sender<bool>,
}

/// One waiting request, counted until dropped.
#[derive(Debug)]
pub struct Waiting<'a> {
    waiters: &'a Waiters,
    token_id: i64,
}

impl Waiters {
    /// Waiting requests one token may hold at a time.
    pub const PER_TOKEN: usize = 8;

    /// At most `total` waiting requests.
    pub fn new(total: usize) -> Waiters {
        Waiters {
            total,
            by_token: Mutex::new(HashMap::new()),
            closing: tokio::sync::watch::channel(false).0,
        }
    }

    /// Ends every wait, now and from now on (the server is shutting down).
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    /// Whether the server is shutting down.
    pub fn is_closing(&self) -> bool {
        *self.closing.borrow()
    }

    /// Waits until the server shuts down.
    pub async fn closed(&self) {
        let mut closing = self.closing.subscribe();
        let _ = closing.wait_for(|c| *c).await;
    }

    /// Waits for a commit that wrote events, at most `nap`, and not past a
    /// shutdown.
    pub async fn nap(&self, commits: &mut tokio::sync::watch::Receiver<u64>, nap: Duration) {
        tokio::select! {
            _ = tokio::time::timeout(nap, commits.changed()) => {}
            () = self.closed() => {}
        }
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, HashMap<i64, usize>> {
        self.by_token.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many requests wait now.
    pub fn count(&self) -> usize {
        self.counts().values().sum()
    }

    /// Counts one more waiting request of `token_id`, or refuses it.
    pub fn enter(&self, token_id: i64) -> Result<Waiting<'_>> {
        let mut counts = self.counts();
        let all: usize = counts.values().sum();
        let mine = counts.entry(token_id).or_insert(0);
        if *mine >= Self::PER_TOKEN || all >= self.total {
            return Err(Error::TooManyWaiters);
        }
        *mine += 1;
        metrics::gauge!("writ_events_waiters").set((all + 1) as f64);
        Ok(Waiting {
            waiters: self,
            token_id,
        })
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut counts = self.waiters.counts();
        if let Some(n) = counts.get_mut(&self.token_id) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.token_id);
            }
        }
        let all: usize = counts.values().sum();
        metrics::gauge!("writ_events_waiters").set(all as f64);
    }
}
