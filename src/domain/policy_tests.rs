//! Table-driven tests of the tool-grant rules.

use serde_json::json;

use super::*;

fn grant(id: &str, repos: &[&str], tools: &[&str]) -> ToolGrant {
    ToolGrant {
        id: id.to_owned(),
        repos: repos.iter().map(|s| s.to_string()).collect(),
        tools: tools.iter().map(|s| s.to_string()).collect(),
    }
}

fn target(owner: &str, repo: &str) -> RepoTarget {
    RepoTarget {
        owner: owner.to_owned(),
        repo: repo.to_owned(),
    }
}

const GET: &str = "get_agent_work_grant";
const LIST: &str = "list_agent_work_grants";
const CONFIRM: &str = "confirm_agent_work_grant";
const SUBMIT: &str = "submit_agent_work_proposal";

#[test]
fn pattern_matching() {
    let cases: &[(&str, (&str, &str), bool)] = &[
        // exact, case-insensitive both ways
        ("acme/repo-a", ("acme", "repo-a"), true),
        ("ACME/Repo-A", ("acme", "repo-a"), true),
        ("acme/repo-a", ("Acme", "REPO-A"), true),
        ("acme/repo-a", ("acme", "repo-b"), false),
        ("acme/repo-a", ("other", "repo-a"), false),
        // no prefix or suffix matching
        ("acme/repo", ("acme", "repo-a"), false),
        ("acme/repo-a", ("acme", "repo"), false),
        // owner wildcard
        ("acme/*", ("acme", "anything"), true),
        ("ACME/*", ("acme", "x"), true),
        ("acme/*", ("acme-2", "x"), false),
        // malformed patterns never match
        ("", ("acme", "x"), false),
        ("acme", ("acme", "x"), false),
        ("acme/", ("acme", "x"), false),
        ("/x", ("acme", "x"), false),
        ("/", ("acme", "x"), false),
        ("acme/x/y", ("acme", "x"), false),
        ("acme//x", ("acme", "x"), false),
        ("*/x", ("acme", "x"), false),
        ("*/*", ("acme", "x"), false),
        ("*", ("acme", "x"), false),
        ("acme/x*", ("acme", "x"), false),
        ("acme/x*", ("acme", "x*"), false),
        ("acme/*x", ("acme", "x"), false),
        ("acme/**", ("acme", "x"), false),
        ("ac*/x", ("acme", "x"), false),
        (" acme/x", ("acme", "x"), false),
        ("acme/x ", ("acme", "x"), false),
        ("acme /x", ("acme", "x"), false),
        ("ac me/x", ("ac me", "x"), false),
        ("acme/x\t", ("acme", "x"), false),
        ("-acme/x", ("-acme", "x"), false),
        ("acme/.x", ("acme", ".x"), false),
        ("äcme/x", ("äcme", "x"), false),
    ];
    for (pattern, (owner, repo), expected) in cases {
        assert_eq!(
            pattern_matches(pattern, &target(owner, repo)),
            *expected,
            "{pattern:?} vs {owner}/{repo}"
        );
        if *expected {
            assert!(is_well_formed(pattern), "{pattern:?}");
        }
    }
}

#[test]
fn repository_resolution() {
    let cases = [
        (json!({"owner": "acme", "repo": "x"}), Some(("acme", "x"))),
        (
            json!({"owner": "  acme ", "repo": "\tx\n"}),
            Some(("acme", "x")),
        ),
        (json!({"owner": "acme"}), None),
        (json!({"repo": "x"}), None),
        (json!({}), None),
        (json!({"owner": "", "repo": "x"}), None),
        (json!({"owner": "acme", "repo": "   "}), None),
        (json!({"owner": 1, "repo": "x"}), None),
        (json!({"owner": "acme", "repo": null}), None),
        (json!({"owner": ["acme"], "repo": "x"}), None),
        // other arguments are never consulted
        (json!({"repository": "acme/x", "full_name": "acme/x"}), None),
        (
            json!({"owner": "acme", "repo": "x", "page": 2}),
            Some(("acme", "x")),
        ),
    ];
    for (args, expected) in cases {
        let map = args.as_object().expect("object").clone();
        let got = resolve_repository(&map);
        assert_eq!(got, expected.map(|(o, r)| target(o, r)), "{args}");
    }
}

/// name, grants, tool, target, expected
type Case<'a> = (
    &'a str,
    &'a [ToolGrant],
    &'a str,
    Option<&'a RepoTarget>,
    Decision,
);

