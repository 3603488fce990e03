//! Events (docs/events.md): one row per change, written by the change's own
//! transaction ([`insert`]); the grant timeline is a view over them
//! (`grant_events`). The feed reads them in commit order ([`feed`]), and
//! [`Signal`] wakes the feed's waiters once a transaction that wrote one
//! committed.
//!
//! Commit order: on SQLite the single writer makes id order commit order.
//! On PostgreSQL ids commit out of order, so each event carries its
//! transaction's id (`xact_id`), the feed serves only events whose
//! transaction id is below the oldest transaction still running
//! (`pg_snapshot_xmin(pg_current_snapshot())`) and orders by
//! `(xact_id, id)`: any event that can still commit sorts after every event
//! served. The cursor is that pair ([`Position`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sea_query::{Alias, Cond, Expr, ExprTrait, Iden, JoinType, Order, Query, SelectStatement};
use tokio::sync::{Notify, watch};

use super::grants::{GrantFilter, repository_condition};
use super::schema::{Grants, Repositories, Users};
use super::{Backend, StoreResult, Tx};

/// `events`
#[derive(Iden, Clone, Copy)]
pub enum Events {
    Table,
    Id,
    XactId,
    Type,
    OccurredAt,
    ActorId,
    RepositoryId,
    GrantId,
    FromState,
    State,
    StateRevision,
    ProposalDigest,
    Data,
}

/// A grant as an event leaves it.
#[derive(Debug, Clone, Copy)]
pub struct GrantAt<'a> {
    pub id: i64,
    /// Its state before the change, for a change of state.
    pub from_state: Option<&'a str>,
    pub state: &'a str,
    pub state_revision: i64,
    pub proposal_digest: &'a str,
}

/// An event to write.
#[derive(Debug, Clone, Copy)]
pub struct NewEvent<'a> {
    /// The event type (`grant.approved`, …).
    pub kind: &'a str,
    /// Fixed-width UTC text.
    pub at: &'a str,
    /// Who made the change; `None` for Writ itself.
    pub actor_id: Option<i64>,
    pub repository_id: Option<i64>,
    pub grant: Option<GrantAt<'a>>,
    /// The `data` object, as JSON text.
    pub data: &'a str,
}

/// Writes an event in `tx`, with one pending delivery per enabled webhook
/// subscription matching it; the feed's waiters are woken once `tx`
/// commits.
pub async fn insert(tx: &mut Tx, e: &NewEvent<'_>) -> StoreResult<()> {
    let g = e.grant;
    let q = Query::insert()
        .into_table(Events::Table)
        .columns([
            Events::Type,
            Events::OccurredAt,
            Events::ActorId,
            Events::RepositoryId,
            Events::GrantId,
            Events::FromState,
            Events::State,
            Events::StateRevision,
            Events::ProposalDigest,
            Events::Data,
        ])
        .values_panic([
            e.kind.into(),
            e.at.into(),
            e.actor_id.into(),
            e.repository_id.into(),
            g.map(|g| g.id).into(),
            g.and_then(|g| g.from_state).into(),
            g.map(|g| g.state).into(),
            g.map(|g| g.state_revision).into(),
            g.map(|g| g.proposal_digest).into(),
            e.data.into(),
        ])
        .returning_col(Events::Id)
        .to_owned();
    let (id,): (i64,) = tx.fetch_one(&q).await?;
    let deliveries = super::webhooks::enqueue(
        Expr::val(id),
        Expr::val(e.kind),
        Expr::val(e.repository_id),
        Expr::val(e.at),
    );
    tx.execute(&deliveries).await?;
    tx.note_event();
    Ok(())
}

/// A place in the feed: after the event `(xact, id)` (`xact` is 0 on
/// SQLite). The origin is before every event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Position {
    pub xact: i64,
    pub id: i64,
}

/// One event as the feed serves it, with the names its JSON shows.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct EventRow {
    pub id: i64,
    pub xact: i64,
    #[sqlx(rename = "type")]
    #[serde(rename = "type")]
    pub kind: String,
    pub occurred_at: String,
    pub actor_login: Option<String>,
    pub actor_kind: Option<String>,
    pub repository_id: Option<i64>,
    pub repo_owner: Option<String>,
    pub repo_name: Option<String>,
    pub grant_id: Option<i64>,
    pub agent_login: Option<String>,
    pub state: Option<String>,
    pub state_revision: Option<i64>,
    pub proposal_digest: Option<String>,
    pub data: String,
}

impl EventRow {
    /// Where the feed stands after this event.
    pub fn position(&self) -> Position {
        Position {
            xact: self.xact,
            id: self.id,
        }
    }
}

/// Who reads the feed: which events it may see.
#[derive(Clone, Copy)]
pub struct Reader<'a> {
    /// Only the events of this bot's own grants.
    pub agent_id: Option<i64>,
    /// The repositories whose events it may see (read access now, the
    /// token's reducers).
    pub repositories: &'a GrantFilter<'a>,
    /// Whether it sees the events of grants and repositories at all.
    pub repository_events: bool,
    /// Whether it sees [`ADMIN_TYPES`].
    pub admin_types: bool,
}

