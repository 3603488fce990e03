//! Webhook subscriptions and their delivery outbox (docs/events.md
//! "Webhooks"). A delivery row is written by the event's own transaction
//! ([`enqueue`]); workers lease due rows ([`claim_due`]) and record each
//! attempt on the row ([`record_attempt`]).

use sea_query::{
    Cond, Expr, ExprTrait, Iden, InsertStatement, LockBehavior, LockType, Order, Query,
    SelectStatement,
};

use super::events::Events;
use super::schema::{Repositories, Users};
use super::{Backend, StoreResult, Tx};

/// `webhook_subscriptions`
#[derive(Iden, Clone, Copy)]
pub enum WebhookSubscriptions {
    Table,
    Id,
    Url,
    Types,
    Repos,
    Format,
    Description,
    Enabled,
    Secret,
    PreviousSecret,
    PreviousUntil,
    ConsecutiveFailures,
    DisabledAt,
    CreatedAt,
    UpdatedAt,
    DeletedAt,
}

/// `webhook_subscription_types`
#[derive(Iden, Clone, Copy)]
pub enum WebhookSubscriptionTypes {
    Table,
    SubscriptionId,
    Type,
}

/// `webhook_subscription_repos`
#[derive(Iden, Clone, Copy)]
pub enum WebhookSubscriptionRepos {
    Table,
    SubscriptionId,
    Owner,
    Name,
}

/// `webhook_deliveries`
#[derive(Iden, Clone, Copy)]
pub enum WebhookDeliveries {
    Table,
    Id,
    SubscriptionId,
    EventId,
    Status,
    Attempts,
    NextAttemptAt,
    LeaseUntil,
    LastAttemptAt,
    LastStatusCode,
    LastError,
    DeliveredAt,
    CreatedAt,
}

/// A subscription as stored.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct SubscriptionRow {
    pub id: i64,
    pub url: String,
    /// The type patterns as given, as a JSON array.
    pub types: String,
    /// The repository patterns as given, as a JSON array.
    pub repos: String,
    pub format: String,
    pub description: String,
    #[serde(deserialize_with = "super::sqlite::boolean")]
    pub enabled: bool,
    pub secret: String,
    pub previous_secret: Option<String>,
    pub previous_until: Option<String>,
    pub consecutive_failures: i64,
    pub disabled_at: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// What a subscription is made of.
#[derive(Debug, Clone, Copy)]
pub struct SubscriptionFields<'a> {
    pub url: &'a str,
    pub types_json: &'a str,
    pub repos_json: &'a str,
    /// The exact types its patterns name (empty: all).
    pub types: &'a [&'a str],
    /// `(owner, name)` lowercased, `None` name for `owner/*` (empty: all).
    pub repos: &'a [(String, Option<String>)],
    pub format: &'a str,
    pub description: &'a str,
    pub enabled: bool,
}

fn select_subscription() -> SelectStatement {
    use WebhookSubscriptions as S;
    Query::select()
        .columns([
            S::Id,
            S::Url,
            S::Types,
            S::Repos,
            S::Format,
            S::Description,
            S::Enabled,
            S::Secret,
            S::PreviousSecret,
            S::PreviousUntil,
            S::ConsecutiveFailures,
            S::DisabledAt,
            S::CreatedAt,
            S::UpdatedAt,
        ])
        .from(S::Table)
        .and_where(Expr::col(S::DeletedAt).is_null())
        .to_owned()
}

/// Every subscription not deleted, by id.
pub async fn subscriptions(tx: &mut Tx) -> StoreResult<Vec<SubscriptionRow>> {
    let q = select_subscription()
        .order_by(WebhookSubscriptions::Id, Order::Asc)
        .to_owned();
    tx.fetch_all(&q).await
}

/// One subscription not deleted.
pub async fn subscription(tx: &mut Tx, id: i64) -> StoreResult<Option<SubscriptionRow>> {
    let q = select_subscription()
        .and_where(Expr::col(WebhookSubscriptions::Id).eq(id))
        .to_owned();
    tx.fetch_optional(&q).await
}

