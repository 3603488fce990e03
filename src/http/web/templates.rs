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
    pub admission: crate::service::admission::PackageView,
    pub viewer_is_admin: bool,
}

/// `/{owner}/{repo}/settings/filesystem-context`
#[derive(Template)]
#[template(path = "fs_context.html")]
pub struct FsContextPage {
    pub chrome: Chrome,
    pub full_name: String,
    pub current: String,
    pub capabilities: Vec<(&'static str, bool)>,
    pub history: Vec<crate::store::admission::FsChangeRow>,
    pub nonce: String,
    pub error: Option<String>,
}

/// `/admin/mcp`
#[derive(Template)]
#[template(path = "admin_mcp.html")]
pub struct AdminMcpPage {
    pub chrome: Chrome,
    pub report: crate::service::health::HealthReport,
    pub catalog_text: String,
}

/// The call to action of a decision's recovery, in words for people.
pub fn recovery_text(d: &crate::domain::admission::Decision) -> &'static str {
    use crate::domain::admission::decide::Recovery;
    match d.recovery_action {
        Recovery::ContinueAsPromptContext => "Nothing: it is used as planning context only.",
        Recovery::ApproveProjectFilesystemContext => {
            "A repository admin approves project filesystem context."
        }
        Recovery::InstallOrFixMcp => "An operator installs or fixes the MCP, then retries.",
        Recovery::RevisePlan => "Revise the plan (edit the grant's MCP requirements).",
        Recovery::DeferLiveMcpFeature => {
            "Nothing: this live MCP feature is not available in this version; the work goes on without it."
        }
    }
}

/// True when the recovery is approving project filesystem context.
pub fn recovery_is_fs(d: &crate::domain::admission::Decision) -> bool {
    d.recovery_action == crate::domain::admission::decide::Recovery::ApproveProjectFilesystemContext
}
