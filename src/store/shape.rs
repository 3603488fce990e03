//! Statements whose text depends only on their shape, rendered once.
//!
//! Building a sea-query statement and rendering it took ~20 µs of CPU for
//! a grant lookup, on every call, for SQL text that never changes: only
//! its values do. A [`Shape`] is built once per backend with a marker in
//! each place a value goes ([`slot`]), rendered, and kept; each call then
//! binds its values to the kept text ([`Shape::bind`]). The statement is
//! still written with sea-query, in one builder function per shape, and a
//! shape's test can compare the kept text with a fresh rendering. Values
//! are bound by name: `slot("grant_id")` in the statement takes the value
//! named `grant_id` in the call's [`Args`].

use std::borrow::Cow;
use std::sync::OnceLock;

use sea_query::{Expr, PostgresQueryBuilder, QueryStatementWriter, SqliteQueryBuilder, Value};

use super::Backend;

/// A statement the store can run: rendered for a backend, with its values.
pub trait Statement {
    /// The SQL text for `backend` and its values, in placeholder order.
    fn render(&self, backend: Backend) -> (Cow<'static, str>, Vec<Value>);
}

impl<S: QueryStatementWriter> Statement for S {
    fn render(&self, backend: Backend) -> (Cow<'static, str>, Vec<Value>) {
        let (sql, values) = match backend {
            Backend::Sqlite => self.build(SqliteQueryBuilder),
            Backend::Postgres => self.build(PostgresQueryBuilder),
        };
        (Cow::Owned(sql), values.0)
    }
}

const MARK: &str = "\u{1}writ-slot:";

/// The marker of the value named `name`: where the value of that name in
/// [`Shape::bind`]'s arguments goes.
pub fn slot(name: &'static str) -> Expr {
    Expr::val(format!("{MARK}{name}"))
}

/// One call's values, by slot name.
pub type Args = Vec<(&'static str, Value)>;

/// A statement kept rendered (one per backend), see the module's doc.
pub struct Shape {
    sqlite: OnceLock<Rendered>,
    postgres: OnceLock<Rendered>,
}

struct Rendered {
    sql: String,
    /// Where each placeholder's value comes from.
    values: Vec<Source>,
}

enum Source {
    /// The call's argument of this name.
    Arg(String),
    /// A value fixed in the shape itself.
    Fixed(Value),
}

impl Shape {
    /// A shape not rendered yet.
    pub const fn new() -> Shape {
        Shape {
            sqlite: OnceLock::new(),
            postgres: OnceLock::new(),
        }
    }

    /// The statement `build` makes (with [`slot`]s), rendered for `backend`
    /// the first time, bound to `args`. Every slot must have its value in
    /// `args` (a shape's tests bind each shape).
    pub fn bind<S: Statement>(
        &'static self,
        backend: Backend,
        build: impl FnOnce() -> S,
        args: &[(&'static str, Value)],
    ) -> Bound {
        let rendered = match backend {
            Backend::Sqlite => &self.sqlite,
            Backend::Postgres => &self.postgres,
        }
        .get_or_init(|| Rendered::of(&build(), backend));
        let values = rendered
            .values
            .iter()
            .map(|source| match source {
                Source::Arg(name) => args
                    .iter()
                    .find(|(n, _)| n == name)
                    .unwrap_or_else(|| panic!("no value for the slot {name}"))
                    .1
                    .clone(),
                Source::Fixed(v) => v.clone(),
            })
            .collect();
        Bound {
            sql: &rendered.sql,
            values,
        }
    }
}

impl Default for Shape {
    fn default() -> Shape {
        Shape::new()
    }
}

impl Rendered {
    fn of(statement: &impl Statement, backend: Backend) -> Rendered {
        let (sql, values) = statement.render(backend);
        let values = values
            .into_iter()
            .map(|v| match &v {
                Value::String(Some(s)) if s.starts_with(MARK) => {
                    Source::Arg(s[MARK.len()..].to_owned())
                }
                _ => Source::Fixed(v),
            })
            .collect();
        Rendered {
            sql: sql.into_owned(),
            values,
        }
    }
}

/// A shape's text with one call's values.
#[derive(Debug)]
pub struct Bound {
    sql: &'static str,
    values: Vec<Value>,
}

impl Bound {
    /// The statement's text.
    pub fn sql(&self) -> &'static str {
        self.sql
    }

    /// Its values, in placeholder order.
    pub fn values(&self) -> &[Value] {
        &self.values
    }
}

impl Statement for Bound {
    fn render(&self, _backend: Backend) -> (Cow<'static, str>, Vec<Value>) {
        (Cow::Borrowed(self.sql), self.values.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_query::{Alias, ExprTrait, Query};

    fn lookup(id: Expr, name: Expr) -> sea_query::SelectStatement {
        Query::select()
            .column("a")
            .from(Alias::new("t"))
            .and_where(Expr::col("id").eq(id))
            .and_where(Expr::col("state").eq("live"))
            .and_where(
                Expr::col("name")
                    .eq(name.clone())
                    .or(Expr::col("alias").eq(name)),
            )
            .to_owned()
    }

    #[test]
    fn a_bound_shape_is_the_statement_rendered_with_its_values() {
        static SHAPE: Shape = Shape::new();
        for backend in [Backend::Sqlite, Backend::Postgres] {
            for (id, name) in [(1i64, "x"), (42, "y\u{1}writ")] {
                let bound = SHAPE.bind(
                    backend,
                    || lookup(slot("id"), slot("name")),
                    &[("name", name.into()), ("id", id.into())],
                );
                let fresh = lookup(Expr::val(id), Expr::val(name));
                let (sql, values) = bound.render(backend);
                assert_eq!((sql, values), fresh.render(backend));
            }
        }
    }
}