/// Creates a subscription with its secret; returns its id.
pub async fn insert_subscription(
    tx: &mut Tx,
    f: &SubscriptionFields<'_>,
    secret: &str,
    at: &str,
) -> StoreResult<i64> {
    use WebhookSubscriptions as S;
    let q = Query::insert()
        .into_table(S::Table)
        .columns([
            S::Url,
            S::Types,
            S::Repos,
            S::Format,
            S::Description,
            S::Enabled,
            S::Secret,
            S::CreatedAt,
            S::UpdatedAt,
        ])
        .values_panic([
            f.url.into(),
            f.types_json.into(),
            f.repos_json.into(),
            f.format.into(),
            f.description.into(),
            f.enabled.into(),
            secret.into(),
            at.into(),
            at.into(),
        ])
        .returning_col(S::Id)
        .to_owned();
    let (id,): (i64,) = tx.fetch_one(&q).await?;
    replace_patterns(tx, id, f).await?;
    Ok(id)
}

/// Replaces a subscription's fields (its secret and counters stay); a
/// subscription enabled again starts counting failures afresh.
pub async fn update_subscription(
    tx: &mut Tx,
    id: i64,
    f: &SubscriptionFields<'_>,
    at: &str,
) -> StoreResult<u64> {
    use WebhookSubscriptions as S;
    let mut q = Query::update();
    q.table(S::Table)
        .value(S::Url, f.url)
        .value(S::Types, f.types_json)
        .value(S::Repos, f.repos_json)
        .value(S::Format, f.format)
        .value(S::Description, f.description)
        .value(S::Enabled, f.enabled)
        .value(S::UpdatedAt, at)
        .and_where(Expr::col(S::Id).eq(id))
        .and_where(Expr::col(S::DeletedAt).is_null());
    if f.enabled {
        q.value(S::ConsecutiveFailures, 0)
            .value(S::DisabledAt, Option::<String>::None);
    }
    let changed = tx.execute(&q.to_owned()).await?;
    if changed == 1 {
        replace_patterns(tx, id, f).await?;
    }
    Ok(changed)
}

async fn replace_patterns(tx: &mut Tx, id: i64, f: &SubscriptionFields<'_>) -> StoreResult<()> {
    use WebhookSubscriptionRepos as R;
    use WebhookSubscriptionTypes as T;
    for q in [
        Query::delete()
            .from_table(T::Table)
            .and_where(Expr::col(T::SubscriptionId).eq(id))
            .to_owned(),
        Query::delete()
            .from_table(R::Table)
            .and_where(Expr::col(R::SubscriptionId).eq(id))
            .to_owned(),
    ] {
        tx.execute(&q).await?;
    }
    if !f.types.is_empty() {
        let mut q = Query::insert();
        q.into_table(T::Table).columns([T::SubscriptionId, T::Type]);
        for t in f.types {
            q.values_panic([id.into(), (*t).into()]);
        }
        tx.execute(&q).await?;
    }
    if !f.repos.is_empty() {
        let mut q = Query::insert();
        q.into_table(R::Table)
            .columns([R::SubscriptionId, R::Owner, R::Name]);
        for (owner, name) in f.repos {
            q.values_panic([id.into(), owner.as_str().into(), name.clone().into()]);
        }
        tx.execute(&q).await?;
    }
    Ok(())
}

/// Deletes a subscription: it stops matching, its deliveries stay on
/// record, and those still pending are failed.
pub async fn delete_subscription(tx: &mut Tx, id: i64, at: &str) -> StoreResult<u64> {
    use WebhookSubscriptions as S;
    let q = Query::update()
        .table(S::Table)
        .value(S::DeletedAt, at)
        .value(S::Enabled, false)
        .value(S::UpdatedAt, at)
        .and_where(Expr::col(S::Id).eq(id))
        .and_where(Expr::col(S::DeletedAt).is_null())
        .to_owned();
    let changed = tx.execute(&q).await?;
    let d = WebhookDeliveries::Table;
    let q = Query::update()
        .table(d)
        .value(WebhookDeliveries::Status, "failed")
        .value(WebhookDeliveries::LastError, "subscription deleted")
        .value(WebhookDeliveries::LeaseUntil, Option::<String>::None)
        .and_where(Expr::col(WebhookDeliveries::SubscriptionId).eq(id))
        .and_where(Expr::col(WebhookDeliveries::Status).eq("pending"))
        .to_owned();
    tx.execute(&q).await?;
    Ok(changed)
}

