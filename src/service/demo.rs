//! The demo dataset `writ serve --demo` seeds into an empty database: a
//! grant in every state, made through the same use cases people and bots
//! use (the bots confirm and submit with their tokens, alice approves and
//! withdraws through a signed-in session and the forms' nonces), so the
//! audit records, timelines and receipts are the real ones.

use super::admin::{self, NewRepoInput, NewTokenInput, NewUserInput, Setup};
use super::agent::{self, Triple};
use super::auth::{self, Caller, Credential};
use super::forms::{self, FormTarget, GrantForm, prepare_in};
use super::sessions::{self, WebSession};
use super::submit::{self, SubmitInput};
use super::{Ctx, Error, Result};
use crate::domain::access::Permission;
use crate::domain::ids::{Digest, GrantId, RequestKey};
use crate::store::{principals, repos};

/// The human who signs in to the demo (a site admin, owner of the repository).
pub const LOGIN: &str = "alice";
/// Her password.
pub const PASSWORD: &str = "writ-demo-password";
/// The demo repository's owner and name.
pub const REPO: (&str, &str) = (LOGIN, "tiny-tracker");

/// A bot of the demo and its token.
#[derive(Debug)]
pub struct DemoBot {
    /// Login.
    pub login: String,
    /// A token (read:repository, write:issue).
    pub token: String,
}

/// The demo's grants, one per state.
#[derive(Debug)]
pub struct DemoGrants {
    /// Waits for builder-bot's confirmation.
    pub awaiting_agent: i64,
    /// The digest builder-bot must confirm it with.
    pub awaiting_agent_digest: String,
    /// Confirmed; the admission allows its approval.
    pub awaiting_approval: i64,
    /// Confirmed; blocked until project filesystem context is approved.
    pub blocked: i64,
    /// Approved, with two receipts.
    pub active: i64,
    /// Withdrawn with a reason.
    pub withdrawn: i64,
}

/// What the demo holds and how to use it.
#[derive(Debug)]
pub struct DemoInfo {
    /// Human admin login.
    pub login: String,
    /// Its password.
    pub password: String,
    /// `builder-bot` and `review-bot`.
    pub bots: Vec<DemoBot>,
    /// `owner/name`.
    pub repository: String,
    /// The grants.
    pub grants: DemoGrants,
}

impl DemoInfo {
    /// What `serve --demo` prints after seeding: where to log in, what each
    /// grant shows, and the bot's next step, ready to paste.
    pub fn guide(&self, base: &str) -> String {
        let info = self;
        let g = &info.grants;
        let repo = &info.repository;
        let builder = &info.bots[0];
        let bots: Vec<String> = info
            .bots
            .iter()
            .map(|b| format!("  {} token: {}", b.login, b.token))
            .collect();
        format!(
            "Demo dataset created.\n\
             \n\
             Open {base}/ and log in as {login} / {password}. {repo} has a grant in every state:\n\
             \x20 #{a}  waits for {bot} to confirm it\n\
             \x20 #{h}  waits for your approval; the admission allows it\n\
             \x20 #{b}  waits for your approval; blocked until you approve project filesystem context\n\
             \x20 #{act}  is active, with two receipts and their issues\n\
             \x20 #{w}  was withdrawn, with a reason\n\
             \n\
             Bots (read access to {repo}; every MCP tool on {login}/*):\n\
             {bots}\n\
             \n\
             {bot}'s next step, confirming grant #{a} over the API:\n\
             \x20 curl -sS -X POST {base}/api/v1/repos/{repo}/agent-work-grants/{a}/confirm \\\n\
             \x20   -H 'Authorization: Bearer {token}' -H 'Content-Type: application/json' \\\n\
             \x20   -d '{{\"proposal_schema\":\"agent_work_grant.v1\",\"proposal_version\":1,\"proposal_digest\":\"{digest}\"}}'\n\
             \n\
             or through MCP: give an MCP client the stdio adapter as a server\n\
             \x20 WRIT_TOKEN={token} writ mcp-stdio --url {base}\n\
             and ask it to call confirm_agent_work_grant with owner \"{owner}\", repo \"{name}\", grant_id {a},\n\
             proposal_schema \"agent_work_grant.v1\", proposal_version 1, proposal_digest \"{digest}\"\n\
             (the streamable HTTP endpoint is {base}/mcp, with the same token).",
            login = info.login,
            password = info.password,
            a = g.awaiting_agent,
            h = g.awaiting_approval,
            b = g.blocked,
            act = g.active,
            w = g.withdrawn,
            bot = builder.login,
            bots = bots.join("\n"),
            token = builder.token,
            digest = g.awaiting_agent_digest,
            owner = REPO.0,
            name = REPO.1,
        )
    }
}

