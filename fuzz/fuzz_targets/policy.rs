//! The tool-grant policy (`domain::policy`) on text: a policy file in TOML,
//! U+001F, a tool name, U+001F, the call's arguments as a JSON object.
//! Each agent the file names is asked about the call; when the file does not
//! load, its lines are read as grants `id;repos,...;tools,...`.
//!
//! - A loaded file holds each agent once (case-insensitively) and only
//!   grant sets that `validate` accepts; `validate` accepts only sets
//!   within every documented bound.
//! - `is_well_formed` is exactly `owner/name` or `owner/*` with GitHub-like
//!   names; `pattern_matches` only for such a pattern, case-insensitively,
//!   and always for the target it names.
//! - `decide` is default deny, as `docs/policy.md` states it: allowed by the
//!   first grant, in order, that names the tool and covers the repository,
//!   with the documented reason otherwise; the tool and repository match
//!   case-insensitively, and adding a grant never takes an allowance away.

#![no_main]

use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};
use writ::domain::policy::{
    self, Decision, Denial, MAX_GRANT_ID, MAX_GRANTS, MAX_PATTERN_LEN, MAX_PATTERNS, RepoTarget,
    TOOLS, ToolGrant, decide, is_well_formed, pattern_matches, resolve_repository,
};
use writ_fuzz::fields;

/// `[A-Za-z0-9][A-Za-z0-9_.-]{0,max-1}`.
fn name(raw: &str, max: usize) -> bool {
    let mut chars = raw.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && raw.len() <= max
        && chars.all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
}

/// The documented pattern: `owner/name` or `owner/*`.
fn model_pattern(raw: &str) -> Option<(&str, Option<&str>)> {
    let (owner, repo) = raw.split_once('/')?;
    if !name(owner, 39) {
        return None;
    }
    match repo {
        "*" => Some((owner, None)),
        _ if name(repo, 100) => Some((owner, Some(repo))),
        _ => None,
    }
}

fn model_matches(raw: &str, t: &RepoTarget) -> bool {
    model_pattern(raw).is_some_and(|(owner, repo)| {
        owner.eq_ignore_ascii_case(&t.owner) && repo.is_none_or(|r| r.eq_ignore_ascii_case(&t.repo))
    })
}

/// `decide` as `docs/policy.md` states it.
fn model_decide(grants: &[ToolGrant], tool: &str, target: Option<&RepoTarget>) -> Decision {
    if !TOOLS.iter().any(|t| t.eq_ignore_ascii_case(tool)) {
        return Decision::Deny(Denial::UnknownTool);
    }
    if grants.is_empty() {
        return Decision::Deny(Denial::NoGrants);
    }
    let naming: Vec<&ToolGrant> = grants
        .iter()
        .filter(|g| g.tools.iter().any(|t| t.eq_ignore_ascii_case(tool)))
        .collect();
    if naming.is_empty() {
        return Decision::Deny(Denial::ToolNotGranted);
    }
    let covers = |g: &&&ToolGrant| {
        g.repos.is_empty() || target.is_some_and(|t| g.repos.iter().any(|p| model_matches(p, t)))
    };
    match naming.iter().find(covers) {
        Some(g) => Decision::Allow {
            grant_id: g.id.clone(),
        },
        None if target.is_none() => Decision::Deny(Denial::NoRepository),
        None => Decision::Deny(Denial::RepositoryNotGranted),
    }
}

fn check_validate(grants: &[ToolGrant]) {
    let Ok(()) = policy::validate(grants) else {
        return;
    };
    assert!(grants.len() <= MAX_GRANTS);
    assert!(grants.iter().map(|g| g.repos.len()).sum::<usize>() <= MAX_PATTERNS);
    let mut ids = HashSet::new();
    for g in grants {
        let n = g.id.chars().count();
        assert!((1..=MAX_GRANT_ID).contains(&n) && !g.id.chars().any(char::is_control));
        assert!(ids.insert(g.id.as_str()), "grant id {:?} twice", g.id);
        assert!(!g.tools.is_empty());
        let mut tools = HashSet::new();
        for t in &g.tools {
            let known = TOOLS.iter().find(|k| k.eq_ignore_ascii_case(t));
            assert!(known.is_some_and(|k| tools.insert(*k)), "tool {t:?}");
        }
        for p in &g.repos {
            assert!(p.len() <= MAX_PATTERN_LEN && !p.chars().any(char::is_control));
        }
    }
}