/// A new secret; the one it replaces signs too until `previous_until`.
pub async fn rotate_secret(
    tx: &mut Tx,
    id: i64,
    secret: &str,
    previous: &str,
    previous_until: &str,
    at: &str,
) -> StoreResult<u64> {
    use WebhookSubscriptions as S;
    let q = Query::update()
        .table(S::Table)
        .value(S::Secret, secret)
        .value(S::PreviousSecret, previous)
        .value(S::PreviousUntil, previous_until)
        .value(S::UpdatedAt, at)
        .and_where(Expr::col(S::Id).eq(id))
        .and_where(Expr::col(S::DeletedAt).is_null())
        .to_owned();
    tx.execute(&q).await
}

/// The insert of one pending delivery per enabled subscription matching
/// the event (`event` its id, `kind` its type, `repository` its repository
/// id or NULL), due at `now`. A subscription with type rows matches only
/// those types; one with repository rows matches only events of a
/// repository it names (`owner/*` or `owner/name`).
pub fn enqueue(event: Expr, kind: Expr, repository: Expr, now: Expr) -> InsertStatement {
    use WebhookSubscriptionRepos as R;
    use WebhookSubscriptionTypes as T;
    use WebhookSubscriptions as S;
    let subscription = Expr::col((S::Table, S::Id));
    let types = |also: Option<Expr>| {
        let mut q = Query::select();
        q.expr(Expr::val(1))
            .from(T::Table)
            .and_where(Expr::col((T::Table, T::SubscriptionId)).eq(subscription.clone()));
        if let Some(also) = also {
            q.and_where(also);
        }
        q.to_owned()
    };
    let repos = |also: bool| {
        let mut q = Query::select();
        q.expr(Expr::val(1))
            .from(R::Table)
            .and_where(Expr::col((R::Table, R::SubscriptionId)).eq(subscription.clone()));
        if also {
            let owner = Query::select()
                .column((Users::Table, Users::LowerLogin))
                .from(Repositories::Table)
                .inner_join(
                    Users::Table,
                    Expr::col((Users::Table, Users::Id))
                        .equals((Repositories::Table, Repositories::OwnerId)),
                )
                .and_where(
                    Expr::col((Repositories::Table, Repositories::Id)).eq(repository.clone()),
                )
                .to_owned();
            let name = Query::select()
                .column((Repositories::Table, Repositories::LowerName))
                .from(Repositories::Table)
                .and_where(
                    Expr::col((Repositories::Table, Repositories::Id)).eq(repository.clone()),
                )
                .to_owned();
            q.and_where(
                Expr::col((R::Table, R::Owner)).eq(Expr::SubQuery(None, Box::new(owner.into()))),
            )
            .cond_where(
                Cond::any()
                    .add(Expr::col((R::Table, R::Name)).is_null())
                    .add(
                        Expr::col((R::Table, R::Name))
                            .eq(Expr::SubQuery(None, Box::new(name.into()))),
                    ),
            );
        }
        q.to_owned()
    };
    let select = Query::select()
        .expr(subscription.clone())
        .expr(event)
        .expr(Expr::val("pending"))
        .expr(Expr::val(0))
        .expr(now.clone())
        .expr(now)
        .from(S::Table)
        .and_where(Expr::col((S::Table, S::Enabled)).eq(true))
        .cond_where(
            Cond::any()
                .add(Expr::exists(types(None)).not())
                .add(Expr::exists(types(Some(
                    Expr::col((T::Table, T::Type)).eq(kind),
                )))),
        )
        .cond_where(
            Cond::any()
                .add(Expr::exists(repos(false)).not())
                .add(Expr::exists(repos(true))),
        )
        .to_owned();
    use WebhookDeliveries as D;
    Query::insert()
        .into_table(D::Table)
        .columns([
            D::SubscriptionId,
            D::EventId,
            D::Status,
            D::Attempts,
            D::NextAttemptAt,
            D::CreatedAt,
        ])
        .select_from(select)
        .expect("six columns, six values")
        .to_owned()
}

