//! Project filesystem context grants: an append-only history per repository,
//! and the effective phase of that history against what a package needs.

use std::collections::BTreeSet;

use serde::Serialize;

/// The capabilities a project grant can cover.
pub const FS_CAPABILITIES: [&str; 3] = ["read", "list", "search"];

/// One change to a repository's project filesystem context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FsChange {
    /// Approved, covering these capabilities (subset of read/list/search).
    Approved(BTreeSet<String>),
    /// Denied by a repository admin.
    Denied,
    /// Removed.
    Removed,
}

/// The history, oldest first, with the id of its latest entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FsHistory {
    /// Changes in order.
    pub changes: Vec<FsChange>,
    /// Id of the latest stored entry, if any.
    pub latest_id: Option<i64>,
}

/// The effective phase against a package.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FsPhase {
    /// Never approved in a way that covered this package.
    None,
    /// The current grant covers what the package needs.
    Approved,
    /// A repository admin denied it.
    Denied,
    /// A grant covered the package but was since removed or narrowed.
    Revoked,
}

/// `grant_state` of a filesystem decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FsGrantState {
    /// The effective phase.
    pub phase: FsPhase,
    /// `project_grant_removed` or `project_grant_narrowed` when revoked.
    pub revocation_reason: Option<&'static str>,
}

impl FsHistory {
    /// The effective phase against the capabilities (`read`, `list`,
    /// `search`) a package needs.
    pub fn state_for<S: AsRef<str>>(&self, needed: &BTreeSet<S>) -> FsGrantState {
        let covers = |c: &FsChange| {
            matches!(c, FsChange::Approved(caps)
                if needed.iter().all(|n| caps.contains(n.as_ref())))
        };
        let state = |phase, revocation_reason| FsGrantState {
            phase,
            revocation_reason,
        };
        match self.changes.last() {
            Some(c) if covers(c) => state(FsPhase::Approved, None),
            Some(FsChange::Denied) => state(FsPhase::Denied, None),
            current => {
                if !self.changes.iter().any(covers) {
                    return state(FsPhase::None, None);
                }
                match current {
                    Some(FsChange::Removed) => {
                        state(FsPhase::Revoked, Some("project_grant_removed"))
                    }
                    _ => state(FsPhase::Revoked, Some("project_grant_narrowed")),
                }
            }
        }
    }

    /// The capabilities the current grant covers (empty unless approved).
    pub fn current_capabilities(&self) -> BTreeSet<String> {
        match self.changes.last() {
            Some(FsChange::Approved(caps)) => caps.clone(),
            _ => BTreeSet::new(),
        }
    }
}

/// The `phase` of a `filesystem_context.changed` event: `narrowed` for an
/// approval of fewer capabilities than the approval in force (`in_force`,
/// empty when none is), else the stored action (`approved`, `denied`,
/// `removed`).
pub fn change_phase(
    in_force: &std::collections::BTreeSet<String>,
    action: &'static str,
    capabilities: &std::collections::BTreeSet<String>,
) -> &'static str {
    let narrows =
        !in_force.is_empty() && capabilities.is_subset(in_force) && capabilities != in_force;
    if action == "approved" && narrows {
        "narrowed"
    } else {
        action
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    fn history(changes: Vec<FsChange>) -> FsHistory {
        FsHistory {
            changes,
            latest_id: Some(1),
        }
    }

    #[test]
    fn phases() {
        let read = set(&["read"]);
        let read_search = set(&["read", "search"]);
        assert_eq!(FsHistory::default().state_for(&read).phase, FsPhase::None);
        let approved = history(vec![FsChange::Approved(set(&["read", "list"]))]);
        assert_eq!(approved.state_for(&read).phase, FsPhase::Approved);
        assert_eq!(approved.state_for(&read_search).phase, FsPhase::None);
        let denied = history(vec![FsChange::Approved(read.clone()), FsChange::Denied]);
        assert_eq!(denied.state_for(&read).phase, FsPhase::Denied);
        let removed = history(vec![FsChange::Approved(read.clone()), FsChange::Removed]);
        assert_eq!(
            removed.state_for(&read).revocation_reason,
            Some("project_grant_removed")
        );
        let narrowed = history(vec![
            FsChange::Approved(read_search.clone()),
            FsChange::Approved(read.clone()),
        ]);
        let s = narrowed.state_for(&read_search);
        assert_eq!(
            (s.phase, s.revocation_reason),
            (FsPhase::Revoked, Some("project_grant_narrowed"))
        );
        // Narrowing {read, list} to {read} leaves a read-only package approved.
        let kept = history(vec![
            FsChange::Approved(set(&["read", "list"])),
            FsChange::Approved(read.clone()),
        ]);
        assert_eq!(kept.state_for(&read).phase, FsPhase::Approved);
        // Re-approval after narrowing restores it.
        let again = history(vec![
            FsChange::Approved(read_search.clone()),
            FsChange::Approved(read.clone()),
            FsChange::Approved(read_search.clone()),
        ]);
        assert_eq!(again.state_for(&read_search).phase, FsPhase::Approved);
        // Removed without ever covering: none.
        let never = history(vec![FsChange::Approved(read.clone()), FsChange::Removed]);
        assert_eq!(never.state_for(&read_search).phase, FsPhase::None);
    }
}
