//! A full dump of a test database on either engine: every table (listed
//! from `sqlite_master` or `information_schema`), every column as text,
//! every row in order; and the differences between two dumps.

use std::collections::{BTreeMap, HashSet};

use crate::db::SqlConn;

/// One row, every column as text (NULL as `None`).
type Row = Vec<Option<String>>;

/// Table name → (columns, rows ordered by every column).
pub struct Dump(pub BTreeMap<String, (Vec<String>, Vec<Row>)>);

async fn names(conn: &mut SqlConn, sql: &str) -> Vec<String> {
    conn.text_rows(sql)
        .await
        .into_iter()
        .map(|r| r[0].clone().expect("a name"))
        .collect()
}

/// Every table of the database at `url`.
pub async fn dump(url: &str) -> Dump {
    let mut conn = SqlConn::connect(url).await;
    let tables_sql = match conn {
        SqlConn::Sqlite(_) => {
            "SELECT name FROM sqlite_master WHERE type = 'table' \
             AND name NOT LIKE 'sqlite_%' ORDER BY name"
        }
        SqlConn::Postgres(_) => {
            "SELECT CAST(table_name AS TEXT) FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY 1"
        }
    };
    let mut out = BTreeMap::new();
    for table in names(&mut conn, tables_sql).await {
        let columns_sql = match conn {
            SqlConn::Sqlite(_) => {
                format!("SELECT name FROM pragma_table_info('{table}') ORDER BY cid")
            }
            SqlConn::Postgres(_) => format!(
                "SELECT CAST(column_name AS TEXT) FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND table_name = '{table}' \
                 ORDER BY ordinal_position"
            ),
        };
        let columns = names(&mut conn, &columns_sql).await;
        // Blobs (SQLite keeps migration checksums in them) as hex.
        let select: Vec<String> = columns
            .iter()
            .map(|c| match conn {
                SqlConn::Sqlite(_) => format!(
                    "CASE WHEN typeof(\"{c}\") = 'blob' THEN hex(\"{c}\") \
                     ELSE CAST(\"{c}\" AS TEXT) END"
                ),
                SqlConn::Postgres(_) => format!("CAST(\"{c}\" AS TEXT)"),
            })
            .collect();
        let order: Vec<String> = (1..=columns.len()).map(|i| i.to_string()).collect();
        let sql = format!(
            "SELECT {} FROM \"{table}\" ORDER BY {}",
            select.join(", "),
            order.join(", ")
        );
        let rows = conn.text_rows(&sql).await;
        out.insert(table, (columns, rows));
    }
    conn.close().await;
    Dump(out)
}

fn show(columns: &[String], row: &[Option<String>]) -> String {
    let cells: Vec<String> = columns
        .iter()
        .zip(row)
        .map(|(c, v)| {
            let v = v.as_deref().unwrap_or("NULL");
            let v: String = v.chars().take(80).collect();
            format!("{c}={v:?}")
        })
        .collect();
    cells.join(" ")
}

/// What changed between two dumps, table by table, except in `ignored`
/// tables: rows gone (or changed) and rows new (or changed), at most ten
/// of each per table.
pub fn differences(before: &Dump, after: &Dump, ignored: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    let tables: std::collections::BTreeSet<&String> =
        before.0.keys().chain(after.0.keys()).collect();
    for table in tables {
        if ignored.contains(&table.as_str()) {
            continue;
        }
        let (Some((columns, old)), Some((_, new))) = (before.0.get(table), after.0.get(table))
        else {
            out.push(format!("table {table} appeared or disappeared"));
            continue;
        };
        let (old_set, new_set): (HashSet<_>, HashSet<_>) =
            (old.iter().collect(), new.iter().collect());
        let gone: Vec<_> = old.iter().filter(|r| !new_set.contains(r)).collect();
        let added: Vec<_> = new.iter().filter(|r| !old_set.contains(r)).collect();
        if gone.is_empty() && added.is_empty() && old.len() == new.len() {
            continue;
        }
        out.push(format!(
            "table {table}: {} rows before, {} after",
            old.len(),
            new.len()
        ));
        for row in gone.iter().take(10) {
            out.push(format!("  - {}", show(columns, row)));
        }
        for row in added.iter().take(10) {
            out.push(format!("  + {}", show(columns, row)));
        }
    }
    out
}

/// The audit rows added since `before` that record something other than a
/// refusal (a denial, or a native status of 4xx), and audit rows changed.
pub fn audit_faults(before: &Dump, after: &Dump) -> Vec<String> {
    let (Some((columns, old)), Some((_, new))) =
        (before.0.get("tool_calls"), after.0.get("tool_calls"))
    else {
        return vec!["no tool_calls table".into()];
    };
    let col = |name: &str| columns.iter().position(|c| c == name).expect(name);
    let (decision, status) = (col("decision"), col("native_status"));
    let mut out = Vec::new();
    let (old_set, new_set): (HashSet<_>, HashSet<_>) = (old.iter().collect(), new.iter().collect());
    for row in old.iter().filter(|r| !new_set.contains(r)).take(10) {
        out.push(format!("tool_calls row changed: {}", show(columns, row)));
    }
    for row in new.iter().filter(|r| !old_set.contains(r)) {
        let denied = row[decision].as_deref() == Some("deny");
        let refused = row[status]
            .as_deref()
            .and_then(|s| s.parse::<u16>().ok())
            .is_some_and(|s| (400..500).contains(&s));
        if !denied && !refused {
            out.push(format!("tool_calls: not a refusal: {}", show(columns, row)));
        }
    }
    out
}
