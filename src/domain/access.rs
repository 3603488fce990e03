//! Repository access: who may read, write or administer a repository, and
//! whether a token's resource reducer reaches it.

use serde::{Deserialize, Serialize};

/// A collaborator permission, ordered read < write < admin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    /// May read.
    Read,
    /// May read and write (prepare grants, open issues).
    Write,
    /// May administer (approve grants, settings).
    Admin,
}

impl Permission {
    /// The stored and wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Read => "read",
            Permission::Write => "write",
            Permission::Admin => "admin",
        }
    }

    /// Every permission, weakest first.
    pub const ALL: [Permission; 3] = [Permission::Read, Permission::Write, Permission::Admin];

    /// Parses a stored or wire name.
    pub fn parse(raw: &str) -> Option<Permission> {
        Permission::ALL.into_iter().find(|p| p.as_str() == raw)
    }
}

/// The facts access is decided on.
#[derive(Debug, Clone, Copy)]
pub struct AccessFacts {
    /// The caller owns the repository.
    pub is_owner: bool,
    /// The repository is private.
    pub private: bool,
    /// The caller's explicit collaborator entry, if any.
    pub collaborator: Option<Permission>,
}

/// The caller's effective permission: owner → admin; else the collaborator
/// entry; a public repository is readable by every authenticated user. Private
/// access is only ever an explicit entry.
pub fn effective_permission(facts: AccessFacts) -> Option<Permission> {
    if facts.is_owner {
        return Some(Permission::Admin);
    }
    let public = (!facts.private).then_some(Permission::Read);
    facts.collaborator.max(public)
}

/// A token's resource reducer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reducer {
    /// The token cannot reach private repositories.
    pub public_only: bool,
    /// When set, the lowercase `owner/name`s the token is limited to.
    pub repositories: Option<Vec<String>>,
}

impl Reducer {
    /// True when the token may reach this repository.
    pub fn reaches(&self, full_name: &str, private: bool) -> bool {
        if self.public_only && private {
            return false;
        }
        match &self.repositories {
            Some(list) => list.iter().any(|r| r.eq_ignore_ascii_case(full_name)),
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_table() {
        let f = |is_owner, private, collaborator| {
            effective_permission(AccessFacts {
                is_owner,
                private,
                collaborator,
            })
        };
        assert_eq!(f(true, true, None), Some(Permission::Admin));
        assert_eq!(f(false, true, None), None);
        assert_eq!(f(false, false, None), Some(Permission::Read));
        assert_eq!(
            f(false, true, Some(Permission::Read)),
            Some(Permission::Read)
        );
        assert_eq!(
            f(false, false, Some(Permission::Write)),
            Some(Permission::Write)
        );
    }

    #[test]
    fn reducers() {
        let open = Reducer::default();
        assert!(open.reaches("acme/widgets", true));
        let public = Reducer {
            public_only: true,
            repositories: None,
        };
        assert!(!public.reaches("acme/widgets", true));
        assert!(public.reaches("acme/widgets", false));
        let listed = Reducer {
            public_only: false,
            repositories: Some(vec!["acme/widgets".into()]),
        };
        assert!(listed.reaches("ACME/Widgets", true));
        assert!(!listed.reaches("acme/other", false));
    }
}