/// A leased delivery, with what its attempt needs.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct DueDelivery {
    pub id: i64,
    pub event_id: i64,
    pub attempts: i64,
    pub created_at: String,
    pub subscription_id: i64,
    pub url: String,
    pub format: String,
    pub secret: String,
    pub previous_secret: Option<String>,
    pub previous_until: Option<String>,
}

/// `status = 'pending'` with the status written in the SQL: the due index
/// covers only pending rows, and neither engine uses a partial index for a
/// condition on a bound value (PostgreSQL's generic plan cannot prove the
/// index's predicate from `status = $1`; SQLite matches the predicate's
/// text), so with a bound status every claim and every backlog count read
/// the whole table, delivered rows included.
fn pending() -> Expr {
    Expr::col((WebhookDeliveries::Table, WebhookDeliveries::Status)).eq(Expr::cust("'pending'"))
}

/// The planner settings of a claim's transaction on PostgreSQL, set by one
/// `SELECT` before its pick.
///
/// The outbox and the events grow all day, and without autovacuum their
/// statistics stay those of their first hours: a generic plan of an
/// `id IN (…)` made while a table was small scans it whole ever after. A
/// claim's few statements (this transaction's, the events' read included)
/// are worth planning at each run: custom plans see the tables' current
/// sizes.
///
/// The pick ([`due_pick`]) must read the due index in order and stop at
/// its limit, whatever the backlog. With statistics of an emptier outbox
/// the planner took a bitmap scan of every due entry (dead ones too), a
/// hash join and a sort instead: 19.8 ms a pick at 15k pending against
/// 0.1 ms, so a worker that fell behind fell further behind (ADR 0032 in
/// docs/adr/). No bitmap scan and no sort in this transaction leave it the
/// ordered scan; its other statements read by primary key.
pub fn claim_planning() -> SelectStatement {
    Query::select()
        .expr(Expr::cust(
            "set_config('plan_cache_mode', 'force_custom_plan', true)",
        ))
        .expr(Expr::cust("set_config('enable_bitmapscan', 'off', true)"))
        .expr(Expr::cust("set_config('enable_sort', 'off', true)"))
        .to_owned()
}

/// The ids of up to `limit` due deliveries, oldest due first (see
/// [`claim_due`]); on PostgreSQL locked, skipping rows another transaction
/// has locked.
pub fn due_pick(backend: Backend, now: &str, limit: u64) -> SelectStatement {
    use WebhookDeliveries as D;
    use WebhookSubscriptions as S;
    // A correlated `EXISTS`, not `subscription_id IN (…)`: SQLite would
    // read the `IN` through the subscription index and sort the backlog.
    let enabled = Query::select()
        .expr(Expr::val(1))
        .from(S::Table)
        .and_where(Expr::col((S::Table, S::Id)).equals((D::Table, D::SubscriptionId)))
        .and_where(Expr::col((S::Table, S::Enabled)).eq(true))
        .to_owned();
    let mut due = Query::select();
    due.column((D::Table, D::Id))
        .from(D::Table)
        .and_where(pending())
        .and_where(Expr::col(D::NextAttemptAt).lte(now))
        .cond_where(
            Cond::any()
                .add(Expr::col(D::LeaseUntil).is_null())
                .add(Expr::col(D::LeaseUntil).lte(now)),
        )
        .and_where(Expr::exists(enabled))
        .order_by((D::Table, D::NextAttemptAt), Order::Asc)
        .order_by((D::Table, D::Id), Order::Asc)
        .limit(limit);
    if backend == Backend::Postgres {
        due.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
    }
    due.to_owned()
}

