//! Counted pages of grants (the agent list, a repository's list), at a cost
//! that does not grow with the number of grants: the total is a sum over the
//! `grant_counts` rows of the agent or repository, and a page's ids come from
//! the narrow `(agent_id | repository_id, state, id)` indexes, walked from the
//! nearer end, before the wide rows are read for those ids only.

use std::collections::BTreeSet;

use sea_query::{Expr, ExprTrait, Order, Query, SelectStatement, UnionType};

use super::grants::{GrantFilter, GrantRow, repository_condition, select_grant};
use super::schema::{GrantCounts, Grants, Repositories};
use super::{StoreError, StoreResult, Tx};

/// How many grants a filter matches, and where they are: what a page of
/// them needs to be cut without counting again.
#[derive(Debug, Clone)]
pub struct GrantCount {
    /// Matching grants in total.
    pub total: i64,
    /// The filter's states that have matching grants.
    states: Vec<String>,
    /// Which of the counted repositories the matching grants are on.
    scope: Scope,
}

/// The repositories the matching grants are on, among those the agent (or
/// repository) has grants on in the filter's states. The shorter list is
/// kept; none when every one of them qualifies.
#[derive(Debug, Clone)]
enum Scope {
    Every,
    Only(Vec<i64>),
    Except(Vec<i64>),
}

#[derive(sqlx::FromRow, serde::Deserialize)]
struct CountRow {
    repository_id: i64,
    state: String,
    n: i64,
    visible: bool,
}

/// Counts the grants a filter matches from `grant_counts`, in the
/// transaction's snapshot. Grants are not counted per issuer: a filter on
/// `issuer_id` is refused.
pub async fn count_grants(tx: &mut Tx, f: &GrantFilter<'_>) -> StoreResult<GrantCount> {
    if f.issuer_id.is_some() {
        return Err(StoreError::other("grant counts are not kept per issuer"));
    }
    let c = GrantCounts::Table;
    let mut q = Query::select();
    q.columns([
        (c, GrantCounts::RepositoryId),
        (c, GrantCounts::State),
        (c, GrantCounts::N),
    ])
    .from(c)
    .and_where(Expr::col((c, GrantCounts::State)).is_in(f.states.iter().copied()))
    .and_where(Expr::col((c, GrantCounts::N)).gt(0));
    if let Some(agent) = f.agent_id {
        q.and_where(Expr::col((c, GrantCounts::AgentId)).eq(agent));
    }
    if let Some(repo) = f.repository_id {
        q.and_where(Expr::col((c, GrantCounts::RepositoryId)).eq(repo));
    }
    match repository_condition(f) {
        Some(cond) => {
            q.inner_join(
                Repositories::Table,
                Expr::col((Repositories::Table, Repositories::Id))
                    .equals((c, GrantCounts::RepositoryId)),
            )
            .expr_as(Expr::case(cond, true).finally(false), "visible");
        }
        None => {
            q.expr_as(Expr::val(true), "visible");
        }
    }
    let rows: Vec<CountRow> = tx.fetch_all(&q).await?;
    let (mut total, mut states) = (0, BTreeSet::new());
    let (mut shown, mut hidden) = (BTreeSet::new(), BTreeSet::new());
    for row in rows {
        if row.visible {
            total += row.n;
            states.insert(row.state);
            shown.insert(row.repository_id);
        } else {
            hidden.insert(row.repository_id);
        }
    }
    let scope = if hidden.is_empty() {
        Scope::Every
    } else if shown.len() <= hidden.len() {
        Scope::Only(shown.into_iter().collect())
    } else {
        Scope::Except(hidden.into_iter().collect())
    };
    Ok(GrantCount {
        total,
        states: states.into_iter().collect(),
        scope,
    })
}

/// The ids of the grants in one state that the filter and the counted scope
/// keep (unordered).
fn ids_in_state(f: &GrantFilter<'_>, scope: &Scope, state: &str) -> SelectStatement {
    let g = Grants::Table;
    let mut q = Query::select();
    q.column((g, Grants::Id))
        .from(g)
        .and_where(Expr::col((g, Grants::State)).eq(state));
    if let Some(agent) = f.agent_id {
        q.and_where(Expr::col((g, Grants::AgentId)).eq(agent));
    }
    if let Some(repo) = f.repository_id {
        q.and_where(Expr::col((g, Grants::RepositoryId)).eq(repo));
    }
    match scope {
        Scope::Every => {}
        Scope::Only(ids) => {
            q.and_where(Expr::col((g, Grants::RepositoryId)).is_in(ids.iter().copied()));
        }
        Scope::Except(ids) => {
            q.and_where(Expr::col((g, Grants::RepositoryId)).is_not_in(ids.iter().copied()));
        }
    }
    q
}

/// The ids of rows `skip .. skip + rows` of the counted grants in `order`.
/// Each state is one range of a `(.., state, id)` index, already in id
/// order; with several states each range is cut at `skip + rows` and the
/// page is cut from their merge.
fn page_ids(
    f: &GrantFilter<'_>,
    count: &GrantCount,
    order: Order,
    skip: u64,
    rows: u64,
) -> Option<SelectStatement> {
    let id = (Grants::Table, Grants::Id);
    let (first, rest) = count.states.split_first()?;
    if rest.is_empty() {
        let mut q = ids_in_state(f, &count.scope, first);
        return Some(q.order_by(id, order).limit(rows).offset(skip).to_owned());
    }
    let arm = |(i, state): (usize, &String)| {
        let mut arm = ids_in_state(f, &count.scope, state);
        arm.order_by(id, order.clone())
            .limit(skip.saturating_add(rows));
        Query::select()
            .column(Grants::Id)
            .from_subquery(arm, format!("s{i}"))
            .to_owned()
    };
    let mut merged = arm((0, first));
    merged.unions(
        rest.iter()
            .enumerate()
            .map(|(i, state)| (UnionType::All, arm((i + 1, state)))),
    );
    Some(
        Query::select()
            .column(Grants::Id)
            .from_subquery(merged, "merged")
            .order_by(Grants::Id, order)
            .limit(rows)
            .offset(skip)
            .to_owned(),
    )
}

/// One page of the grants `count` counted, by id ascending: rows
/// `offset .. offset + limit` of the list. The page's ids are read from the
/// end nearer to it (a last page costs what a first page does), then the
/// wide rows for those ids only. `count` must come from [`count_grants`] with
/// the same filter in the same transaction.
pub async fn list_page(
    tx: &mut Tx,
    f: &GrantFilter<'_>,
    count: &GrantCount,
    limit: u64,
    offset: u64,
) -> StoreResult<Vec<GrantRow>> {
    let total = u64::try_from(count.total).unwrap_or(0);
    if offset >= total || limit == 0 {
        return Ok(Vec::new());
    }
    let rows = Ord::min(limit, total - offset);
    let after = total - offset - rows;
    let (order, skip) = if after < offset {
        (Order::Desc, after)
    } else {
        (Order::Asc, offset)
    };
    let Some(ids_query) = page_ids(f, count, order, skip, rows) else {
        return Ok(Vec::new());
    };
    let ids: Vec<(i64,)> = tx.fetch_all(&ids_query).await?;
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let q = select_grant(tx.backend())
        .and_where(Expr::col((Grants::Table, Grants::Id)).is_in(ids.into_iter().map(|(id,)| id)))
        .order_by((Grants::Table, Grants::Id), Order::Asc)
        .to_owned();
    tx.fetch_all(&q).await
}
