//! Grants and their event timeline.

use sea_query::{
    Cond, Expr, ExprTrait, IntoCondition, JoinType, LockType, Order, Query, SelectStatement, Value,
};

use super::admission::{
    EvaluationInputs, InputRow, inputs_json, inputs_query, parse_inputs, parse_inputs_json,
};
use super::principals::token_live;
use super::repos::{RepoRow, with_collaborator_permission};
use super::schema::{
    AdmissionEvaluations, Collaborators, GrantEvents, Grants, Repositories, Submissions, Users,
};
use super::shape::{Args, Shape, slot};
use super::{Backend, StoreResult, Tx};

/// A grant joined with every login and repository fact its JSON needs.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct GrantRow {
    pub id: i64,
    pub repository_id: i64,
    pub repo_owner: String,
    pub repo_name: String,
    #[serde(deserialize_with = "super::sqlite::boolean")]
    pub repo_private: bool,
    pub agent_id: i64,
    pub agent_login: String,
    pub issuer_id: i64,
    pub issuer_login: String,
    pub approver_id: Option<i64>,
    pub approver_login: Option<String>,
    pub state: String,
    pub state_revision: i64,
    pub proposal: String,
    pub proposal_digest: String,
    pub max_submissions: i64,
    pub expires_at: Option<String>,
    pub submission_count: i64,
    pub created_at: String,
    pub updated_at: String,
    pub confirmed_at: Option<String>,
    pub approved_at: Option<String>,
    pub revoked_at: Option<String>,
    pub revoked_by: Option<i64>,
    pub revoked_by_login: Option<String>,
    pub revoke_reason: Option<String>,
    pub admission_id: Option<i64>,
    pub admission_phase: Option<String>,
    pub admission_status: Option<String>,
    pub admission_snapshot_id: Option<i64>,
    pub admission_evaluated_at: Option<String>,
}

/// A grant with the facts of its JSON: its repository, the logins, and its
/// latest admission evaluation.
pub(super) fn select_grant(backend: Backend) -> SelectStatement {
    let g = Grants::Table;
    let mut q = Query::select();
    q.columns([
        (g, Grants::Id),
        (g, Grants::RepositoryId),
        (g, Grants::AgentId),
        (g, Grants::IssuerId),
        (g, Grants::ApproverId),
        (g, Grants::State),
        (g, Grants::StateRevision),
        (g, Grants::Proposal),
        (g, Grants::ProposalDigest),
        (g, Grants::MaxSubmissions),
        (g, Grants::ExpiresAt),
        (g, Grants::SubmissionCount),
        (g, Grants::CreatedAt),
        (g, Grants::UpdatedAt),
        (g, Grants::ConfirmedAt),
        (g, Grants::ApprovedAt),
        (g, Grants::RevokedAt),
        (g, Grants::RevokedBy),
        (g, Grants::RevokeReason),
    ])
    .expr_as(Expr::col(("owner", Users::Login)), "repo_owner")
    .expr_as(
        Expr::col((Repositories::Table, Repositories::Name)),
        "repo_name",
    )
    .expr_as(
        Expr::col((Repositories::Table, Repositories::Private)),
        "repo_private",
    )
    .expr_as(Expr::col(("agent", Users::Login)), "agent_login")
    .expr_as(Expr::col(("issuer", Users::Login)), "issuer_login")
    .expr_as(Expr::col(("approver", Users::Login)), "approver_login")
    .expr_as(Expr::col(("revoker", Users::Login)), "revoked_by_login")
    .expr_as(Expr::col(("le", AdmissionEvaluations::Id)), "admission_id")
    .expr_as(
        Expr::col(("le", AdmissionEvaluations::Phase)),
        "admission_phase",
    )
    .expr_as(
        Expr::col(("le", AdmissionEvaluations::Status)),
        "admission_status",
    )
    .expr_as(
        Expr::col(("le", AdmissionEvaluations::SnapshotId)),
        "admission_snapshot_id",
    )
    .expr_as(
        Expr::col(("le", AdmissionEvaluations::EvaluatedAt)),
        "admission_evaluated_at",
    )
    .from(g)
    .inner_join(
        Repositories::Table,
        Expr::col((Repositories::Table, Repositories::Id)).equals((g, Grants::RepositoryId)),
    );
    for (alias, column, kind) in [
        ("owner", None, JoinType::InnerJoin),
        ("agent", Some(Grants::AgentId), JoinType::InnerJoin),
        ("issuer", Some(Grants::IssuerId), JoinType::InnerJoin),
        ("approver", Some(Grants::ApproverId), JoinType::LeftJoin),
        ("revoker", Some(Grants::RevokedBy), JoinType::LeftJoin),
    ] {
        let on = match column {
            Some(c) => Expr::col((alias, Users::Id)).equals((g, c)),
            None => {
                Expr::col((alias, Users::Id)).equals((Repositories::Table, Repositories::OwnerId))
            }
        };
        q.join_as(kind, Users::Table, alias, on);
    }
    latest_evaluation(backend, &mut q);
    q
}

