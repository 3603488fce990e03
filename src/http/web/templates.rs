//! Compiled page templates (askama; HTML escaped by default).

use askama::Template;

use crate::service::view::GrantView;
use crate::store::grants::GrantEventRow;
use crate::store::repos::RepoRow;

/// What every page's frame shows.
#[derive(Debug, Default)]
pub struct Chrome {
    /// The signed-in login.
    pub login: Option<String>,
    /// Nonce of the logout form.
    pub logout_nonce: String,
    /// A banner (e.g. "this grant changed since you opened it").
    pub notice: Option<String>,
}

/// `/user/login`
#[derive(Template)]
#[template(path = "login.html")]
pub struct LoginPage {
    pub chrome: Chrome,
    pub nonce: String,
    pub login: String,
}

/// Any refusal or missing page.
#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorPage {
    pub chrome: Chrome,
    pub heading: String,
    pub message: String,
}

/// `/`
#[derive(Template)]
#[template(path = "dashboard.html")]
pub struct DashboardPage {
    pub chrome: Chrome,
    pub awaiting_me: Vec<GrantView>,
    pub issued: Vec<GrantView>,
    pub repos: Vec<RepoRow>,
}

/// `/{owner}/{repo}/agent-work-grants`
#[derive(Template)]
#[template(path = "repo_grants.html")]
pub struct RepoGrantsPage {
    pub chrome: Chrome,
    pub full_name: String,
    pub can_prepare: bool,
    pub states: Vec<(&'static str, &'static str)>,
    pub state: String,
    pub total: i64,
    pub grants: Vec<GrantView>,
    pub prev_page: Option<u64>,
    pub next_page: Option<u64>,
}

/// The prepare/edit fields as shown in a form.
#[derive(Debug, Default, Clone)]
pub struct FieldValues {
    pub agent: String,
    pub task: String,
    pub summary: String,
    pub max_submissions: String,
    pub expires_at: String,
    pub mcp_requirements: String,
}

/// `/{owner}/{repo}/agent-work-grants/new`
#[derive(Template)]
#[template(path = "grant_new.html")]
pub struct NewGrantPage {
    pub chrome: Chrome,
    pub full_name: String,
    pub nonce: String,
    pub bots: Vec<String>,
    pub fields: FieldValues,
    pub error: Option<String>,
}

/// `/{owner}/{repo}/agent-work-grants/{id}`
#[derive(Template)]
#[template(path = "grant.html")]
pub struct GrantPage {
    pub chrome: Chrome,
    pub grant: GrantView,
    pub max_submissions: i64,
    pub events: Vec<GrantEventRow>,
    pub proposal_pretty: String,
    pub edit_nonce: Option<String>,
    pub approve_nonce: Option<String>,
    pub withdraw_nonce: Option<String>,
    pub approve_blocked_reason: Option<&'static str>,
    pub bots: Vec<String>,
    pub fields: FieldValues,
}
