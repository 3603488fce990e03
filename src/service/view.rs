//! The JSON shapes clients see, built from stored rows.

use serde::Serialize;
use serde_json::value::RawValue;
use utoipa::ToSchema;

use crate::domain::proposal::{SCHEMA, VERSION};
use crate::store::grants::GrantRow;
use crate::store::principals::UserRow;
use crate::store::repos::RepoRow;

/// `{id, login}` of a user.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct UserRef {
    /// User id.
    pub id: i64,
    /// Login.
    pub login: String,
}

/// A repository as grant JSON shows it.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct RepoView {
    /// Repository id.
    pub id: i64,
    /// Owner login.
    pub owner: String,
    /// Repository name.
    pub name: String,
    /// `owner/name`.
    pub full_name: String,
    /// Private repositories are readable only by owner and collaborators.
    pub private: bool,
}

impl RepoView {
    /// From a stored repository.
    pub fn from_row(r: &RepoRow) -> RepoView {
        RepoView {
            id: r.id,
            owner: r.owner_login.clone(),
            name: r.name.clone(),
            full_name: r.full_name(),
            private: r.private,
        }
    }
}

/// Summary of the latest persisted admission evaluation.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AdmissionSummary {
    /// Evaluation id.
    pub evaluation_id: i64,
    /// `approval` or `handoff`.
    pub phase: String,
    /// `allowed`, `warning` or `blocked`.
    pub status: String,
    /// Health snapshot the evaluation used.
    pub snapshot_id: i64,
    /// When it was evaluated.
    pub evaluated_at: String,
}

/// The `grant` object of every grant response.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GrantView {
    /// Grant id.
    pub id: i64,
    /// The repository the work targets.
    pub repository: RepoView,
    /// The bot that may do the work.
    pub agent: UserRef,
    /// The human who prepared it.
    pub issuer: UserRef,
    /// The human who approved it.
    pub approver: Option<UserRef>,
    /// `awaiting_agent`, `awaiting_human`, `active` or `revoked`.
    pub state: String,
    /// Compare-and-swap counter of browser forms.
    pub state_revision: i64,
    /// Always `agent_work_grant.v1`.
    pub proposal_schema: &'static str,
    /// Always 1.
    pub proposal_version: i64,
    /// Lowercase hex SHA-256 of the proposal's RFC 8785 canonical JSON.
    pub proposal_digest: String,
    /// The exact object the digest covers.
    #[schema(value_type = Object)]
    pub proposal: Box<RawValue>,
    /// Receipts so far.
    pub submission_count: i64,
    /// Creation time.
    pub created_at: String,
    /// Last change.
    pub updated_at: String,
    /// When the agent confirmed the current proposal.
    pub confirmed_at: Option<String>,
    /// When a human approved it.
    pub approved_at: Option<String>,
    /// When it was withdrawn.
    pub revoked_at: Option<String>,
    /// Who withdrew it.
    pub revoked_by: Option<UserRef>,
    /// Why, as written by that person.
    pub revoke_reason: Option<String>,
    /// Latest persisted admission evaluation.
    pub admission: Option<AdmissionSummary>,
    /// The grant's page, where a person reviews, approves or withdraws it
    /// (on the configured public URL).
    pub html_url: String,
}

impl GrantView {
    /// From a stored grant, its page on the public URL `base` (no trailing
    /// slash); fails only if the stored proposal is not JSON.
    pub fn from_row(g: &GrantRow, base: &str) -> anyhow::Result<GrantView> {
        let user = |id: Option<i64>, login: &Option<String>| match (id, login) {
            (Some(id), Some(login)) => Some(UserRef {
                id,
                login: login.clone(),
            }),
            _ => None,
        };
        Ok(GrantView {
            id: g.id,
            repository: RepoView {
                id: g.repository_id,
                owner: g.repo_owner.clone(),
                name: g.repo_name.clone(),
                full_name: format!("{}/{}", g.repo_owner, g.repo_name),
                private: g.repo_private,
            },
            agent: UserRef {
                id: g.agent_id,
                login: g.agent_login.clone(),
            },
            issuer: UserRef {
                id: g.issuer_id,
                login: g.issuer_login.clone(),
            },
            approver: user(g.approver_id, &g.approver_login),
            state: g.state.clone(),
            state_revision: g.state_revision,
            proposal_schema: SCHEMA,
            proposal_version: VERSION,
            proposal_digest: g.proposal_digest.clone(),
            proposal: RawValue::from_string(g.proposal.clone())?,
            submission_count: g.submission_count,
            created_at: g.created_at.clone(),
            updated_at: g.updated_at.clone(),
            confirmed_at: g.confirmed_at.clone(),
            approved_at: g.approved_at.clone(),
            revoked_at: g.revoked_at.clone(),
            revoked_by: user(g.revoked_by, &g.revoked_by_login),
            revoke_reason: g.revoke_reason.clone(),
            admission: match (
                &g.admission_id,
                &g.admission_phase,
                &g.admission_status,
                &g.admission_snapshot_id,
                &g.admission_evaluated_at,
            ) {
                (Some(id), Some(phase), Some(status), Some(snapshot), Some(at)) => {
                    Some(AdmissionSummary {
                        evaluation_id: *id,
                        phase: phase.clone(),
                        status: status.clone(),
                        snapshot_id: *snapshot,
                        evaluated_at: at.clone(),
                    })
                }
                _ => None,
            },
            html_url: format!(
                "{base}/{}/{}/agent-work-grants/{}",
                g.repo_owner, g.repo_name, g.id
            ),
        })
    }
}