/// Joins the grant's latest admission evaluation as `le`: one backward probe
/// of the `(grant_id, id)` index per grant, whatever the planner believes
/// about the table.
///
/// PostgreSQL: a `LATERAL` subquery that takes the last entry of that index
/// at or before `(grant, max)` — `WHERE (grant_id, id) <= (g.id, max) ORDER
/// BY grant_id DESC, id DESC LIMIT 1` — kept only if it is the grant's. No
/// other index gives that order, so no other plan is cheap. The form SQLite
/// uses, `le.id = (SELECT max(id) ...)`, left PostgreSQL free to hash-join a
/// sequential scan of every evaluation, and a generic plan made while the
/// table was small kept doing so as it grew: a submit's route lookup went
/// from 0.14 ms to 4.4 ms per execution in a bench run at 100k grants. With
/// `WHERE grant_id = g.id ORDER BY id DESC`, the planner may instead walk the
/// primary key backwards until it meets the grant's evaluation, through
/// every newer evaluation of every other grant. (`IN` with `le.grant_id =
/// grants.id` made it test the subquery against every evaluation of the
/// grant: 8 ms at 800 of them.)
fn latest_evaluation(backend: Backend, q: &mut SelectStatement) {
    let g = Grants::Table;
    let e = AdmissionEvaluations::Table;
    if backend == Backend::Postgres {
        let at_or_before = Expr::tuple([
            Expr::col((e, AdmissionEvaluations::GrantId)),
            Expr::col((e, AdmissionEvaluations::Id)),
        ])
        .lte(Expr::tuple([
            Expr::col((g, Grants::Id)),
            Expr::val(i64::MAX),
        ]));
        let latest = Query::select()
            .columns([
                (e, AdmissionEvaluations::Id),
                (e, AdmissionEvaluations::GrantId),
                (e, AdmissionEvaluations::Phase),
                (e, AdmissionEvaluations::Status),
                (e, AdmissionEvaluations::SnapshotId),
                (e, AdmissionEvaluations::EvaluatedAt),
            ])
            .from(e)
            .and_where(at_or_before)
            .order_by((e, AdmissionEvaluations::GrantId), Order::Desc)
            .order_by((e, AdmissionEvaluations::Id), Order::Desc)
            .limit(1)
            .to_owned();
        q.join_lateral(
            JoinType::LeftJoin,
            latest,
            "le",
            Expr::col(("le", AdmissionEvaluations::GrantId)).equals((g, Grants::Id)),
        );
        return;
    }
    let latest = Query::select()
        .expr(Expr::col(("e2", AdmissionEvaluations::Id)).max())
        .from_as(e, "e2")
        .and_where(Expr::col(("e2", AdmissionEvaluations::GrantId)).equals((g, Grants::Id)))
        .to_owned();
    q.join_as(
        JoinType::LeftJoin,
        e,
        "le",
        Expr::col(("le", AdmissionEvaluations::Id))
            .eq(Expr::SubQuery(None, Box::new(latest.into()))),
    );
}

