//! Criterion micro-benchmarks of the pure domain rules (spec `quality.md`,
//! "Benchmark harness"): the admission decision, the proposal digest and the
//! MCP tool policy match. See `docs/performance.md`.
//!
//! Run: `cargo bench --bench domain -- --warm-up-time 1 --measurement-time 3`

use std::collections::{BTreeMap, BTreeSet};
use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use writ::domain::admission::fs_context::{FsChange, FsHistory};
use writ::domain::admission::{Catalog, Inputs, McpHealth, Status, evaluate};
use writ::domain::policy::{self, RepoTarget, ToolGrant};
use writ::domain::proposal::{
    Fallback, Limits, McpRequirement, Proposal, ProposalAgent, ProposalRepository, Requirement,
};

/// The spec's tiny task-tracker package (same as `src/domain/admission/tests.rs`).
const TINY_TASK_TRACKER: &str = r#"[
 {"mcp_id":"github","agent":"frontend","requirement":"required","capabilities":["github.issues.read"],"fallback":"block","prompt_context":"Open issues describe the due-date feature."},
 {"mcp_id":"filesystem","agent":"qa","requirement":"required","capabilities":["filesystem.project.read","filesystem.project.search"],"fallback":"block"},
 {"mcp_id":"github","agent":"review","requirement":"optional","capabilities":["github.pull_requests.create"],"fallback":"continue_without_mcp"},
 {"mcp_id":"github","agent":"docs","requirement":"optional","capabilities":["github.contents.read"],"fallback":"continue_without_mcp","prompt_context":"Docs live under docs/."}
]"#;

/// One filesystem requirement (a bounded context packet).
const ONE_FS_REQ: &str = r#"[
 {"mcp_id":"filesystem","agent":"frontend","requirement":"required","capabilities":["filesystem.project.read","filesystem.project.search"],"fallback":"block"}
]"#;

/// The spec's digest test vectors.
const DIGEST_VECTORS: &str = include_str!("../tests/data/digest-vectors.json");

fn healthy(ids: &[&str]) -> BTreeMap<String, McpHealth> {
    ids.iter()
        .map(|id| {
            let h = McpHealth {
                installed: true,
                healthy: true,
                detail: String::new(),
                checked_at: "2026-01-01T00:00:00Z".into(),
            };
            ((*id).to_owned(), h)
        })
        .collect()
}

fn fs_approved(caps: &[&str]) -> FsHistory {
    FsHistory {
        changes: vec![FsChange::Approved(
            caps.iter().map(|c| (*c).to_owned()).collect(),
        )],
        latest_id: Some(1),
    }
}

fn reqs(json: &str) -> Vec<McpRequirement> {
    serde_json::from_str(json).expect("benchmark requirements parse")
}

fn bench_admission(c: &mut Criterion) {
    let catalog = Catalog::default_catalog();
    let health = healthy(&["filesystem", "github"]);
    let approved = fs_approved(&["read", "search"]);
    let none = FsHistory::default();
    let narrowed = FsHistory {
        changes: vec![
            FsChange::Approved(BTreeSet::from(["read".into(), "search".into()])),
            FsChange::Approved(BTreeSet::from(["read".into()])),
        ],
        latest_id: Some(2),
    };
    let tracker = reqs(TINY_TASK_TRACKER);
    let one = reqs(ONE_FS_REQ);
    // (name, requirements, project filesystem history, expected package status)
    let cases: [(&str, &[McpRequirement], &FsHistory, Status); 5] = [
        ("tracker4/fs_approved", &tracker, &approved, Status::Warning),
        ("tracker4/fs_none", &tracker, &none, Status::Blocked),
        ("tracker4/fs_narrowed", &tracker, &narrowed, Status::Blocked),
        ("fs1/approved", &one, &approved, Status::Allowed),
        ("fs1/none", &one, &none, Status::Blocked),
    ];
    let mut group = c.benchmark_group("admission_evaluate");
    for (name, reqs, fs, want) in cases {
        let inputs = Inputs {
            catalog: &catalog,
            repository: "acme/tracker",
            fs_history: fs,
            health: &health,
        };
        // The benchmark measures the real decision, not a degenerate path.
        assert_eq!(evaluate(inputs, reqs).status, want, "{name}");
        group.throughput(Throughput::Elements(reqs.len() as u64));
        group.bench_with_input(BenchmarkId::from_parameter(name), &inputs, |b, inputs| {
            b.iter(|| evaluate(black_box(*inputs), black_box(reqs)))
        });
    }
    group.finish();
}

fn vector_proposals() -> Vec<Proposal> {
    let doc: serde_json::Value = serde_json::from_str(DIGEST_VECTORS).expect("vectors parse");
    doc["vectors"]
        .as_array()
        .expect("vectors array")
        .iter()
        .map(|v| {
            let p: Proposal =
                serde_json::from_value(v["proposal"].clone()).expect("vector proposal parses");
            assert_eq!(
                p.digest().as_str(),
                v["proposal_digest"].as_str().expect("digest string"),
                "vector digest"
            );
            p
        })
        .collect()
}