/// Seeds the demo, only when the database has no user at all.
pub async fn seed_if_empty(ctx: &Ctx) -> Result<Option<DemoInfo>> {
    let mut tx = ctx.store.read().await?;
    let users = principals::count_users(&mut tx).await?;
    tx.commit().await?;
    if users > 0 {
        return Ok(None);
    }
    let (owner, name) = REPO;
    let user = |login: &str, pw: Option<&str>, kind: &str, is_admin| NewUserInput {
        login: login.into(),
        kind: kind.into(),
        password: pw.map(str::to_owned),
        is_admin: Some(is_admin),
    };
    admin::create_user(ctx, Setup::CLI, user(LOGIN, Some(PASSWORD), "human", true)).await?;
    let repo = admin::create_repo(
        ctx,
        Setup::CLI,
        NewRepoInput {
            owner: owner.into(),
            name: name.into(),
            private: true,
            require_distinct_approver: Some(false),
        },
    )
    .await?;
    // The filesystem MCP is installed and healthy, so the blocked grant
    // waits only for alice's approval of project filesystem context.
    super::health::set(
        ctx,
        Setup::CLI,
        "filesystem",
        super::health::HealthInput {
            installed: true,
            healthy: true,
            detail: "demo: set healthy by serve --demo".into(),
        },
        "demo",
    )
    .await?;
    // A disabled webhook subscription, so /admin/webhooks shows how one
    // looks; its host ends in `.invalid`, so it is never resolved or called.
    super::webhooks::create(
        ctx,
        Setup::CLI,
        super::webhooks::SubscriptionInput {
            url: "https://hooks.example.invalid/writ".into(),
            types: vec!["grant.*".into(), "submission.created".into()],
            repos: vec![format!("{owner}/*")],
            format: None,
            description: Some("Example: a review queue (disabled)".into()),
            enabled: Some(false),
        },
    )
    .await?;
    let mut bots = Vec::new();
    for login in ["builder-bot", "review-bot"] {
        bots.push(seed_bot(ctx, login).await?);
    }
    let callers = [
        bot_caller(ctx, &bots[0]).await?,
        bot_caller(ctx, &bots[1]).await?,
    ];
    let [builder, reviewer] = &callers;
    let alice = sign_in(ctx).await?;

    let awaiting_agent = prepare(
        ctx,
        &bots[0].login,
        "Add a \"due date\" field to tasks: a date picker on the task form, \
         validation (not in the past), and the date shown in the task list.",
        "Due dates for the tiny task tracker",
        "3",
        "",
    )
    .await?;
    let awaiting_agent_digest = read(ctx, builder, awaiting_agent).await?.proposal_digest;

    let awaiting_approval = prepare(
        ctx,
        &bots[1].login,
        "Go through the open bug reports, group the duplicates, and file one \
         issue per group that links the reports it replaces.",
        "Group duplicate bug reports",
        "5",
        "",
    )
    .await?;
    confirm(ctx, reviewer, awaiting_approval).await?;

    let blocked = prepare(
        ctx,
        &bots[0].login,
        "Read the project's source and write a CONTRIBUTING guide: how to \
         build, test and submit a change. File it as one issue for review.",
        "A CONTRIBUTING guide written from the code",
        "1",
        r#"[{"mcp_id":"filesystem","agent":"reader","requirement":"required",
            "capabilities":["filesystem.project.read","filesystem.project.search"],
            "fallback":"block"}]"#,
    )
    .await?;
    confirm(ctx, builder, blocked).await?;

    let active = prepare(
        ctx,
        &bots[0].login,
        "Check the task list page for accessibility problems (labels, \
         contrast, keyboard focus) and file one issue per problem found.",
        "Accessibility review of the task list",
        "3",
        "",
    )
    .await?;
    confirm(ctx, builder, active).await?;
    approve(ctx, &alice, active).await?;
    for (key, title, body) in [
        (
            "3f0c6b1e-8a7d-4c2b-9e5f-0a1b2c3d4e5f",
            "The \"done\" checkbox has no label",
            "Screen readers announce the checkbox of each task as \"checkbox, \
             not checked\" without the task's name. Give each one an \
             aria-label or a <label> naming its task.",
        ),
        (
            "7b2d9e4f-1c3a-4d5e-8f6a-9b0c1d2e3f4a",
            "Grey due dates fail contrast",
            "The due date under each task is #aaa on white (2.3:1); WCAG AA \
             asks 4.5:1 for text of that size. #595959 passes.",
        ),
    ] {
        let triple = triple_of(ctx, builder, active).await?;
        let input = SubmitInput::new(triple, RequestKey::parse(key)?, title.into(), body.into())?;
        submit::submit(ctx, builder, owner, name, GrantId(active), &input).await?;
    }

    let withdrawn = prepare(
        ctx,
        &bots[1].login,
        "Rename \"todo\" to \"task\" everywhere in the code and the UI text.",
        "Rename todo to task",
        "2",
        "",
    )
    .await?;
    confirm(ctx, reviewer, withdrawn).await?;
    let revision = revision_of(ctx, withdrawn).await?;
    let nonce = nonce(ctx, &alice, "withdraw", withdrawn).await?;
    forms::withdraw(
        ctx,
        &alice,
        target(&nonce, withdrawn, revision),
        "Done by hand in the meantime; no agent needed.",
    )
    .await?;

    Ok(Some(DemoInfo {
        login: LOGIN.into(),
        password: PASSWORD.into(),
        bots,
        repository: repo.full_name,
        grants: DemoGrants {
            awaiting_agent,
            awaiting_agent_digest,
            awaiting_approval,
            blocked,
            active,
            withdrawn,
        },
    }))
}