/// Reads one grant.
pub async fn grant_by_id(tx: &mut Tx, id: i64) -> StoreResult<Option<GrantRow>> {
    let q = select_grant(tx.backend())
        .and_where(Expr::col((Grants::Table, Grants::Id)).eq(id))
        .to_owned();
    tx.fetch_optional(&q).await
}

/// Reads one grant and takes its row lock (`FOR UPDATE OF grants` on
/// PostgreSQL; on SQLite the write transaction already serializes), in one
/// statement.
pub async fn grant_by_id_locked(tx: &mut Tx, id: i64) -> StoreResult<Option<GrantRow>> {
    let mut q = select_grant(tx.backend())
        .and_where(Expr::col((Grants::Table, Grants::Id)).eq(id))
        .to_owned();
    lock_grant_row(tx.backend(), &mut q);
    tx.fetch_optional(&q).await
}

/// Makes a grant read take the grant's row lock: `FOR UPDATE OF grants` on
/// PostgreSQL; on SQLite the write transaction already serializes.
fn lock_grant_row(backend: Backend, q: &mut SelectStatement) {
    if backend == Backend::Postgres {
        q.lock_with_tables(LockType::Update, [Grants::Table]);
    }
}

/// A bot's grant looked up by the names in its route: the grant with the
/// id, of that agent, on the repository `owner/name` (case-insensitively),
/// with what the read rule asks of that repository.
#[derive(Debug, Clone, Copy)]
pub struct AgentGrantQuery<'a> {
    pub id: i64,
    pub owner: &'a str,
    pub name: &'a str,
    pub agent_id: i64,
    /// The agent's token: the grant is found only while it is not revoked.
    pub token_id: i64,
    /// Also find the grant's receipt under this key.
    pub request_key: Option<&'a str>,
    /// Take the grant's row lock (see [`grant_by_id_locked`]).
    pub lock: bool,
    /// Also read the admission inputs of the route's repository (in the
    /// same round trip, see [`agent_grant_in_repo`]).
    pub admission_inputs: bool,
}

/// What [`agent_grant_in_repo`] finds.
pub struct Found {
    /// The grant.
    pub found: AgentGrantRow,
    /// The admission inputs, if asked and read with it.
    pub inputs: Option<EvaluationInputs>,
}

/// A grant found through its route.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct AgentGrantRow {
    /// The grant.
    #[sqlx(flatten)]
    #[serde(flatten)]
    pub grant: GrantRow,
    /// The grant's receipt under the request key, if asked and present.
    pub key_submission_id: Option<i64>,
    /// The repository's owner.
    pub repo_owner_id: i64,
    /// The repository's distinct-approver rule.
    pub repo_require_distinct_approver: bool,
    /// The repository's creation time.
    pub repo_created_at: String,
    /// The agent's collaborator permission on the repository, if any.
    pub collaborator_permission: Option<String>,
}

impl AgentGrantRow {
    /// The grant's repository.
    pub fn repo(&self) -> RepoRow {
        RepoRow {
            id: self.grant.repository_id,
            owner_id: self.repo_owner_id,
            owner_login: self.grant.repo_owner.clone(),
            name: self.grant.repo_name.clone(),
            private: self.grant.repo_private,
            require_distinct_approver: self.repo_require_distinct_approver,
            created_at: self.repo_created_at.clone(),
        }
    }
}