/// A large proposal: 20 requirements and a 4 KiB task with some non-ASCII text.
fn large_proposal() -> Proposal {
    let line = "Add a \"due date\" field to tasks, with validation ✓ and tests.\n";
    let mut task = String::new();
    while task.len() < 4096 {
        task.push_str(line);
    }
    let mcp_requirements = (0..20)
        .map(|i| McpRequirement {
            mcp_id: if i % 2 == 0 { "github" } else { "filesystem" }.to_owned(),
            agent: format!("agent-{i}"),
            requirement: if i % 3 == 0 {
                Requirement::Optional
            } else {
                Requirement::Required
            },
            capabilities: if i % 2 == 0 {
                vec!["github.issues.read".into(), "github.contents.read".into()]
            } else {
                vec![
                    "filesystem.project.read".into(),
                    "filesystem.project.search".into(),
                ]
            },
            fallback: if i % 3 == 0 {
                Fallback::ContinueWithoutMcp
            } else {
                Fallback::Block
            },
            prohibited_capabilities: vec!["github.issues.write".into()],
            prompt_context: Some(format!("Context for requirement {i}: see docs/.")),
        })
        .collect();
    Proposal {
        schema: "agent_work_grant.v1".into(),
        version: 1,
        grant_id: 9_007_199_254,
        repository: ProposalRepository {
            id: 7,
            full_name: "acme/widgets".into(),
        },
        agent: ProposalAgent {
            id: 12,
            login: "builder-bot".into(),
        },
        task,
        summary: "Due dates for tasks".into(),
        limits: Limits {
            max_submissions: 10,
            expires_at: Some("2026-12-31T23:59:59Z".into()),
        },
        mcp_requirements,
    }
}

fn bench_digest(c: &mut Criterion) {
    let mut group = c.benchmark_group("proposal_digest");
    for (i, p) in vector_proposals().iter().enumerate() {
        group.throughput(Throughput::Bytes(p.canonical_json().len() as u64));
        group.bench_with_input(BenchmarkId::new("vector", i), p, |b, p| {
            b.iter(|| black_box(p).digest())
        });
    }
    let large = large_proposal();
    group.throughput(Throughput::Bytes(large.canonical_json().len() as u64));
    group.bench_with_input(
        BenchmarkId::from_parameter("req20_task4k"),
        &large,
        |b, p| b.iter(|| black_box(p).digest()),
    );
    group.finish();
}

/// Ten grants, shaped like a real policy file: some owner-wide, some exact,
/// one unrestricted read-only grant, tool names in mixed case.
fn ten_grants() -> Vec<ToolGrant> {
    let g = |id: &str, repos: &[&str], tools: &[&str]| ToolGrant {
        id: id.to_owned(),
        repos: repos.iter().map(|s| (*s).to_owned()).collect(),
        tools: tools.iter().map(|s| (*s).to_owned()).collect(),
    };
    let grants = vec![
        g(
            "read-any",
            &[],
            &["list_agent_work_grants", "get_agent_work_grant"],
        ),
        g(
            "docs",
            &["acme/docs", "acme/handbook"],
            &["confirm_agent_work_grant"],
        ),
        g("infra", &["infra/*"], &["confirm_agent_work_grant"]),
        g(
            "widgets-confirm",
            &["acme/widgets"],
            &["confirm_agent_work_grant"],
        ),
        g(
            "mobile",
            &["acme/ios", "acme/android", "acme/mobile-shared"],
            &["submit_agent_work_proposal", "get_agent_work_submission"],
        ),
        g(
            "labs",
            &["labs/*", "research/*"],
            &["Submit_Agent_Work_Proposal"],
        ),
        g(
            "web",
            &["acme/site", "acme/blog"],
            &["submit_agent_work_proposal"],
        ),
        g(
            "tools",
            &["acme/cli", "acme/sdk-rust", "acme/sdk-go"],
            &["submit_agent_work_proposal", "get_agent_work_submission"],
        ),
        g(
            "bad-pattern",
            &["not a pattern"],
            &["submit_agent_work_proposal"],
        ),
        g(
            "widgets-submit",
            &["acme/widgets", "acme/widgets-api"],
            &["submit_agent_work_proposal", "get_agent_work_submission"],
        ),
    ];
    policy::validate(&grants).expect("benchmark grant set is valid");
    grants
}

fn bench_policy(c: &mut Criterion) {
    let grants = ten_grants();
    let target = |owner: &str, repo: &str| RepoTarget {
        owner: owner.to_owned(),
        repo: repo.to_owned(),
    };
    let widgets = target("Acme", "Widgets");
    let other = target("acme", "secret-vault");
    // (name, tool, target, expected allow grant or deny code)
    let cases: [(&str, &str, Option<&RepoTarget>, &str); 6] = [
        (
            "allow_first_grant",
            "get_agent_work_grant",
            None,
            "read-any",
        ),
        (
            "allow_last_grant",
            "submit_agent_work_proposal",
            Some(&widgets),
            "widgets-submit",
        ),
        (
            "deny_repository_not_granted",
            "submit_agent_work_proposal",
            Some(&other),
            "repository_not_in_grant",
        ),
        (
            "deny_no_repository",
            "submit_agent_work_proposal",
            None,
            "no_repository",
        ),
        (
            "deny_unknown_tool",
            "delete_repository",
            Some(&widgets),
            "unknown_tool",
        ),
        (
            "deny_no_grants",
            "submit_agent_work_proposal",
            Some(&widgets),
            "no_grants",
        ),
    ];
    let mut group = c.benchmark_group("policy_decide");
    group.throughput(Throughput::Elements(1));
    for (name, tool, target, want) in cases {
        let set: &[ToolGrant] = if name == "deny_no_grants" {
            &[]
        } else {
            &grants
        };
        let got = match policy::decide(set, tool, target) {
            policy::Decision::Allow { grant_id } => grant_id,
            policy::Decision::Deny(d) => d.code().to_owned(),
        };
        assert_eq!(got, want, "{name}");
        group.bench_function(name, |b| {
            b.iter(|| policy::decide(black_box(set), black_box(tool), black_box(target)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_admission, bench_digest, bench_policy);
criterion_main!(benches);
