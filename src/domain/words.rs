//! What people read about a grant: its state, its timeline and its receipts
//! as a badge and a sentence, and times relative to now. Every page takes
//! its words from here; the admission's words are the one mapping of
//! [`super::admission::present`].

use time::format_description::BorrowedFormatItem;
use time::macros::format_description;

use super::grant::GrantState;
use super::time::Timestamp;

/// A badge, its tone (`info`, `ok`, `warn`, `block`, `done`) and a sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Words {
    /// Short label.
    pub badge: &'static str,
    /// The badge's colour.
    pub tone: &'static str,
    /// One sentence a non-engineer understands.
    pub sentence: String,
}

fn words(badge: &'static str, tone: &'static str, sentence: String) -> Words {
    Words {
        badge,
        tone,
        sentence,
    }
}

/// What the state of a grant depends on, as people read it.
#[derive(Debug, Clone, Copy)]
pub struct GrantFacts<'a> {
    /// The state.
    pub state: GrantState,
    /// The bot's login.
    pub agent: &'a str,
    /// Receipts so far.
    pub used: i64,
    /// `limits.max_submissions`.
    pub allowed: i64,
    /// `limits.expires_at` has passed.
    pub expired: bool,
    /// Who withdrew it.
    pub revoked_by: Option<&'a str>,
    /// Why, as that person wrote it.
    pub revoke_reason: Option<&'a str>,
}

/// The state of a grant in words.
pub fn grant_state(g: &GrantFacts<'_>) -> Words {
    let agent = g.agent;
    match g.state {
        GrantState::Revoked => {
            let by = g
                .revoked_by
                .map(|who| format!(" by {who}"))
                .unwrap_or_default();
            let why = g
                .revoke_reason
                .filter(|r| !r.trim().is_empty())
                .map(|r| format!(": “{}”", r.trim()))
                .unwrap_or_else(|| ".".to_owned());
            words("Withdrawn", "done", format!("Withdrawn{by}{why}"))
        }
        _ if g.expired => words(
            "Expired",
            "done",
            format!("This grant expired; {agent} can no longer confirm or submit."),
        ),
        GrantState::AwaitingAgent => words(
            "Waiting for the agent",
            "info",
            format!("Waiting for {agent} to confirm this proposal."),
        ),
        GrantState::AwaitingHuman => words(
            "Needs approval",
            "warn",
            format!("{agent} confirmed; waiting for a repository admin to approve."),
        ),
        GrantState::Active if g.used >= g.allowed => words(
            "Used up",
            "done",
            format!("{agent} has used all {} of its submissions.", g.allowed),
        ),
        GrantState::Active => words(
            "Active",
            "ok",
            format!(
                "{agent} may file issues: {} of {} submission{} used.",
                g.used,
                g.allowed,
                plural(g.allowed)
            ),
        ),
    }
}

/// The state filter's label.
pub fn state_label(state: GrantState) -> &'static str {
    match state {
        GrantState::AwaitingAgent => "Waiting for the agent",
        GrantState::AwaitingHuman => "Needs approval",
        GrantState::Active => "Active",
        GrantState::Revoked => "Withdrawn",
    }
}

/// A timeline entry in words: `event` as stored, by `actor`, with the
/// person's `detail` (a withdrawal's reason).
pub fn timeline_event(event: &str, actor: &str, detail: Option<&str>) -> String {
    let detail = detail.filter(|d| !d.trim().is_empty());
    match (event, detail) {
        ("prepared", _) => format!("{actor} prepared the proposal."),
        ("edited", _) => {
            format!("{actor} edited the proposal; the agent must confirm it again.")
        }
        ("confirmed", _) => format!("{actor} confirmed the proposal."),
        ("approved", _) => format!("{actor} approved the grant."),
        ("withdrawn", Some(reason)) => format!("{actor} withdrew the grant: “{}”", reason.trim()),
        ("withdrawn", None) => format!("{actor} withdrew the grant."),
        (other, Some(d)) => format!("{actor}: {other} ({})", d.trim()),
        (other, None) => format!("{actor}: {other}."),
    }
}

/// A receipt's outcome (`submitted`, `issue_deleted`,
/// `issue_binding_changed`) in words.
pub fn receipt_status(status: &str) -> Words {
    match status {
        "submitted" => words(
            "Issue filed",
            "ok",
            "Filed; awaiting a person's review.".to_owned(),
        ),
        "issue_deleted" => words(
            "Issue deleted",
            "warn",
            "The issue it filed has been deleted since.".to_owned(),
        ),
        "issue_binding_changed" => words(
            "Issue moved",
            "warn",
            "The issue it filed was moved or renumbered since.".to_owned(),
        ),
        _ => words("Receipt", "info", status.to_owned()),
    }
}