/// Finds a bot's grant through its route (see [`AgentGrantQuery`]) in one
/// statement: the grant, its repository by name, the agent's collaborator
/// entry and, for a submit, the receipt under the request key. When asked,
/// the admission inputs of the route's repository come with it: as one JSON
/// column of the same statement on PostgreSQL (one round trip), as the
/// second statement of the same script on SQLite (one hand-off to the
/// connection's thread). `None` when any of it does not match (the caller
/// then tells which).
pub async fn agent_grant_in_repo(
    tx: &mut Tx,
    a: AgentGrantQuery<'_>,
) -> StoreResult<Option<Found>> {
    static ROUTES: [Shape; 8] = [const { Shape::new() }; 8];
    let backend = tx.backend();
    let shape = RouteShape {
        lock: a.lock,
        keyed: a.request_key.is_some(),
        inputs: a.admission_inputs,
    };
    let mut args: Args = vec![
        ("grant_id", a.id.into()),
        ("agent_id", a.agent_id.into()),
        ("owner", a.owner.to_ascii_lowercase().into()),
        ("repo", a.name.to_ascii_lowercase().into()),
        ("token_id", a.token_id.into()),
    ];
    args.extend(a.request_key.map(|key| ("request_key", Value::from(key))));
    let select = ROUTES[shape.index()].bind(backend, || route_query(backend, shape), &args);
    if !a.admission_inputs {
        let found = tx.fetch_optional::<AgentGrantRow>(&select).await?;
        return Ok(found.map(|found| Found {
            found,
            inputs: None,
        }));
    }
    if backend == Backend::Postgres {
        let Some(row) = tx.fetch_optional::<WithInputs>(&select).await? else {
            return Ok(None);
        };
        let inputs = parse_inputs_json(row.admission_inputs.as_deref())?;
        return Ok(Some(Found {
            found: row.found,
            inputs: Some(inputs),
        }));
    }
    // On SQLite the inputs are a second statement (no round trip: it runs
    // where it is asked for, see store::sqlite).
    static INPUTS: Shape = Shape::new();
    let Some(found) = tx.fetch_optional::<AgentGrantRow>(&select).await? else {
        return Ok(None);
    };
    let inputs = INPUTS.bind(
        backend,
        || inputs_query(slot("repository_id")),
        &[("repository_id", found.grant.repository_id.into())],
    );
    let rows = tx.fetch_all::<InputRow>(&inputs).await?;
    Ok(Some(Found {
        found,
        inputs: Some(parse_inputs(rows)?),
    }))
}

/// A grant found through its route with its repository's admission inputs
/// as one JSON column (PostgreSQL).
#[derive(sqlx::FromRow, serde::Deserialize)]
struct WithInputs {
    #[sqlx(flatten)]
    #[serde(flatten)]
    found: AgentGrantRow,
    admission_inputs: Option<String>,
}

/// The variant of the route lookup (each is one [`Shape`]).
#[derive(Debug, Clone, Copy)]
struct RouteShape {
    lock: bool,
    keyed: bool,
    inputs: bool,
}

impl RouteShape {
    fn index(self) -> usize {
        usize::from(self.lock) * 4 + usize::from(self.keyed) * 2 + usize::from(self.inputs)
    }
}

/// The route lookup of [`agent_grant_in_repo`], its values as slots: the
/// grant id, the agent, the owner's and the repository's lowercase names,
/// the agent's token (which must not be revoked) and (keyed) the request
/// key.
fn route_query(backend: Backend, shape: RouteShape) -> SelectStatement {
    let r = Repositories::Table;
    let mut q = select_grant(backend);
    q.expr_as(Expr::col((r, Repositories::OwnerId)), "repo_owner_id")
        .expr_as(
            Expr::col((r, Repositories::RequireDistinctApprover)),
            "repo_require_distinct_approver",
        )
        .expr_as(Expr::col((r, Repositories::CreatedAt)), "repo_created_at");
    with_collaborator_permission(&mut q, slot("agent_id"));
    q.and_where(Expr::col((Grants::Table, Grants::Id)).eq(slot("grant_id")))
        .and_where(Expr::col((Grants::Table, Grants::AgentId)).eq(slot("agent_id")))
        .and_where(Expr::col(("owner", Users::LowerLogin)).eq(slot("owner")))
        .and_where(Expr::col((r, Repositories::LowerName)).eq(slot("repo")))
        .and_where(token_live(slot("token_id"), slot("agent_id")));
    if shape.keyed {
        q.expr_as(Expr::col(("ks", Submissions::Id)), "key_submission_id")
            .join_as(
                JoinType::LeftJoin,
                Submissions::Table,
                "ks",
                Expr::col(("ks", Submissions::GrantId))
                    .equals((Grants::Table, Grants::Id))
                    .and(Expr::col(("ks", Submissions::RequestKey)).eq(slot("request_key"))),
            );
    } else {
        q.expr_as(Expr::cust("CAST(NULL AS BIGINT)"), "key_submission_id");
    }
    if shape.inputs && backend == Backend::Postgres {
        let repository = Expr::col((Repositories::Table, Repositories::Id));
        q.expr_as(inputs_json(repository), "admission_inputs");
    }
    if shape.lock {
        lock_grant_row(backend, &mut q);
    }
    q
}