#[test]
fn decisions() {
    let spec = vec![
        grant(
            "read-a",
            &["acme/repo-a"],
            &[GET, "get_agent_work_submission"],
        ),
        grant(
            "write-b",
            &["acme/repo-b", "acme/*"],
            &[GET, CONFIRM, SUBMIT],
        ),
    ];
    let any = vec![grant("any", &[], &[LIST, GET])];
    let broken = vec![grant("broken", &["*/repo-a", "acme/repo-a*"], &[GET])];
    let allow = |id: &str| Decision::Allow {
        grant_id: id.to_owned(),
    };
    let deny = Decision::Deny;
    let a = target("acme", "repo-a");
    let b = target("ACME", "Repo-B");
    let other = target("other", "repo-a");
    let cases: Vec<Case<'_>> = vec![
        (
            "first matching grant wins",
            &spec,
            GET,
            Some(&a),
            allow("read-a"),
        ),
        (
            "tool only in a later grant",
            &spec,
            CONFIRM,
            Some(&a),
            allow("write-b"),
        ),
        (
            "owner wildcard, mixed case",
            &spec,
            SUBMIT,
            Some(&b),
            allow("write-b"),
        ),
        (
            "tool name case-insensitive",
            &spec,
            "Get_Agent_Work_Grant",
            Some(&a),
            allow("read-a"),
        ),
        (
            "pairing: read-a has no submit",
            &spec,
            "get_agent_work_submission",
            Some(&b),
            deny(Denial::RepositoryNotGranted),
        ),
        (
            "other owner",
            &spec,
            GET,
            Some(&other),
            deny(Denial::RepositoryNotGranted),
        ),
        (
            "tool in no grant",
            &spec,
            LIST,
            None,
            deny(Denial::ToolNotGranted),
        ),
        (
            "repo-less call vs repo-restricted grants",
            &spec,
            GET,
            None,
            deny(Denial::NoRepository),
        ),
        (
            "empty repos = any repository",
            &any,
            GET,
            Some(&other),
            allow("any"),
        ),
        (
            "empty repos = repo-less calls too",
            &any,
            LIST,
            None,
            allow("any"),
        ),
        (
            "empty repos still needs the tool",
            &any,
            SUBMIT,
            Some(&a),
            deny(Denial::ToolNotGranted),
        ),
        (
            "malformed patterns never match",
            &broken,
            GET,
            Some(&a),
            deny(Denial::RepositoryNotGranted),
        ),
        (
            "default deny: no grants",
            &[],
            GET,
            Some(&a),
            deny(Denial::NoGrants),
        ),
        (
            "default deny: no grants, repo-less",
            &[],
            LIST,
            None,
            deny(Denial::NoGrants),
        ),
        (
            "unknown tool",
            &any,
            "delete_everything",
            Some(&a),
            deny(Denial::UnknownTool),
        ),
        (
            "unknown tool, no grants",
            &[],
            "",
            None,
            deny(Denial::UnknownTool),
        ),
    ];
    for (name, grants, tool, target, expected) in cases {
        assert_eq!(decide(grants, tool, target), expected, "{name}");
    }
}

#[test]
fn validation() {
    let ok = |g: Vec<ToolGrant>| assert_eq!(validate(&g), Ok(()), "{g:?}");
    let bad = |g: Vec<ToolGrant>, needle: &str| {
        let err = validate(&g).expect_err(needle);
        assert!(err.contains(needle), "{err} lacks {needle}");
    };
    ok(vec![]);
    ok(vec![grant("a", &[], &[GET])]);
    ok(vec![grant(
        "a",
        &["*/x", "not a pattern"],
        &["GET_AGENT_WORK_GRANT"],
    )]);
    ok(vec![grant(&"x".repeat(64), &[], &[GET])]);
    bad(vec![grant("", &[], &[GET])], "grant id");
    bad(vec![grant(&"x".repeat(65), &[], &[GET])], "grant id");
    bad(vec![grant("a\nb", &[], &[GET])], "grant id");
    bad(
        vec![grant("a", &[], &[GET]), grant("a", &[], &[LIST])],
        "used twice",
    );
    bad(vec![grant("a", &[], &[])], "names no tool");
    bad(
        vec![grant("a", &[], &["create_issue"])],
        "tool must be one of",
    );
    bad(
        vec![grant("a", &[], &[GET, "get_AGENT_work_grant"])],
        "twice",
    );
    bad(vec![grant("a", &[&"x".repeat(257)], &[GET])], "longer");
    for pattern in [
        "acme/x\nforged",
        "acme/x\r",
        "a\0b/c",
        "acme/\u{7f}",
        "acme/\u{85}x",
    ] {
        bad(vec![grant("a", &[pattern], &[GET])], "control character");
    }
    ok(vec![grant("a", &["acme/x y", "ácme/*"], &[GET])]);
    let many: Vec<ToolGrant> = (0..65)
        .map(|n| grant(&n.to_string(), &[], &[GET]))
        .collect();
    bad(many, "at most 64 grants");
    ok((0..64)
        .map(|n| grant(&n.to_string(), &[], &[GET]))
        .collect());
    let patterns: Vec<String> = (0..257).map(|n| format!("acme/r{n}")).collect();
    let refs: Vec<&str> = patterns.iter().map(String::as_str).collect();
    bad(vec![grant("a", &refs, &[GET])], "256 repository patterns");
    ok(vec![grant("a", &refs[..256], &[GET])]);
    assert_eq!(
        malformed_patterns(&[grant("a", &["acme/x", "*/x", "acme/*"], &[GET])]),
        vec!["*/x"]
    );
}

