//! The demo dataset `writ serve --demo` seeds into an empty database.

use super::admin::{self, NewRepoInput, NewTokenInput, NewUserInput, Setup};
use super::forms::{GrantForm, prepare_in};
use super::{Ctx, Result};
use crate::domain::access::Permission;
use crate::store::{principals, repos};

/// How to log in to the demo.
#[derive(Debug)]
pub struct DemoInfo {
    /// Human admin login.
    pub login: String,
    /// Its password.
    pub password: String,
    /// The bot's login.
    pub bot: String,
    /// A token of the bot (read:repository, write:issue).
    pub bot_token: String,
    /// The repository.
    pub repository: String,
    /// The prepared grant.
    pub grant_id: i64,
}

/// Seeds a human admin, a bot, a private repository and one prepared grant,
/// only when the database has no user at all.
pub async fn seed_if_empty(ctx: &Ctx) -> Result<Option<DemoInfo>> {
    let mut tx = ctx.store.read().await?;
    let users = principals::count_users(&mut tx).await?;
    tx.commit().await?;
    if users > 0 {
        return Ok(None);
    }
    let (login, password, bot) = ("alice", "writ-demo-password", "builder-bot");
    let human = |login: &str, pw: Option<&str>, kind: &str, is_admin| NewUserInput {
        login: login.into(),
        kind: kind.into(),
        password: pw.map(str::to_owned),
        is_admin: Some(is_admin),
    };
    admin::create_user(ctx, Setup::CLI, human(login, Some(password), "human", true)).await?;
    admin::create_user(ctx, Setup::CLI, human(bot, None, "bot", false)).await?;
    let repo = admin::create_repo(
        ctx,
        Setup::CLI,
        NewRepoInput {
            owner: login.into(),
            name: "tiny-tracker".into(),
            private: true,
            require_distinct_approver: Some(false),
        },
    )
    .await?;
    admin::set_collaborator(
        ctx,
        Setup::CLI,
        login,
        "tiny-tracker",
        bot,
        admin::CollaboratorInput {
            permission: "read".into(),
        },
    )
    .await?;
    let token = admin::create_token(
        ctx,
        Setup::CLI,
        bot,
        NewTokenInput {
            name: "demo".into(),
            scopes: vec!["read:repository".into(), "write:issue".into()],
            public_only: None,
            repositories: None,
        },
    )
    .await?;
    // The bot may call every MCP tool on alice's repositories, and list its
    // grants (a call that names no repository needs a grant with no `repos`).
    super::policy::put(
        ctx,
        Setup::CLI,
        bot,
        super::policy::ToolGrantsInput {
            grants: vec![
                super::policy::ToolGrantInput {
                    id: Some("demo".into()),
                    repos: vec![format!("{login}/*")],
                    tools: crate::domain::policy::TOOLS.map(str::to_owned).to_vec(),
                },
                super::policy::ToolGrantInput {
                    id: Some("demo-list".into()),
                    repos: vec![],
                    tools: vec!["list_agent_work_grants".into()],
                },
            ],
        },
        "demo",
    )
    .await?;
    let at = ctx.now();
    let input = GrantForm {
        agent: bot.into(),
        task: "Add a \"due date\" field to tasks, with a date picker and validation.".into(),
        summary: "Due dates for the tiny task tracker".into(),
        max_submissions: "3".into(),
        ..GrantForm::default()
    }
    .parse(at)?;
    let mut tx = ctx.store.write().await?;
    let issuer = principals::user_by_login(&mut tx, login)
        .await?
        .ok_or(super::Error::NotFound)?;
    let repo_row = repos::repo_by_id(&mut tx, repo.id)
        .await?
        .ok_or(super::Error::NotFound)?;
    let grant_id = prepare_in(&mut tx, issuer.id, &repo_row, Permission::Admin, &input, at).await?;
    tx.commit().await?;
    Ok(Some(DemoInfo {
        login: login.into(),
        password: password.into(),
        bot: bot.into(),
        bot_token: token.token,
        repository: repo.full_name,
        grant_id,
    }))
}
