//! From the service's views to what a page shows: a grant as a card, its
//! state, receipts and timeline in words ([`crate::domain::words`]), times
//! relative to now.

use serde_json::Value;

use super::templates::{GrantCard, ReachLine, ReceiptLine, Said, TimelineLine, When};
use crate::domain::admission::Decision;
use crate::domain::grant::GrantState;
use crate::domain::proposal::Requirement;
use crate::domain::time::Timestamp;
use crate::domain::words::{self, GrantFacts};
use crate::service::view::{GrantView, SubmissionView};

/// The parts of a grant's proposal a page shows as text.
pub struct ProposalText {
    pub summary: String,
    pub task: String,
    pub max_submissions: i64,
    pub expires_at: Option<Timestamp>,
    pub json: Value,
}

impl ProposalText {
    pub fn of(g: &GrantView) -> ProposalText {
        let json: Value = serde_json::from_str(g.proposal.get()).unwrap_or_default();
        let text = |v: &Value| v.as_str().unwrap_or("").trim().to_owned();
        let task = text(&json["task"]);
        let summary = match text(&json["summary"]) {
            s if s.is_empty() => first_line(&task),
            s => s,
        };
        ProposalText {
            summary,
            task,
            max_submissions: json["limits"]["max_submissions"].as_i64().unwrap_or(0),
            expires_at: json["limits"]["expires_at"]
                .as_str()
                .and_then(Timestamp::parse_rfc3339),
            json,
        }
    }

    pub fn expired(&self, now: Timestamp) -> bool {
        self.expires_at.is_some_and(|at| now >= at)
    }
}

/// A task's first line, cut at 80 characters, as a title.
fn first_line(task: &str) -> String {
    let line = task.lines().next().unwrap_or("").trim();
    match line.char_indices().nth(80) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line.to_owned(),
    }
}

/// The state of a grant in words.
pub fn state_of(g: &GrantView, p: &ProposalText, now: Timestamp) -> Said {
    let state = GrantState::parse(&g.state).unwrap_or(GrantState::Revoked);
    words::grant_state(&GrantFacts {
        state,
        agent: &g.agent.login,
        used: g.submission_count,
        allowed: p.max_submissions,
        expired: p.expired(now),
        revoked_by: g.revoked_by.as_ref().map(|u| u.login.as_str()),
        revoke_reason: g.revoke_reason.as_deref(),
    })
    .into()
}

/// A grant in a list.
pub fn card(
    g: &GrantView,
    blocked: Option<String>,
    receipts: &[SubmissionView],
    now: Timestamp,
) -> GrantCard {
    let p = ProposalText::of(g);
    GrantCard {
        id: g.id,
        href: grant_path(g),
        repository: g.repository.full_name.clone(),
        agent: g.agent.login.clone(),
        issuer: g.issuer.login.clone(),
        state: GrantState::parse(&g.state).map_or("revoked", GrantState::as_str),
        said: state_of(g, &p, now),
        title: p.summary,
        updated: When::of(&g.updated_at, now),
        blocked,
        receipts: receipts.iter().map(|r| receipt_line(r, now)).collect(),
    }
}

/// `/{owner}/{repo}/agent-work-grants/{id}`
pub fn grant_path(g: &GrantView) -> String {
    format!("/{}/agent-work-grants/{}", g.repository.full_name, g.id)
}

/// A receipt: the issue it filed (where it was filed) and its outcome.
pub fn receipt_line(r: &SubmissionView, now: Timestamp) -> ReceiptLine {
    let repo = &r.issue.repository.full_name;
    ReceiptLine {
        status: r.status,
        issue_href: format!("/{repo}/issues/{}", r.issue.index),
        issue_label: format!("Issue #{} in {repo}", r.issue.index),
        said: words::receipt_status(r.status).into(),
        at: When::of(&r.created_at, now),
    }
}

/// A timeline entry.
pub fn timeline_line(
    event: &str,
    actor: &str,
    detail: Option<&str>,
    at: &str,
    revision: i64,
    now: Timestamp,
) -> TimelineLine {
    TimelineLine {
        sentence: words::timeline_event(event, actor, detail),
        at: When::of(at, now),
        revision,
    }
}

/// Each MCP requirement in words, with its admission outcome.
pub fn reach(decisions: &[Decision]) -> Vec<ReachLine> {
    decisions
        .iter()
        .map(|d| {
            let need = match d.requirement {
                Requirement::Required => "needs",
                Requirement::Optional => "may use",
            };
            let caps = if d.normalized_capabilities.is_empty() {
                String::new()
            } else {
                format!(" for {}", d.normalized_capabilities.join(", "))
            };
            ReachLine {
                badge: d.presentation.badge,
                tone: d.presentation.tone,
                what: format!("{} {need} the MCP server {}{caps}", d.agent, d.mcp_id),
                headline: d.presentation.headline,
            }
        })
        .collect()
}

/// What approving does, while the grant waits for (or will wait for) it.
pub fn approving_does(g: &GrantView, p: &ProposalText, now: Timestamp) -> Option<String> {
    let left = (p.max_submissions - g.submission_count).max(0);
    let until = match p.expires_at {
        Some(at) => format!(" until {}", words::exact(at)),
        None => String::new(),
    };
    let effect = format!(
        "lets {} file up to {left} issue{} in {}{until}, each with a receipt here; you can withdraw it at any time.",
        g.agent.login,
        if left == 1 { "" } else { "s" },
        g.repository.full_name,
    );
    match GrantState::parse(&g.state)? {
        _ if p.expired(now) => None,
        GrantState::AwaitingHuman => Some(format!("Approving {effect}")),
        GrantState::AwaitingAgent => Some(format!(
            "Once {} confirms this proposal, approving {effect}",
            g.agent.login
        )),
        GrantState::Active | GrantState::Revoked => None,
    }
}

#[cfg(test)]
mod tests {
    use super::first_line;

    #[test]
    fn a_long_task_line_is_cut_on_a_character_boundary() {
        assert_eq!(first_line("Short task\nmore"), "Short task");
        let long = "é".repeat(100);
        assert_eq!(first_line(&long), format!("{}…", "é".repeat(80)));
    }
}