#[test]
fn policy_file_nested_and_default_ids() {
    let text = r#"
[[mcp.agents]]
id = "builder-bot"

  [[mcp.agents.grants]]
  id = "read-a"
  repos = ["acme/repo-a"]
  tools = ["get_agent_work_grant", "get_agent_work_submission"]

  [[mcp.agents.grants]]
  repos = ["acme/repo-b", "acme/*"]
  tools = ["get_agent_work_grant", "confirm_agent_work_grant", "submit_agent_work_proposal"]

[[mcp.agents]]
id = "flat-bot"
tools = ["list_agent_work_grants"]
repos = []

[[mcp.agents]]
id = "nothing-bot"
"#;
    let agents = parse_policy_toml(text).expect("parses");
    assert_eq!(agents.len(), 3);
    assert_eq!(agents[0].login, "builder-bot");
    assert_eq!(agents[0].grants[0].id, "read-a");
    assert_eq!(agents[0].grants[1].id, "grants[1]");
    assert_eq!(agents[0].grants[1].repos, vec!["acme/repo-b", "acme/*"]);
    assert_eq!(
        agents[1].grants,
        vec![grant("flat", &[], &["list_agent_work_grants"])]
    );
    assert!(agents[2].grants.is_empty());
}

#[test]
fn policy_file_refusals() {
    let cases = [
        ("", "mcp"),
        ("[[mcp.agents]]\nid = \"a\"\nkeys = [\"env:K\"]\n", "keys"),
        (
            "[[mcp.agents]]\nid = \"a\"\n[[mcp.agents.grants]]\nrepo = [\"x/y\"]\ntools = [\"get_agent_work_grant\"]\n",
            "repo",
        ),
        (
            "[[mcp.agents]]\nid = \"a\"\n[[mcp.agents.grants]]\ntools = [\"get_agent_work_grant\"]\n",
            "repos",
        ),
        (
            "[[mcp.agents]]\nid = \"a\"\ntools = [\"get_agent_work_grant\"]\n",
            "go together",
        ),
        (
            "[[mcp.agents]]\nid = \"a\"\ntools = [\"get_agent_work_grant\"]\nrepos = []\n[[mcp.agents.grants]]\nrepos = []\ntools = [\"get_agent_work_grant\"]\n",
            "mixes",
        ),
        (
            "[[mcp.agents]]\nid = \"a\"\n[[mcp.agents]]\nid = \"A\"\n",
            "twice",
        ),
        (
            "[[mcp.agents]]\nid = \"a\"\ntools = [\"create_issue\"]\nrepos = []\n",
            "tool must be one of",
        ),
        (
            "[[mcp.agents]]\nid = \"a\"\n[[mcp.agents.grants]]\nid = \"x\"\nrepos = []\ntools = [\"list_agent_work_grants\"]\n[[mcp.agents.grants]]\nid = \"x\"\nrepos = []\ntools = [\"list_agent_work_grants\"]\n",
            "used twice",
        ),
        ("not toml [", "policy file"),
    ];
    for (text, needle) in cases {
        let err = parse_policy_toml(text).expect_err(text);
        assert!(err.contains(needle), "{text:?}: {err} lacks {needle}");
    }
}