/// A user as the admin API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UserView {
    /// User id.
    pub id: i64,
    /// Login.
    pub login: String,
    /// `human` or `bot`.
    pub kind: String,
    /// Site administrator.
    pub is_admin: bool,
    /// Creation time.
    pub created_at: String,
}

impl UserView {
    /// From a stored user.
    pub fn from_row(u: &UserRow) -> UserView {
        UserView {
            id: u.id,
            login: u.login.clone(),
            kind: u.kind.clone(),
            is_admin: u.is_admin,
            created_at: u.created_at.clone(),
        }
    }
}

/// A repository as the admin API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RepoAdminView {
    /// Repository id.
    pub id: i64,
    /// Owner login.
    pub owner: String,
    /// Name.
    pub name: String,
    /// `owner/name`.
    pub full_name: String,
    /// Private or public.
    pub private: bool,
    /// The approver must not be the issuer.
    pub require_distinct_approver: bool,
}

/// A freshly created token, shown this once.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct NewTokenView {
    /// Token id.
    pub id: i64,
    /// Name.
    pub name: String,
    /// Granted scopes.
    pub scopes: Vec<String>,
    /// The token text; stored only as its SHA-256.
    pub token: String,
}

/// `{id, full_name}` of a repository as a receipt committed it.
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct RepoRef {
    /// Repository id.
    pub id: i64,
    /// `owner/name` at commit time.
    pub full_name: String,
}

/// The issue a receipt points at, as committed (historical).
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct IssueRef {
    /// Issue id.
    pub id: i64,
    /// Per-repository index.
    pub index: i64,
    /// URL at commit time.
    pub url: String,
    /// Repository at commit time.
    pub repository: RepoRef,
}

/// The handoff admission a receipt was admitted under.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ReceiptAdmission {
    /// Evaluation id.
    pub evaluation_id: i64,
    /// Always `handoff`.
    pub phase: String,
    /// `allowed` or `warning`.
    pub status: String,
    /// Health snapshot used.
    pub snapshot_id: i64,
}

/// The `submission` object of submit and readback.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SubmissionView {
    /// The grant.
    pub grant_id: i64,
    /// The bot's idempotency key.
    pub request_key: String,
    /// `submitted`, `issue_deleted` or `issue_binding_changed`.
    pub status: &'static str,
    /// Always `awaiting_review`: a receipt is not a human's acceptance.
    pub review_state: &'static str,
    /// SHA-256 of the canonical `{proposal_digest, title, body}`.
    pub content_digest: String,
    /// The issue as committed.
    pub issue: IssueRef,
    /// The bot that submitted.
    pub agent: UserRef,
    /// The handoff admission evaluation.
    pub admission: Option<ReceiptAdmission>,
    /// Commit time.
    pub created_at: String,
}

impl SubmissionView {
    /// From a stored receipt and where its issue is now.
    pub fn from_row(s: &crate::store::issues::SubmissionRow) -> SubmissionView {
        use crate::domain::submission::receipt_status;
        let current = s.current_repository_id.zip(s.current_index);
        SubmissionView {
            grant_id: s.grant_id,
            request_key: s.request_key.clone(),
            status: receipt_status((s.repository_id, s.issue_index), current).as_str(),
            review_state: "awaiting_review",
            content_digest: s.content_digest.clone(),
            issue: IssueRef {
                id: s.issue_id,
                index: s.issue_index,
                url: s.issue_url.clone(),
                repository: RepoRef {
                    id: s.repository_id,
                    full_name: s.repository_full_name.clone(),
                },
            },
            agent: UserRef {
                id: s.agent_id,
                login: s.agent_login.clone(),
            },
            admission: match (
                s.evaluation_id,
                &s.evaluation_phase,
                &s.evaluation_status,
                s.evaluation_snapshot_id,
            ) {
                (Some(id), Some(phase), Some(status), Some(snapshot)) => Some(ReceiptAdmission {
                    evaluation_id: id,
                    phase: phase.clone(),
                    status: status.clone(),
                    snapshot_id: snapshot,
                }),
                _ => None,
            },
            created_at: s.created_at.clone(),
        }
    }
}

/// Writ's verified attribution of an issue to a grant submission.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Attribution {
    /// The grant.
    pub grant_id: i64,
    /// The submission's request key.
    pub request_key: String,
}

/// An issue as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct IssueView {
    /// Global id.
    pub id: i64,
    /// Per-repository index.
    pub index: i64,
    /// Title, byte-for-byte.
    pub title: String,
    /// Body, byte-for-byte.
    pub body: String,
    /// Who opened it.
    pub poster: UserRef,
    /// Where it is now.
    pub repository: RepoView,
    /// Creation time.
    pub created_at: String,
    /// Set only for issues created by a grant submission.
    pub agent_work_grant: Option<Attribution>,
}

impl IssueView {
    /// From a stored issue and its repository.
    pub fn from_row(i: &crate::store::issues::IssueRow, repo: &RepoRow) -> IssueView {
        IssueView {
            id: i.id,
            index: i.issue_index,
            title: i.title.clone(),
            body: i.body.clone(),
            poster: UserRef {
                id: i.poster_id,
                login: i.poster_login.clone(),
            },
            repository: RepoView::from_row(repo),
            created_at: i.created_at.clone(),
            agent_work_grant: i.grant_id.zip(i.request_key.clone()).map(
                |(grant_id, request_key)| Attribution {
                    grant_id,
                    request_key,
                },
            ),
        }
    }
}
