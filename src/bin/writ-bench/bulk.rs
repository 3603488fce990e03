//! `--bulk-grants N`: N more grants in the server's database, for the bar
//! "server RSS under the bench at 100k grants". Preparing 100k grants through
//! the browser forms would take most of an hour, so they are copied in SQL
//! from the fixture's grants (after the fixture is built through the real
//! code paths): each copy belongs to one of the bench bots, on its
//! repository, `awaiting_agent`, so the bots' list pages (and their counts,
//! kept by the schema's triggers) run over them. The bench's own active
//! grants are untouched.

use std::time::Instant;

use sqlx::Connection;

use crate::target::{Engine, Target};

/// The copies, spread round-robin over the grants that exist now.
const COPY: &str = "WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i + 1 < $1), \
     src AS (SELECT id, ROW_NUMBER() OVER (ORDER BY id) - 1 AS k, COUNT(*) OVER () AS n FROM grants) \
     INSERT INTO grants (repository_id, agent_id, issuer_id, state, state_revision, proposal, \
     proposal_digest, max_submissions, expires_at, submission_count, created_at, updated_at) \
     SELECT g.repository_id, g.agent_id, g.issuer_id, 'awaiting_agent', 1, g.proposal, \
     g.proposal_digest, g.max_submissions, g.expires_at, 0, g.created_at, g.updated_at \
     FROM seq JOIN src ON src.k = seq.i % src.n JOIN grants g ON g.id = src.id";

/// Adds `count` grants (nothing for 0); returns how many grants there are.
pub async fn add_grants(target: &Target, count: usize) -> anyhow::Result<i64> {
    let began = Instant::now();
    let count = i64::try_from(count)?;
    let total: (i64,) = match target.engine {
        Engine::Sqlite => {
            let mut conn = sqlx::SqliteConnection::connect(&target.server_url).await?;
            if count > 0 {
                sqlx::query(COPY).bind(count).execute(&mut conn).await?;
            }
            sqlx::query_as("SELECT COUNT(*) FROM grants")
                .fetch_one(&mut conn)
                .await?
        }
        Engine::Postgres => {
            let mut conn = sqlx::PgConnection::connect(&target.server_url).await?;
            if count > 0 {
                sqlx::query(COPY).bind(count).execute(&mut conn).await?;
                // What autovacuum does after such a load (PostgreSQL 13+
                // vacuums a table that only grew): the visibility map and
                // statistics of the tables the copy filled. Without the
                // map an index-only scan costs a heap visit per entry, and
                // the list pages' generic plans walk the primary key
                // instead of `(agent_id, state, id)`. Not the other tables:
                // analyzed at their fixture size (a handful of evaluations,
                // receipts, audit records), PostgreSQL would take them for
                // tiny while the run grows them, and plans cached from then
                // on would scan them whole (docs/performance.md, the harness).
                sqlx::query("VACUUM (ANALYZE) grants, grant_counts")
                    .execute(&mut conn)
                    .await?;
            }
            sqlx::query_as("SELECT COUNT(*) FROM grants")
                .fetch_one(&mut conn)
                .await?
        }
    };
    if count > 0 {
        eprintln!(
            "writ-bench: {count} grants copied in {:.1} s ({} in all)",
            began.elapsed().as_secs_f64(),
            total.0
        );
    }
    Ok(total.0)
}
