//! The one mapping from (mode, status, recovery action) to what people read:
//! a badge, a headline, a tone and a call to action. Every page uses it, and
//! every decision's `reason` starts with its headline.

use serde::Serialize;

use super::decide::{Mode, Recovery, Status};

/// How a decision reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Presentation {
    /// Short label.
    pub badge: &'static str,
    /// `info`, `ok`, `warn` or `block` (the badge's colour).
    pub tone: &'static str,
    /// One sentence a non-engineer understands.
    pub headline: &'static str,
    /// What to do next.
    pub call_to_action: &'static str,
}

const fn p(
    badge: &'static str,
    tone: &'static str,
    headline: &'static str,
    call_to_action: &'static str,
) -> Presentation {
    Presentation {
        badge,
        tone,
        headline,
        call_to_action,
    }
}

/// The presentation of a decision.
pub fn present(mode: Mode, status: Status, recovery: Recovery) -> Presentation {
    use Mode as M;
    use Recovery as R;
    use Status as S;
    match (mode, status, recovery) {
        (M::PlanningOnly, S::Allowed, _) => p(
            "Planning context",
            "info",
            "Planning context only: it grants no access.",
            "Nothing to do.",
        ),
        (M::PlanningOnly, _, _) => p(
            "Planning context",
            "info",
            "Planning context only: it grants no access.",
            "Nothing to do; the agent works without live MCP access.",
        ),
        (M::BoundedContextApproved, S::Allowed, _) => p(
            "Filesystem context approved",
            "ok",
            "Read-only project filesystem context is approved.",
            "Nothing to do.",
        ),
        (M::BoundedContextApproved, S::Warning, _) => p(
            "MCP unavailable",
            "warn",
            "The MCP is missing or unhealthy; the work goes on without it.",
            "An operator installs or fixes the MCP (see MCP health).",
        ),
        (M::BoundedContextApproved, _, _) => p(
            "MCP unavailable",
            "block",
            "The MCP is missing or unhealthy.",
            "An operator installs or fixes the MCP (see MCP health), then retry.",
        ),
        (M::BoundedContextRequired, S::Blocked, _) => p(
            "Needs filesystem context",
            "block",
            "Needs bounded, read-only project filesystem context.",
            "A repository admin approves project filesystem context.",
        ),
        (M::BoundedContextRequired, _, _) => p(
            "Filesystem context optional",
            "warn",
            "Could use bounded, read-only project filesystem context.",
            "A repository admin may approve project filesystem context.",
        ),
        (M::DeferredLiveMcp, S::Blocked, _) => p(
            "Not available in this version",
            "block",
            "A live MCP feature that is not available in this version, and the plan depends on it.",
            "Revise the plan so it does not need the live MCP feature.",
        ),
        (M::DeferredLiveMcp, _, _) => p(
            "Not available in this version",
            "warn",
            "A live MCP feature that is not available in this version; the work goes on without it.",
            "Nothing to do.",
        ),
        (M::Blocked, _, R::InstallOrFixMcp) => p(
            "MCP unavailable",
            "block",
            "The MCP is missing or unhealthy.",
            "An operator installs or fixes the MCP, then retry.",
        ),
        (M::Blocked, _, _) | (M::UnknownLegacy, _, _) => p(
            "Revise the plan",
            "block",
            "The plan asks for something Writ cannot admit.",
            "Revise the plan (edit the grant's MCP requirements).",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deferred_never_reads_as_broken() {
        for status in [Status::Warning, Status::Blocked] {
            let p = present(Mode::DeferredLiveMcp, status, Recovery::RevisePlan);
            assert_eq!(p.badge, "Not available in this version");
            assert!(!p.headline.contains("install"));
        }
        assert_eq!(
            present(
                Mode::PlanningOnly,
                Status::Warning,
                Recovery::ContinueAsPromptContext
            )
            .tone,
            "info"
        );
        assert_eq!(
            present(
                Mode::BoundedContextRequired,
                Status::Blocked,
                Recovery::ApproveProjectFilesystemContext
            )
            .tone,
            "block"
        );
    }
}
