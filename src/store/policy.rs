//! Per-agent MCP tool grants: the current set of each bot, and the
//! append-only history of changes (never updated or deleted).

use sea_query::{Expr, ExprTrait, Iden, OnConflict, Order, Query};

use super::{StoreResult, Tx};

/// `agent_tool_grants`
#[derive(Iden, Clone, Copy)]
pub enum AgentToolGrants {
    Table,
    UserId,
    Grants,
    UpdatedAt,
    UpdatedBy,
}

/// `agent_tool_grant_changes`
#[derive(Iden, Clone, Copy)]
pub enum AgentToolGrantChanges {
    Table,
    Id,
    UserId,
    Grants,
    ChangedBy,
    ChangedAt,
}

/// A bot's current grant set.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct ToolGrantsRow {
    /// JSON array of grants.
    pub grants: String,
    /// When it was last set.
    pub updated_at: String,
    /// Who set it: a login, `cli` or `policy-file`.
    pub updated_by: String,
}

/// One recorded change.
#[derive(Debug, Clone, sqlx::FromRow, serde::Deserialize)]
pub struct ToolGrantChangeRow {
    /// Change id (ascending in time).
    pub id: i64,
    /// The new set, JSON.
    pub grants: String,
    /// Who made it.
    pub changed_by: String,
    /// When.
    pub changed_at: String,
}

/// The current set of a bot, if one was ever set.
pub async fn grants_of(tx: &mut Tx, user_id: i64) -> StoreResult<Option<ToolGrantsRow>> {
    use AgentToolGrants as G;
    let q = Query::select()
        .columns([G::Grants, G::UpdatedAt, G::UpdatedBy])
        .from(G::Table)
        .and_where(Expr::col(G::UserId).eq(user_id))
        .to_owned();
    tx.fetch_optional(&q).await
}

/// Replaces a bot's set and appends the change to its history.
pub async fn replace_grants(
    tx: &mut Tx,
    user_id: i64,
    grants: &str,
    by: &str,
    now: &str,
) -> StoreResult<()> {
    use AgentToolGrantChanges as C;
    use AgentToolGrants as G;
    let q = Query::insert()
        .into_table(G::Table)
        .columns([G::UserId, G::Grants, G::UpdatedAt, G::UpdatedBy])
        .values_panic([user_id.into(), grants.into(), now.into(), by.into()])
        .on_conflict(
            OnConflict::column(G::UserId)
                .update_columns([G::Grants, G::UpdatedAt, G::UpdatedBy])
                .to_owned(),
        )
        .to_owned();
    tx.execute(&q).await?;
    let q = Query::insert()
        .into_table(C::Table)
        .columns([C::UserId, C::Grants, C::ChangedBy, C::ChangedAt])
        .values_panic([user_id.into(), grants.into(), by.into(), now.into()])
        .to_owned();
    tx.execute(&q).await.map(|_| ())
}

/// A bot's change history, oldest first.
pub async fn changes_of(tx: &mut Tx, user_id: i64) -> StoreResult<Vec<ToolGrantChangeRow>> {
    use AgentToolGrantChanges as C;
    let q = Query::select()
        .columns([C::Id, C::Grants, C::ChangedBy, C::ChangedAt])
        .from(C::Table)
        .and_where(Expr::col(C::UserId).eq(user_id))
        .order_by(C::Id, Order::Asc)
        .to_owned();
    tx.fetch_all(&q).await
}
