//! Compiled page templates (askama; HTML escaped by default).

use askama::Template;

use crate::domain::admission::Decision;
use crate::domain::time::Timestamp;
use crate::domain::words;

use crate::service::view::GrantView;

/// What every page's frame shows.
#[derive(Debug, Default)]
pub struct Chrome {
    /// The signed-in login.
    pub login: Option<String>,
    /// The signed-in person is a site administrator (the Admin link).
    pub is_admin: bool,
    /// Nonce of the logout form.
    pub logout_nonce: String,
    /// A banner (e.g. "this grant changed since you opened it").
    pub notice: Option<String>,
    /// Where this page stands, from the dashboard; the last is this page.
    pub crumbs: Vec<Crumb>,
}

impl Chrome {
    /// The frame of a page of repository `full_name`: its crumb, then
    /// `rest` (each `(href, label)`, this page last).
    pub fn in_repo(self, full_name: &str, rest: &[(&str, &str)]) -> Chrome {
        let home = format!("/{full_name}");
        let mut crumbs = vec![(home.as_str(), full_name)];
        crumbs.extend_from_slice(rest);
        self.at(&crumbs)
    }

    /// The frame with breadcrumbs: each `(href, label)`, this page last.
    pub fn at(mut self, crumbs: &[(&str, &str)]) -> Chrome {
        self.crumbs = crumbs
            .iter()
            .map(|(href, label)| Crumb {
                href: (*href).to_owned(),
                label: (*label).to_owned(),
            })
            .collect();
        self
    }
}

/// One step of the breadcrumbs.
#[derive(Debug, Clone)]
pub struct Crumb {
    pub href: String,
    pub label: String,
}

/// A time as people read it: relative, with the exact UTC time on hover.
#[derive(Template, Debug, Clone)]
#[template(
    source = r#"<time datetime="{{ iso }}" title="{{ exact }}">{{ relative }}</time>"#,
    ext = "html"
)]
pub struct When {
    iso: String,
    exact: String,
    relative: String,
}

impl When {
    /// A stored time (`2026-12-05T16:54:07.123456Z`) relative to `now`.
    pub fn of(stored: &str, now: Timestamp) -> When {
        match Timestamp::parse_text(stored) {
            Some(at) => When {
                iso: at.to_proposal_text(),
                exact: words::exact(at),
                relative: words::relative(at, now),
            },
            None => When {
                iso: String::new(),
                exact: String::new(),
                relative: stored.to_owned(),
            },
        }
    }
}

/// A badge and its sentence ([`words`]).
#[derive(Debug, Clone)]
pub struct Said {
    pub badge: &'static str,
    pub tone: &'static str,
    pub sentence: String,
}

impl From<words::Words> for Said {
    fn from(w: words::Words) -> Said {
        Said {
            badge: w.badge,
            tone: w.tone,
            sentence: w.sentence,
        }
    }
}

/// A grant in a list: where, who, what, its state in words.
#[derive(Debug, Clone)]
pub struct GrantCard {
    pub id: i64,
    pub href: String,
    pub repository: String,
    pub agent: String,
    pub issuer: String,
    /// The proposal's summary (or the start of its task).
    pub title: String,
    pub state: &'static str,
    pub said: Said,
    pub updated: When,
    /// Why the admission blocks it, when it does.
    pub blocked: Option<String>,
    /// Its latest receipts, newest first.
    pub receipts: Vec<ReceiptLine>,
}

/// A receipt in a list: the issue it filed, its outcome in words.
#[derive(Debug, Clone)]
pub struct ReceiptLine {
    /// `submitted`, `issue_deleted` or `issue_binding_changed`.
    pub status: &'static str,
    pub issue_href: String,
    pub issue_label: String,
    pub said: Said,
    pub at: When,
}

/// A dashboard section: how many, the first few, a link to the rest.
#[derive(Debug, Clone)]
pub struct Section {
    pub id: &'static str,
    pub title: &'static str,
    pub total: i64,
    pub cards: Vec<GrantCard>,
    /// There are more than the cards shown.
    pub more: bool,
    /// Said when the section is empty.
    pub empty: &'static str,
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
    /// Needs me, waits on an agent, active, recently finished.
    pub sections: Vec<Section>,
    /// No grant in any section.
    pub nothing_yet: bool,
    /// The prepare page of the first repository the person may write to.
    pub prepare_href: Option<String>,
    pub repos: Vec<RepoLine>,
}

/// A repository in a list, with the person's role on it.
#[derive(Debug, Clone)]
pub struct RepoLine {
    pub full_name: String,
    pub private: bool,
    /// `owner`, `admin`, `write` or `read`.
    pub role: &'static str,
}

/// `/repositories`
#[derive(Template)]
#[template(path = "repositories.html")]
pub struct RepositoriesPage {
    pub chrome: Chrome,
    pub repos: Vec<RepoLine>,
}

/// `/{owner}/{repo}` and `/{owner}/{repo}/agent-work-grants`
#[derive(Template)]
#[template(path = "repo_grants.html")]
pub struct RepoGrantsPage {
    pub chrome: Chrome,
    pub full_name: String,
    pub can_prepare: bool,
    pub is_admin: bool,
    pub states: Vec<(&'static str, &'static str)>,
    pub state: String,
    pub total: i64,
    pub cards: Vec<GrantCard>,
    pub page: u64,
    pub last_page: u64,
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
    /// The state in words.
    pub said: Said,
    pub summary: String,
    pub task: String,
    pub max_submissions: i64,
    pub expires: Option<When>,
    pub expired: bool,
    pub created: When,
    /// Each MCP requirement in words with its admission outcome.
    pub reach: Vec<ReachLine>,
    /// What approving does, in one sentence (while it can be approved).
    pub approving_does: Option<String>,
    pub timeline: Vec<TimelineLine>,
    pub receipts: Vec<ReceiptRow>,
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
}

/// One MCP requirement in words, with its admission outcome.
#[derive(Debug, Clone)]
pub struct ReachLine {
    pub badge: &'static str,
    pub tone: &'static str,
    /// "reviewer needs filesystem (filesystem.project.read)"
    pub what: String,
    /// The outcome's headline.
    pub headline: &'static str,
}

/// A timeline entry in words.
#[derive(Debug, Clone)]
pub struct TimelineLine {
    pub sentence: String,
    pub at: When,
    pub revision: i64,
}

/// A receipt on the grant page.
#[derive(Debug, Clone)]
pub struct ReceiptRow {
    pub line: ReceiptLine,
    pub request_key: String,
    /// The handoff admission's status and evaluation.
    pub admission: Option<String>,
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

/// `/admin`
#[derive(Template)]
#[template(path = "admin.html")]
pub struct AdminPage {
    pub chrome: Chrome,
}

/// `/admin/tool-grants`: each bot's MCP tool grants, read only.
#[derive(Template)]
#[template(path = "admin_tool_grants.html")]
pub struct ToolGrantsPage {
    pub chrome: Chrome,
    pub bots: Vec<crate::service::policy::ToolGrantsView>,
}

/// `/admin/webhooks`: each subscription and its latest deliveries.
#[derive(Template)]
#[template(path = "admin_webhooks.html")]
pub struct WebhooksPage {
    pub chrome: Chrome,
    pub hooks: Vec<WebhookCard>,
}

/// One subscription on `/admin/webhooks`.
pub struct WebhookCard {
    pub subscription: crate::service::webhooks::SubscriptionView,
    pub deliveries: Vec<crate::service::webhooks::DeliveryView>,
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
    pub created: When,
    pub issue: crate::service::view::IssueView,
}