/// Which grants a list shows.
pub struct GrantFilter<'a> {
    /// Only grants whose agent is this bot.
    pub agent_id: Option<i64>,
    /// Only grants this human issued.
    pub issuer_id: Option<i64>,
    /// Only grants of this repository.
    pub repository_id: Option<i64>,
    /// Only grants on repositories this user can read now.
    pub readable_by: Option<i64>,
    /// Only grants on public repositories.
    pub public_only: bool,
    /// Only grants on these repository ids.
    pub repository_ids: Option<&'a [i64]>,
    /// Only these states.
    pub states: &'a [&'a str],
}

/// What the filter asks of the repository itself (read access, the token's
/// reducers), over the `repositories` table; `None` when nothing.
pub(super) fn repository_condition(f: &GrantFilter<'_>) -> Option<Cond> {
    let mut cond = Cond::all();
    let mut any = false;
    if let Some(user) = f.readable_by {
        let member = Query::select()
            .column(Collaborators::RepositoryId)
            .from(Collaborators::Table)
            .and_where(Expr::col(Collaborators::UserId).eq(user))
            .to_owned();
        cond = cond.add(
            Cond::any()
                .add(Expr::col((Repositories::Table, Repositories::Private)).eq(false))
                .add(Expr::col((Repositories::Table, Repositories::OwnerId)).eq(user))
                .add(Expr::col((Repositories::Table, Repositories::Id)).in_subquery(member)),
        );
        any = true;
    }
    if f.public_only {
        cond = cond.add(Expr::col((Repositories::Table, Repositories::Private)).eq(false));
        any = true;
    }
    if let Some(ids) = f.repository_ids {
        cond =
            cond.add(Expr::col((Repositories::Table, Repositories::Id)).is_in(ids.iter().copied()));
        any = true;
    }
    any.then_some(cond)
}

fn filter_condition(f: &GrantFilter<'_>) -> Cond {
    let mut cond = Cond::all();
    if let Some(agent) = f.agent_id {
        cond = cond.add(Expr::col((Grants::Table, Grants::AgentId)).eq(agent));
    }
    if let Some(issuer) = f.issuer_id {
        cond = cond.add(Expr::col((Grants::Table, Grants::IssuerId)).eq(issuer));
    }
    if let Some(repo) = f.repository_id {
        cond = cond.add(Expr::col((Grants::Table, Grants::RepositoryId)).eq(repo));
    }
    // The repository is joined on `grants.repository_id`, so its own
    // conditions are the ones the counted lists use.
    if let Some(repository) = repository_condition(f) {
        cond = cond.add(repository);
    }
    cond.add(Expr::col((Grants::Table, Grants::State)).is_in(f.states.iter().copied()))
}

/// Rows of the grants a filter matches, newest (highest id) first, without
/// a total (the dashboard); a counted page is
/// [`super::grant_pages::list_page`].
pub async fn list_grants(
    tx: &mut Tx,
    f: &GrantFilter<'_>,
    limit: u64,
    offset: u64,
) -> StoreResult<Vec<GrantRow>> {
    let q = select_grant(tx.backend())
        .cond_where(filter_condition(f))
        .order_by((Grants::Table, Grants::Id), Order::Desc)
        .limit(limit)
        .offset(offset)
        .to_owned();
    tx.fetch_all(&q).await
}