/// Leases up to `limit` due deliveries until `lease_until`: pending, due by
/// `now`, of an enabled subscription (a disabled one's wait until it is
/// enabled again), and not leased by a live lease. On PostgreSQL rows another
/// process is leasing are skipped (`FOR UPDATE SKIP LOCKED`), so one
/// delivery is attempted by one process at a time.
pub async fn claim_due(
    tx: &mut Tx,
    now: &str,
    lease_until: &str,
    limit: u64,
) -> StoreResult<Vec<DueDelivery>> {
    use WebhookDeliveries as D;
    if tx.backend() == Backend::Postgres {
        tx.fetch_one::<(String, String, String)>(&claim_planning())
            .await?;
    }
    let due = due_pick(tx.backend(), now, limit);
    let ids: Vec<i64> = tx
        .fetch_all::<(i64,)>(&due)
        .await?
        .into_iter()
        .map(|(id,)| id)
        .collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let q = Query::update()
        .table(D::Table)
        .value(D::LeaseUntil, lease_until)
        .and_where(Expr::col(D::Id).is_in(ids.clone()))
        .to_owned();
    tx.execute(&q).await?;
    let s = WebhookSubscriptions::Table;
    let q = Query::select()
        .columns([
            (D::Table, D::Id),
            (D::Table, D::EventId),
            (D::Table, D::Attempts),
            (D::Table, D::CreatedAt),
            (D::Table, D::SubscriptionId),
        ])
        .columns([
            (s, WebhookSubscriptions::Url),
            (s, WebhookSubscriptions::Format),
            (s, WebhookSubscriptions::Secret),
            (s, WebhookSubscriptions::PreviousSecret),
            (s, WebhookSubscriptions::PreviousUntil),
        ])
        .from(D::Table)
        .inner_join(
            s,
            Expr::col((s, WebhookSubscriptions::Id)).equals((D::Table, D::SubscriptionId)),
        )
        .and_where(Expr::col((D::Table, D::Id)).is_in(ids))
        .order_by((D::Table, D::Id), Order::Asc)
        .to_owned();
    tx.fetch_all(&q).await
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy)]
pub enum Attempt<'a> {
    /// A 2xx.
    Delivered { status: i64 },
    /// Failed; tried again at `next` (`None`: given up, `failed`).
    Failed {
        status: Option<i64>,
        error: &'a str,
        next: Option<&'a str>,
    },
}

/// Records an attempt of delivery `id` made at `at` and ends its lease.
/// Returns the subscription's consecutive failed deliveries after it.
pub async fn record_attempt(
    tx: &mut Tx,
    id: i64,
    subscription_id: i64,
    attempt: Attempt<'_>,
    at: &str,
) -> StoreResult<i64> {
    use WebhookDeliveries as D;
    use WebhookSubscriptions as S;
    let mut q = Query::update();
    q.table(D::Table)
        .value(D::Attempts, Expr::col(D::Attempts).add(1))
        .value(D::LastAttemptAt, at)
        .value(D::LeaseUntil, Option::<String>::None)
        .and_where(Expr::col(D::Id).eq(id))
        .and_where(Expr::col(D::Status).eq("pending"));
    let failures = match attempt {
        Attempt::Delivered { status } => {
            q.value(D::Status, "delivered")
                .value(D::LastStatusCode, status)
                .value(D::LastError, Option::<String>::None)
                .value(D::DeliveredAt, at);
            Some(Expr::val(0i64))
        }
        Attempt::Failed {
            status,
            error,
            next,
        } => {
            q.value(D::LastStatusCode, status)
                .value(D::LastError, error);
            match next {
                Some(next) => {
                    q.value(D::NextAttemptAt, next);
                    None
                }
                None => {
                    q.value(D::Status, "failed");
                    Some(Expr::col(S::ConsecutiveFailures).add(1))
                }
            }
        }
    };
    if tx.execute(&q.to_owned()).await? != 1 {
        return Ok(0);
    }
    let Some(failures) = failures else {
        return Ok(0);
    };
    let reset = matches!(attempt, Attempt::Delivered { .. });
    let mut q = Query::update();
    q.table(S::Table)
        .value(S::ConsecutiveFailures, failures)
        .and_where(Expr::col(S::Id).eq(subscription_id))
        .returning_col(S::ConsecutiveFailures);
    if reset {
        // Most deliveries succeed after a success: no row to rewrite.
        q.and_where(Expr::col(S::ConsecutiveFailures).ne(0));
    }
    let q = q.to_owned();
    Ok(tx.fetch_optional::<(i64,)>(&q).await?.map_or(0, |(n,)| n))
}