fn check_patterns(grants: &[ToolGrant], target: Option<&RepoTarget>) {
    let malformed = policy::malformed_patterns(grants);
    for p in grants.iter().flat_map(|g| &g.repos) {
        assert_eq!(
            is_well_formed(p),
            model_pattern(p).is_some(),
            "pattern {p:?}"
        );
        assert_eq!(malformed.contains(&p.as_str()), !is_well_formed(p));
        if let Some(t) = target {
            assert_eq!(pattern_matches(p, t), model_matches(p, t), "{p:?} on {t:?}");
        }
        if let Some((owner, repo)) = model_pattern(p) {
            let named = RepoTarget {
                owner: owner.to_ascii_uppercase(),
                repo: repo.unwrap_or("any").to_owned(),
            };
            assert!(pattern_matches(p, &named), "{p:?} does not match {named:?}");
        }
    }
}

fn check_decide(grants: &[ToolGrant], tool: &str, target: Option<&RepoTarget>) {
    let got = decide(grants, tool, target);
    assert_eq!(
        got,
        model_decide(grants, tool, target),
        "decide({tool:?}, {target:?})"
    );
    if let Decision::Deny(denial) = &got {
        assert!(!denial.code().is_empty() && !denial.message().is_empty());
    }
    let shouted = target.map(|t| RepoTarget {
        owner: t.owner.to_ascii_uppercase(),
        repo: t.repo.to_ascii_lowercase(),
    });
    let loud = decide(grants, &tool.to_ascii_uppercase(), shouted.as_ref());
    assert_eq!(loud, got, "case changed the decision");
    if got.is_allowed() {
        let mut more = grants.to_vec();
        more.push(ToolGrant {
            id: "extra".into(),
            repos: Vec::new(),
            tools: TOOLS.iter().map(|t| (*t).to_owned()).collect(),
        });
        assert_eq!(
            decide(&more, tool, target),
            got,
            "a grant took an allowance away"
        );
    }
}

/// Grants from lines `id;repo,repo;tool,tool`, for files that do not load.
fn grants_of_lines(text: &str) -> Vec<ToolGrant> {
    let list = |s: &str| -> Vec<String> {
        s.split(',')
            .filter(|x| !x.is_empty())
            .map(str::to_owned)
            .collect()
    };
    text.lines()
        .take(80)
        .map(|line| {
            let mut parts = line.splitn(3, ';');
            ToolGrant {
                id: parts.next().unwrap_or_default().to_owned(),
                repos: list(parts.next().unwrap_or_default()),
                tools: list(parts.next().unwrap_or_default()),
            }
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let [toml, tool, args] = fields(text, 3)[..] else {
        unreachable!("three fields")
    };
    let args: Map<String, Value> = serde_json::from_str(args).unwrap_or_default();
    let target = resolve_repository(&args);
    if let Some(t) = &target {
        assert!(!t.owner.is_empty() && !t.repo.is_empty());
        assert_eq!(t.owner, t.owner.trim());
        assert_eq!(t.repo, t.repo.trim());
    }
    let sets: Vec<Vec<ToolGrant>> = match policy::parse_policy_toml(toml) {
        Ok(agents) => {
            let mut logins = HashSet::new();
            for agent in &agents {
                assert!(
                    logins.insert(agent.login.to_ascii_lowercase()),
                    "agent twice"
                );
                assert_eq!(policy::validate(&agent.grants), Ok(()));
            }
            agents.into_iter().map(|a| a.grants).collect()
        }
        Err(_) => vec![grants_of_lines(toml)],
    };
    for grants in &sets {
        check_validate(grants);
        check_patterns(grants, target.as_ref());
        check_decide(grants, tool, target.as_ref());
        check_decide(grants, tool, None);
    }
});
