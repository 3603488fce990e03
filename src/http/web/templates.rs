//! Compiled page templates (askama; HTML escaped by default).

use askama::Template;

use crate::domain::admission::Decision;

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
    pub rows: Vec<RowValues>,
}

/// One row of the requirement editor as shown.
#[derive(Debug, Default, Clone)]
pub struct RowValues {
    pub mcp_id: String,
    pub agent: String,
    pub requirement: String,
    pub capabilities: String,
    pub fallback: String,
    pub prohibited: String,
    pub prompt_context: String,
}

impl RowValues {
    /// An empty row with the safest defaults selected.
    pub fn blank() -> RowValues {
        RowValues {
            requirement: "required".into(),
            fallback: "block".into(),
            ..RowValues::default()
        }
    }
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
    pub sections: AdmissionSections,
    pub fs_nonce: Option<String>,
    pub fs_needed: Vec<(&'static str, bool)>,
    pub receipts: Vec<crate::service::view::SubmissionView>,
}

/// The admission preview split by the four questions a grant page answers.
#[derive(Debug, Default)]
pub struct AdmissionSections {
    /// Decisions that block.
    pub blockers: Vec<Decision>,
    /// 1. planning context only (grants nothing).
    pub planning: Vec<Decision>,
    /// 2. bounded project filesystem context.
    pub filesystem: Vec<Decision>,
    /// 3. missing or unhealthy MCPs.
    pub unhealthy: Vec<Decision>,
    /// 4. deferred live-MCP features.
    pub deferred: Vec<Decision>,
}

impl AdmissionSections {
    /// Splits a package's decisions; one decision may answer several questions.
    pub fn of(decisions: &[Decision]) -> AdmissionSections {
        use crate::domain::admission::decide::{Mode, Recovery, Status};
        let pick =
            |f: &dyn Fn(&Decision) -> bool| decisions.iter().filter(|d| f(d)).cloned().collect();
        AdmissionSections {
            blockers: pick(&|d| d.status == Status::Blocked),
            planning: pick(&|d| d.mode == Mode::PlanningOnly),
            // The sections below list what does not already stand under the
            // blockers, so no reason is shown twice.
            filesystem: pick(&|d| {
                d.grant_state.is_some()
                    && d.recovery_action != Recovery::InstallOrFixMcp
                    && d.status != Status::Blocked
            }),
            unhealthy: pick(&|d| {
                d.recovery_action == Recovery::InstallOrFixMcp && d.status != Status::Blocked
            }),
            deferred: pick(&|d| d.mode == Mode::DeferredLiveMcp && d.status != Status::Blocked),
        }
    }

    /// True when no decision needs attention.
    pub fn is_quiet(&self) -> bool {
        self.blockers.is_empty()
            && self.filesystem.is_empty()
            && self.unhealthy.is_empty()
            && self.deferred.is_empty()
    }
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

/// `/{owner}/{repo}/issues/{index}`
#[derive(Template)]
#[template(path = "issue.html")]
pub struct IssuePage {
    pub chrome: Chrome,
    pub issue: crate::service::view::IssueView,
}