/// Disables a subscription after repeated failed deliveries; false when it
/// was disabled already.
pub async fn disable(tx: &mut Tx, id: i64, at: &str) -> StoreResult<bool> {
    use WebhookSubscriptions as S;
    let q = Query::update()
        .table(S::Table)
        .value(S::Enabled, false)
        .value(S::DisabledAt, at)
        .value(S::UpdatedAt, at)
        .and_where(Expr::col(S::Id).eq(id))
        .and_where(Expr::col(S::Enabled).eq(true))
        .to_owned();
    Ok(tx.execute(&q).await? == 1)
}

/// A delivery as its subscription's list and the report show it.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct DeliveryRow {
    pub id: i64,
    pub subscription_id: i64,
    pub event_id: i64,
    pub event_type: String,
    pub status: String,
    pub attempts: i64,
    pub next_attempt_at: String,
    pub last_attempt_at: Option<String>,
    pub last_status_code: Option<i64>,
    pub last_error: Option<String>,
    pub delivered_at: Option<String>,
    pub created_at: String,
}

fn select_delivery() -> SelectStatement {
    use WebhookDeliveries as D;
    Query::select()
        .columns([
            (D::Table, D::Id),
            (D::Table, D::SubscriptionId),
            (D::Table, D::EventId),
            (D::Table, D::Status),
            (D::Table, D::Attempts),
            (D::Table, D::NextAttemptAt),
            (D::Table, D::LastAttemptAt),
            (D::Table, D::LastStatusCode),
            (D::Table, D::LastError),
            (D::Table, D::DeliveredAt),
            (D::Table, D::CreatedAt),
        ])
        .expr_as(Expr::col((Events::Table, Events::Type)), "event_type")
        .from(D::Table)
        .inner_join(
            Events::Table,
            Expr::col((Events::Table, Events::Id)).equals((D::Table, D::EventId)),
        )
        .to_owned()
}

/// The newest `limit` deliveries of a subscription, newest first.
pub async fn deliveries_of(
    tx: &mut Tx,
    subscription_id: i64,
    limit: u64,
) -> StoreResult<Vec<DeliveryRow>> {
    use WebhookDeliveries as D;
    let q = select_delivery()
        .and_where(Expr::col((D::Table, D::SubscriptionId)).eq(subscription_id))
        .order_by((D::Table, D::Id), Order::Desc)
        .limit(limit)
        .to_owned();
    tx.fetch_all(&q).await
}

/// One delivery of a subscription.
pub async fn delivery(
    tx: &mut Tx,
    subscription_id: i64,
    id: i64,
) -> StoreResult<Option<DeliveryRow>> {
    use WebhookDeliveries as D;
    let q = select_delivery()
        .and_where(Expr::col((D::Table, D::SubscriptionId)).eq(subscription_id))
        .and_where(Expr::col((D::Table, D::Id)).eq(id))
        .to_owned();
    tx.fetch_optional(&q).await
}

/// Makes a delivery due again at `now` (a manual retry): pending, its
/// attempts kept. A delivery a worker holds (a live lease) is left alone:
/// it is being attempted.
pub async fn retry(tx: &mut Tx, id: i64, now: &str) -> StoreResult<u64> {
    use WebhookDeliveries as D;
    let q = Query::update()
        .table(D::Table)
        .value(D::Status, "pending")
        .value(D::NextAttemptAt, now)
        .value(D::LeaseUntil, Option::<String>::None)
        .and_where(Expr::col(D::Id).eq(id))
        .cond_where(
            Cond::any()
                .add(Expr::col(D::LeaseUntil).is_null())
                .add(Expr::col(D::LeaseUntil).lte(now)),
        )
        .to_owned();
    tx.execute(&q).await
}

/// `(due, oldest due's next_attempt_at)` of the pending deliveries due by
/// `now`.
pub async fn backlog(tx: &mut Tx, now: &str) -> StoreResult<(i64, Option<String>)> {
    use WebhookDeliveries as D;
    let q = Query::select()
        .expr(Expr::col(D::Id).count())
        .expr(Expr::col(D::NextAttemptAt).min())
        .from(D::Table)
        .and_where(pending())
        .and_where(Expr::col(D::NextAttemptAt).lte(now))
        .to_owned();
    tx.fetch_one(&q).await
}
