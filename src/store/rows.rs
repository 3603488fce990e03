//! Several rows of values as one parameter (PostgreSQL): a statement that
//! works on a batch of requests (`store::handoff::hand_off_many`,
//! `store::grants::agent_grants_in_repos`) takes their values as one JSON
//! array of objects, one a request, keyed by the names its [`slot`]s would
//! have, and reads them back as the typed columns of a table named
//! [`INPUT`]. The statement's text is the same for any number of rows, so
//! it is rendered once (a [`super::shape::Shape`]) and planned once.

use std::collections::BTreeSet;

use sea_query::{CommonTableExpression, Expr, ExprTrait, Query, Value};

use super::shape::{Args, slot};
use super::{StoreError, StoreResult};

/// The table of the input rows.
pub const INPUT: &str = "inp";

/// The value `name` of the input row.
pub fn input(name: &'static str) -> Expr {
    Expr::col((INPUT, name))
}

/// The rows' values as the JSON text bound to the slot `rows`.
pub fn rows_json(rows: &[Args]) -> StoreResult<String> {
    let rows = rows.iter().map(row_json).collect::<StoreResult<Vec<_>>>()?;
    Ok(serde_json::Value::Array(rows).to_string())
}

fn row_json(args: &Args) -> StoreResult<serde_json::Value> {
    let mut object = serde_json::Map::with_capacity(args.len());
    for (name, value) in args {
        let json = match value {
            Value::Bool(b) => serde_json::json!(b),
            Value::Int(i) => serde_json::json!(i),
            Value::BigInt(i) => serde_json::json!(i),
            Value::String(s) => serde_json::json!(s),
            other => return Err(StoreError::other(format!("no JSON for {other:?}"))),
        };
        object.insert((*name).to_owned(), json);
    }
    Ok(serde_json::Value::Object(object))
}

/// The SQL type a value is read back as.
fn sql_type(value: &Value) -> &'static str {
    match value {
        Value::Bool(_) => "boolean",
        Value::Int(_) => "integer",
        Value::BigInt(_) => "bigint",
        _ => "text",
    }
}

/// The materialized `WITH` table [`INPUT`] of the rows bound to the slot
/// `rows`, its columns named and typed after `first`'s values, and `extra`
/// columns computed once a row (`nextval`, say).
pub fn input_table(first: &Args, extra: &[(&'static str, &'static str)]) -> CommonTableExpression {
    let mut select = Query::select();
    let mut named = BTreeSet::new();
    for (name, value) in first {
        if named.insert(*name) {
            let ty = sql_type(value);
            select.expr_as(Expr::cust(format!("(r ->> '{name}')::{ty}")), *name);
        }
    }
    for (name, expr) in extra {
        select.expr_as(Expr::cust(*expr), *name);
    }
    select.from_function(
        sea_query::Func::cust("json_array_elements").arg(slot("rows").cast_as("json")),
        "r",
    );
    CommonTableExpression::new()
        .query(select)
        .table_name(INPUT)
        .materialized(true)
        .to_owned()
}