/// What a feed request asks for.
#[derive(Clone, Copy)]
pub struct FeedQuery<'a> {
    pub after: Position,
    pub limit: u64,
    pub reader: Reader<'a>,
    /// Only these types; empty: every type.
    pub types: &'a [&'a str],
    /// Only this repository.
    pub repository_id: Option<i64>,
}

/// The event types only a `read:admin` token sees.
pub const ADMIN_TYPES: [&str; 3] = [
    "tool_grants.changed",
    "mcp_health.changed",
    "webhook.disabled",
];

/// The transaction id of an event, as a number (0 on SQLite).
fn xact(backend: Backend) -> Expr {
    match backend {
        Backend::Sqlite => Expr::val(0i64),
        Backend::Postgres => Expr::cust("(events.xact_id::text)::bigint"),
    }
}

/// The visible events after `q.after`, in commit order, at most `q.limit`.
pub async fn feed(tx: &mut Tx, q: &FeedQuery<'_>) -> StoreResult<Vec<EventRow>> {
    let statement = feed_statement(tx.backend(), q);
    tx.fetch_all(&statement).await
}

/// These events, as the feed would serve them (for webhook deliveries).
pub async fn by_ids(tx: &mut Tx, ids: &[i64]) -> StoreResult<Vec<EventRow>> {
    let q = select_events(tx.backend())
        .and_where(Expr::col((Events::Table, Events::Id)).is_in(ids.iter().copied()))
        .to_owned();
    tx.fetch_all(&q).await
}

fn feed_statement(backend: Backend, q: &FeedQuery<'_>) -> SelectStatement {
    let e = Events::Table;
    let mut s = select_events(backend);
    match backend {
        Backend::Sqlite => {
            s.and_where(Expr::col((e, Events::Id)).gt(q.after.id))
                .order_by((e, Events::Id), Order::Asc);
        }
        Backend::Postgres => {
            s.and_where(Expr::cust_with_values(
                "(events.xact_id, events.id) > ($1::text::xid8, $2)",
                [sea_query::Value::from(q.after.xact), q.after.id.into()],
            ))
            .and_where(Expr::cust(
                "events.xact_id < pg_snapshot_xmin(pg_current_snapshot())",
            ))
            .order_by((e, Events::XactId), Order::Asc)
            .order_by((e, Events::Id), Order::Asc);
        }
    }
    s.cond_where(visible(q.reader));
    if !q.types.is_empty() {
        s.and_where(Expr::col((e, Events::Type)).is_in(q.types.iter().copied()));
    }
    if let Some(repo) = q.repository_id {
        s.and_where(Expr::col((e, Events::RepositoryId)).eq(repo));
    }
    s.limit(q.limit);
    s.to_owned()
}

/// The events joined with the names their JSON shows.
fn select_events(backend: Backend) -> SelectStatement {
    let (actor, agent) = (Alias::new("actor"), Alias::new("agent"));
    let (owner, e) = (Alias::new("owner"), Events::Table);
    let mut s = Query::select();
    s.column((e, Events::Id))
        .expr_as(xact(backend), "xact")
        .columns([
            (e, Events::Type),
            (e, Events::OccurredAt),
            (e, Events::RepositoryId),
            (e, Events::GrantId),
            (e, Events::State),
            (e, Events::StateRevision),
            (e, Events::ProposalDigest),
            (e, Events::Data),
        ])
        .expr_as(Expr::col((actor.clone(), Users::Login)), "actor_login")
        .expr_as(Expr::col((actor.clone(), Users::Kind)), "actor_kind")
        .expr_as(Expr::col((owner.clone(), Users::Login)), "repo_owner")
        .expr_as(
            Expr::col((Repositories::Table, Repositories::Name)),
            "repo_name",
        )
        .expr_as(Expr::col((agent.clone(), Users::Login)), "agent_login")
        .from(e)
        .join_as(
            JoinType::LeftJoin,
            Users::Table,
            actor.clone(),
            Expr::col((actor, Users::Id)).equals((e, Events::ActorId)),
        )
        .join(
            JoinType::LeftJoin,
            Repositories::Table,
            Expr::col((Repositories::Table, Repositories::Id)).equals((e, Events::RepositoryId)),
        )
        .join_as(
            JoinType::LeftJoin,
            Users::Table,
            owner.clone(),
            Expr::col((owner, Users::Id)).equals((Repositories::Table, Repositories::OwnerId)),
        )
        .join(
            JoinType::LeftJoin,
            Grants::Table,
            Expr::col((Grants::Table, Grants::Id)).equals((e, Events::GrantId)),
        )
        .join_as(
            JoinType::LeftJoin,
            Users::Table,
            agent.clone(),
            Expr::col((agent, Users::Id)).equals((Grants::Table, Grants::AgentId)),
        );
    s
}