/// A bot with read access to the repository, a token, and MCP tool grants
/// on alice's repositories (plus listing its grants, a call that names no
/// repository).
async fn seed_bot(ctx: &Ctx, login: &str) -> Result<DemoBot> {
    let (owner, name) = REPO;
    admin::create_user(
        ctx,
        Setup::CLI,
        NewUserInput {
            login: login.into(),
            kind: "bot".into(),
            password: None,
            is_admin: Some(false),
        },
    )
    .await?;
    admin::set_collaborator(
        ctx,
        Setup::CLI,
        owner,
        name,
        login,
        admin::CollaboratorInput {
            permission: "read".into(),
        },
    )
    .await?;
    let token = admin::create_token(
        ctx,
        Setup::CLI,
        login,
        NewTokenInput {
            name: "demo".into(),
            scopes: vec!["read:repository".into(), "write:issue".into()],
            public_only: None,
            repositories: None,
        },
    )
    .await?;
    super::policy::put(
        ctx,
        Setup::CLI,
        login,
        super::policy::ToolGrantsInput {
            grants: vec![
                super::policy::ToolGrantInput {
                    id: Some("demo".into()),
                    repos: vec![format!("{owner}/*")],
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
    Ok(DemoBot {
        login: login.into(),
        token: token.token,
    })
}

async fn bot_caller(ctx: &Ctx, bot: &DemoBot) -> Result<Caller> {
    auth::authenticate(ctx, Credential::Token(&bot.token)).await
}

/// Alice's signed-in session, through the login form's own path.
async fn sign_in(ctx: &Ctx) -> Result<WebSession> {
    const HERE: &str = "127.0.0.1";
    let (pre, _, nonce) = sessions::start_anonymous(ctx, HERE).await?;
    let cookie = match sessions::login(ctx, &pre, &nonce, LOGIN, PASSWORD, HERE).await? {
        Ok(cookie) => cookie,
        Err(_) => return Err(Error::Forbidden("the demo's login was refused")),
    };
    sessions::resolve(ctx, &cookie.0)
        .await?
        .ok_or(Error::Forbidden("the demo's session did not resolve"))
}

/// Prepares a grant as alice, as the prepare form does.
async fn prepare(
    ctx: &Ctx,
    agent: &str,
    task: &str,
    summary: &str,
    max_submissions: &str,
    mcp_requirements: &str,
) -> Result<i64> {
    let at = ctx.now();
    let input = GrantForm {
        agent: agent.into(),
        task: task.into(),
        summary: summary.into(),
        max_submissions: max_submissions.into(),
        mcp_requirements: mcp_requirements.into(),
        ..GrantForm::default()
    }
    .parse(at)?;
    let mut tx = ctx.store.write().await?;
    let issuer = principals::user_by_login(&mut tx, LOGIN)
        .await?
        .ok_or(Error::NotFound)?;
    let repo = repos::repo_by_name(&mut tx, REPO.0, REPO.1)
        .await?
        .ok_or(Error::NotFound)?;
    let id = prepare_in(&mut tx, issuer.id, &repo, Permission::Admin, &input, at).await?;
    tx.commit().await?;
    Ok(id)
}

async fn read(ctx: &Ctx, bot: &Caller, id: i64) -> Result<super::view::GrantView> {
    agent::get(ctx, bot, REPO.0, REPO.1, GrantId(id)).await
}

async fn triple_of(ctx: &Ctx, bot: &Caller, id: i64) -> Result<Triple> {
    let digest = read(ctx, bot, id).await?.proposal_digest;
    Ok(Triple {
        digest: Digest::parse(&digest)?,
    })
}

async fn confirm(ctx: &Ctx, bot: &Caller, id: i64) -> Result<()> {
    let triple = triple_of(ctx, bot, id).await?;
    agent::confirm(ctx, bot, REPO.0, REPO.1, GrantId(id), &triple).await?;
    Ok(())
}

async fn nonce(ctx: &Ctx, alice: &WebSession, action: &str, id: i64) -> Result<String> {
    Ok(
        sessions::issue_nonces(ctx, alice.id, &[(action, format!("grant:{id}"))])
            .await?
            .remove(0),
    )
}

fn target(nonce: &str, id: i64, revision: i64) -> FormTarget<'_> {
    FormTarget {
        nonce,
        owner: REPO.0,
        repo: REPO.1,
        id: GrantId(id),
        revision,
    }
}

/// The revision a person's form would display.
async fn revision_of(ctx: &Ctx, id: i64) -> Result<i64> {
    let mut tx = ctx.store.read().await?;
    let revision = crate::store::grants::grant_by_id(&mut tx, id)
        .await?
        .ok_or(Error::NotFound)?
        .state_revision;
    tx.commit().await?;
    Ok(revision)
}

async fn approve(ctx: &Ctx, alice: &WebSession, id: i64) -> Result<()> {
    let revision = revision_of(ctx, id).await?;
    let nonce = nonce(ctx, alice, "approve", id).await?;
    forms::approve(ctx, alice, target(&nonce, id, revision), false).await
}