fn plural(n: i64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// `at` relative to `now`, as people say it: "just now", "5 minutes ago",
/// "in 3 days", and the date beyond a month.
pub fn relative(at: Timestamp, now: Timestamp) -> String {
    let seconds = (now.datetime() - at.datetime()).whole_seconds();
    let (ahead, s) = (seconds < 0, seconds.unsigned_abs());
    if s < 45 {
        return "just now".to_owned();
    }
    let (n, unit) = match s {
        s if s < 90 => (1, "minute"),
        s if s < 45 * 60 => ((s + 30) / 60, "minute"),
        s if s < 90 * 60 => (1, "hour"),
        s if s < 22 * 3600 => ((s + 1800) / 3600, "hour"),
        s if s < 36 * 3600 => (1, "day"),
        s if s < 30 * 86400 => ((s + 43200) / 86400, "day"),
        _ => return format!("on {}", date(at)),
    };
    let unit = if n == 1 {
        unit.to_owned()
    } else {
        format!("{unit}s")
    };
    if ahead {
        format!("in {n} {unit}")
    } else {
        format!("{n} {unit} ago")
    }
}

/// The exact UTC time shown on hover: `5 Dec 2026, 16:54 UTC`.
pub fn exact(at: Timestamp) -> String {
    const EXACT: &[BorrowedFormatItem<'static>] =
        format_description!("[day padding:none] [month repr:short] [year], [hour]:[minute] UTC");
    at.datetime().format(EXACT).unwrap_or_else(|_| at.to_text())
}

/// The date alone: `1 Oct 2026`.
fn date(at: Timestamp) -> String {
    const DATE: &[BorrowedFormatItem<'static>] =
        format_description!("[day padding:none] [month repr:short] [year]");
    at.datetime().format(DATE).unwrap_or_else(|_| at.to_text())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(raw: &str) -> Timestamp {
        Timestamp::parse_rfc3339(raw).unwrap()
    }

    fn facts(state: GrantState) -> GrantFacts<'static> {
        GrantFacts {
            state,
            agent: "builder-bot",
            used: 1,
            allowed: 3,
            expired: false,
            revoked_by: None,
            revoke_reason: None,
        }
    }

    #[test]
    fn every_state_reads_as_a_sentence_naming_the_agent() {
        let w = grant_state(&facts(GrantState::AwaitingAgent));
        assert_eq!(
            w.sentence,
            "Waiting for builder-bot to confirm this proposal."
        );
        assert_eq!(w.tone, "info");
        let w = grant_state(&facts(GrantState::AwaitingHuman));
        assert_eq!(w.badge, "Needs approval");
        assert!(w.sentence.starts_with("builder-bot confirmed"));
        let w = grant_state(&facts(GrantState::Active));
        assert_eq!(
            w.sentence,
            "builder-bot may file issues: 1 of 3 submissions used."
        );
        let used_up = GrantFacts {
            used: 3,
            ..facts(GrantState::Active)
        };
        assert_eq!(grant_state(&used_up).badge, "Used up");
        let expired = GrantFacts {
            expired: true,
            ..facts(GrantState::AwaitingAgent)
        };
        assert_eq!(grant_state(&expired).badge, "Expired");
    }

    #[test]
    fn a_withdrawal_says_who_and_why() {
        let g = GrantFacts {
            revoked_by: Some("alice"),
            revoke_reason: Some(" no longer needed "),
            ..facts(GrantState::Revoked)
        };
        assert_eq!(
            grant_state(&g).sentence,
            "Withdrawn by alice: “no longer needed”"
        );
        let g = GrantFacts {
            revoked_by: Some("alice"),
            revoke_reason: Some("  "),
            ..facts(GrantState::Revoked)
        };
        assert_eq!(grant_state(&g).sentence, "Withdrawn by alice.");
        // Withdrawn beats expired: it is what a person did.
        let g = GrantFacts { expired: true, ..g };
        assert_eq!(grant_state(&g).badge, "Withdrawn");
    }

    #[test]
    fn timeline_and_receipts_in_words() {
        assert_eq!(
            timeline_event("withdrawn", "alice", Some("done")),
            "alice withdrew the grant: “done”"
        );
        assert_eq!(
            timeline_event("confirmed", "builder-bot", None),
            "builder-bot confirmed the proposal."
        );
        assert_eq!(timeline_event("odd", "x", None), "x: odd.");
        assert_eq!(receipt_status("issue_deleted").badge, "Issue deleted");
        assert_eq!(receipt_status("submitted").tone, "ok");
    }

    #[test]
    fn relative_times() {
        let now = at("2026-12-05T12:00:00Z");
        let cases = [
            ("2026-12-05T11:59:30Z", "just now"),
            ("2026-12-05T11:59:00Z", "1 minute ago"),
            ("2026-12-05T11:55:00Z", "5 minutes ago"),
            ("2026-12-05T11:00:00Z", "1 hour ago"),
            ("2026-12-05T09:00:00Z", "3 hours ago"),
            ("2026-12-04T12:00:00Z", "1 day ago"),
            ("2026-12-01T12:00:00Z", "4 days ago"),
            ("2026-12-08T12:00:00Z", "in 3 days"),
            ("2026-12-05T12:10:00Z", "in 10 minutes"),
            ("2026-10-01T08:00:00Z", "on 1 Oct 2026"),
        ];
        for (when, said) in cases {
            assert_eq!(relative(at(when), now), said, "{when}");
        }
        assert_eq!(exact(at("2026-12-05T16:54:07.5Z")), "5 Dec 2026, 16:54 UTC");
    }
}