/// The events `reader` may see (see docs/events.md "Who sees what").
fn visible(reader: Reader<'_>) -> Cond {
    let e = Events::Table;
    let mut any = Cond::any();
    if reader.repository_events {
        let mut repository = Cond::all().add(Expr::col((e, Events::Type)).is_not_in(ADMIN_TYPES));
        if let Some(bot) = reader.agent_id {
            repository = repository.add(Expr::col((Grants::Table, Grants::AgentId)).eq(bot));
        }
        if let Some(repos) = repository_condition(reader.repositories) {
            repository = repository
                .add(Expr::col((e, Events::RepositoryId)).is_not_null())
                .add(repos);
        }
        any = any.add(repository);
    }
    if reader.admin_types {
        any = any.add(Expr::col((e, Events::Type)).is_in(ADMIN_TYPES));
    }
    if !reader.repository_events && !reader.admin_types {
        any = any.add(Expr::val(false));
    }
    any
}

/// How far the PostgreSQL feed is held back: the age in seconds of the
/// oldest transaction still running on the cluster that holds a
/// transaction id (0 when none, and on SQLite).
pub async fn feed_lag_seconds(tx: &mut Tx) -> StoreResult<f64> {
    if tx.backend() == Backend::Sqlite {
        return Ok(0.0);
    }
    let q = Query::select()
        .expr(Expr::cust(
            "COALESCE(EXTRACT(EPOCH FROM (now() - min(xact_start)))::float8, 0)",
        ))
        .from(Alias::new("pg_stat_activity"))
        .and_where(Expr::cust("backend_xid IS NOT NULL"))
        .to_owned();
    let (lag,): (f64,) = tx.fetch_one(&q).await?;
    Ok(lag.max(0.0))
}

/// The PostgreSQL channel a commit that wrote events is announced on.
pub const CHANNEL: &str = "writ_events";

/// Wakes the feed's waiters once a transaction that wrote events committed:
/// in this process at once, and on PostgreSQL in the others through a
/// coalesced `NOTIFY` sent after the commit (never inside the transaction,
/// which would serialize every commit on the cluster's notify lock).
#[derive(Debug)]
pub struct Signal {
    commits: watch::Sender<u64>,
    /// Set on PostgreSQL: asks the notifier task for one `NOTIFY`.
    announce: Option<Arc<Notify>>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Signal {
    /// A signal for SQLite (one process per database).
    pub fn local() -> Arc<Signal> {
        Arc::new(Signal {
            commits: watch::channel(0).0,
            announce: None,
            tasks: Mutex::new(Vec::new()),
        })
    }

    /// A signal for PostgreSQL: commits are also announced to the other
    /// processes, and theirs heard, over `pool`.
    pub fn postgres(pool: sqlx::PgPool) -> Arc<Signal> {
        let announce = Arc::new(Notify::new());
        let signal = Arc::new(Signal {
            commits: watch::channel(0).0,
            announce: Some(Arc::clone(&announce)),
            tasks: Mutex::new(Vec::new()),
        });
        let me = uuid::Uuid::new_v4().simple().to_string();
        let notifier = tokio::spawn(notifier(pool.clone(), announce, me.clone()));
        let listener = tokio::spawn(listener(pool, Arc::downgrade(&signal), me));
        signal.tasks().extend([notifier, listener]);
        signal
    }

    fn tasks(&self) -> std::sync::MutexGuard<'_, Vec<tokio::task::JoinHandle<()>>> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A transaction that wrote events committed.
    pub fn committed(&self) {
        self.wake();
        if let Some(announce) = &self.announce {
            announce.notify_one();
        }
    }

    fn wake(&self) {
        self.commits.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that sees every later commit (and none before).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.commits.subscribe()
    }

    /// Stops the PostgreSQL tasks.
    pub fn stop(&self) {
        for task in self.tasks().drain(..) {
            task.abort();
        }
    }
}

/// The least time between two `NOTIFY`s of one process: a stream of
/// commits is announced a few times a second, not once per commit (each
/// `NOTIFY` is a transaction that takes the cluster's notify lock).
const NOTIFY_SPACING: Duration = Duration::from_millis(50);

/// Sends one `NOTIFY` per wake-up, at most one per [`NOTIFY_SPACING`];
/// wake-ups that arrive meanwhile are folded into the next.
async fn notifier(pool: sqlx::PgPool, announce: Arc<Notify>, me: String) {
    loop {
        announce.notified().await;
        tokio::time::sleep(NOTIFY_SPACING).await;
        let sent = sqlx::query("SELECT pg_notify($1, $2)")
            .bind(CHANNEL)
            .bind(&me)
            .execute(&pool)
            .await;
        if sent.is_err() {
            // The other processes' safety poll covers a lost announcement.
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// Wakes this process's waiters when another process announces a commit.
async fn listener(pool: sqlx::PgPool, signal: std::sync::Weak<Signal>, me: String) {
    loop {
        let mut listener = match sqlx::postgres::PgListener::connect_with(&pool).await {
            Ok(l) => l,
            Err(_) => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        if listener.listen(CHANNEL).await.is_err() {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        while let Ok(note) = listener.recv().await {
            let Some(signal) = signal.upgrade() else {
                return;
            };
            if note.payload() != me {
                signal.wake();
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