/// A freshly prepared grant (its proposal is written once the id is known).
pub struct NewGrant<'a> {
    pub repository_id: i64,
    pub agent_id: i64,
    pub issuer_id: i64,
    pub max_submissions: i64,
    pub expires_at: Option<String>,
    pub now: &'a str,
}

/// Inserts a grant in `awaiting_agent`, revision 1, and returns its id.
pub async fn insert_grant(tx: &mut Tx, g: NewGrant<'_>) -> StoreResult<i64> {
    let q = Query::insert()
        .into_table(Grants::Table)
        .columns([
            Grants::RepositoryId,
            Grants::AgentId,
            Grants::IssuerId,
            Grants::State,
            Grants::StateRevision,
            Grants::Proposal,
            Grants::ProposalDigest,
            Grants::MaxSubmissions,
            Grants::ExpiresAt,
            Grants::CreatedAt,
            Grants::UpdatedAt,
        ])
        .values_panic([
            g.repository_id.into(),
            g.agent_id.into(),
            g.issuer_id.into(),
            "awaiting_agent".into(),
            1i64.into(),
            "".into(),
            "".into(),
            g.max_submissions.into(),
            g.expires_at.into(),
            g.now.into(),
            g.now.into(),
        ])
        .returning_col(Grants::Id)
        .to_owned();
    Ok(tx.fetch_one::<(i64,)>(&q).await?.0)
}

/// Updates a grant; with `expected_revision` the update is a compare-and-swap
/// on `state_revision`. Returns how many rows changed (0 means the CAS lost).
pub async fn update_grant(
    tx: &mut Tx,
    id: i64,
    expected_revision: Option<i64>,
    values: Vec<(Grants, Value)>,
) -> StoreResult<u64> {
    let mut q = Query::update();
    q.table(Grants::Table)
        .values(values.into_iter().map(|(c, v)| (c, Expr::val(v))))
        .and_where(Expr::col(Grants::Id).eq(id));
    if let Some(rev) = expected_revision {
        q.and_where(Expr::col(Grants::StateRevision).eq(rev));
    }
    tx.execute(&q).await
}

/// One entry of a grant's timeline.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct GrantEventRow {
    pub id: i64,
    pub grant_id: i64,
    pub event: String,
    pub actor_id: i64,
    pub actor_login: String,
    pub from_state: Option<String>,
    pub to_state: String,
    pub state_revision: i64,
    pub proposal_digest: String,
    pub detail: Option<String>,
    pub at: String,
}

/// A grant's timeline, oldest first.
pub async fn events_of(tx: &mut Tx, grant_id: i64) -> StoreResult<Vec<GrantEventRow>> {
    let e = GrantEvents::Table;
    let q = Query::select()
        .columns([
            (e, GrantEvents::Id),
            (e, GrantEvents::GrantId),
            (e, GrantEvents::Event),
            (e, GrantEvents::ActorId),
            (e, GrantEvents::FromState),
            (e, GrantEvents::ToState),
            (e, GrantEvents::StateRevision),
            (e, GrantEvents::ProposalDigest),
            (e, GrantEvents::Detail),
            (e, GrantEvents::At),
        ])
        .expr_as(Expr::col((Users::Table, Users::Login)), "actor_login")
        .from(e)
        .inner_join(
            Users::Table,
            Expr::col((Users::Table, Users::Id))
                .equals((e, GrantEvents::ActorId))
                .into_condition(),
        )
        .and_where(Expr::col((e, GrantEvents::GrantId)).eq(grant_id))
        .order_by((e, GrantEvents::Id), Order::Asc)
        .to_owned();
    tx.fetch_all(&q).await
}
