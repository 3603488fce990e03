//! Token scopes, named like Forgejo's; `write:X` implies `read:X`.

/// One token scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `read:repository`
    ReadRepository,
    /// `write:repository`
    WriteRepository,
    /// `read:issue`
    ReadIssue,
    /// `write:issue`
    WriteIssue,
    /// `read:user`
    ReadUser,
    /// `write:user`
    WriteUser,
    /// `read:admin`
    ReadAdmin,
    /// `write:admin`
    WriteAdmin,
}

const ALL: [(Scope, &str); 8] = [
    (Scope::ReadRepository, "read:repository"),
    (Scope::WriteRepository, "write:repository"),
    (Scope::ReadIssue, "read:issue"),
    (Scope::WriteIssue, "write:issue"),
    (Scope::ReadUser, "read:user"),
    (Scope::WriteUser, "write:user"),
    (Scope::ReadAdmin, "read:admin"),
    (Scope::WriteAdmin, "write:admin"),
];

impl Scope {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        ALL.iter()
            .find(|(s, _)| *s == self)
            .map(|(_, n)| *n)
            .unwrap_or("")
    }

    /// Every wire name.
    pub fn names_all() -> [&'static str; 8] {
        ALL.map(|(_, n)| n)
    }

    /// Parses a wire name; there is no implicit `all`.
    pub fn parse(raw: &str) -> Option<Scope> {
        ALL.iter().find(|(_, n)| *n == raw).map(|(s, _)| *s)
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }

    /// The scope this one implies (`write:X` → `read:X`).
    fn implied(self) -> Option<Scope> {
        match self {
            Scope::WriteRepository => Some(Scope::ReadRepository),
            Scope::WriteIssue => Some(Scope::ReadIssue),
            Scope::WriteUser => Some(Scope::ReadUser),
            Scope::WriteAdmin => Some(Scope::ReadAdmin),
            _ => None,
        }
    }
}

/// A token's granted scopes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScopeSet(u8);

impl ScopeSet {
    /// Parses a list of scope names; unknown names are an error naming them.
    pub fn parse<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<ScopeSet, String> {
        let mut set = ScopeSet::default();
        for name in names {
            let scope = Scope::parse(name).ok_or_else(|| format!("unknown scope {name:?}"))?;
            set.0 |= scope.bit();
        }
        Ok(set)
    }

    /// True when the set grants `scope`, directly or by implication.
    pub fn grants(self, scope: Scope) -> bool {
        ALL.iter()
            .any(|(s, _)| self.0 & s.bit() != 0 && (*s == scope || s.implied() == Some(scope)))
    }

    /// The names in canonical order (as stored and shown).
    pub fn names(self) -> Vec<&'static str> {
        ALL.iter()
            .filter(|(s, _)| self.0 & s.bit() != 0)
            .map(|(_, n)| *n)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_implies_read_only() {
        let set = ScopeSet::parse(["write:issue"]).unwrap();
        assert!(set.grants(Scope::WriteIssue));
        assert!(set.grants(Scope::ReadIssue));
        assert!(!set.grants(Scope::ReadRepository));
        let read = ScopeSet::parse(["read:issue"]).unwrap();
        assert!(!read.grants(Scope::WriteIssue));
    }

    #[test]
    fn no_implicit_all() {
        assert!(ScopeSet::parse(["all"]).is_err());
        assert_eq!(
            ScopeSet::parse(["write:admin", "read:repository"])
                .unwrap()
                .names(),
            vec!["read:repository", "write:admin"]
        );
    }
}
