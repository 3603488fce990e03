//! The real proposals, digests, admission outcomes and instants behind the
//! model's small vocabulary, computed once with Writ's domain code.

use std::collections::{BTreeMap, BTreeSet};

use writ::domain::admission::fs_context::{FsChange, FsHistory};
use writ::domain::admission::{Catalog, Inputs, McpHealth, Status, evaluate};
use writ::domain::ids::Digest;
use writ::domain::proposal::{
    Fallback, Limits, McpRequirement, Proposal, ProposalAgent, ProposalRepository, Requirement,
    SCHEMA, VERSION,
};
use writ::domain::time::Timestamp;

use crate::model::{Bot, Draft, FsContext, Plan};

/// The lookup tables.
pub struct Tables {
    digests: [[Digest; 2]; 2],
    admission: [[[Status; 2]; 3]; 2],
    before_expiry: Timestamp,
    expiry: Timestamp,
}

impl Tables {
    pub fn new() -> Tables {
        let before_expiry = Timestamp::parse_rfc3339("2026-06-01T00:00:00Z").expect("instant");
        let expiry = before_expiry.plus_seconds(3600);
        let plans = [Plan::Plain, Plan::Filesystem];
        let bots = [Bot::BuilderBot, Bot::ReviewBot];
        let digests =
            plans.map(|plan| bots.map(|agent| proposal(Draft { plan, agent }, &expiry).digest()));
        let catalog = Catalog::default_catalog();
        let contexts = [FsContext::None, FsContext::Approved, FsContext::Removed];
        let admission = plans.map(|plan| {
            contexts.map(|fs| {
                [false, true].map(|healthy| {
                    let history = fs_history(fs);
                    let health = filesystem_health(healthy);
                    let inputs = Inputs {
                        catalog: &catalog,
                        repository: "acme/widgets",
                        fs_history: &history,
                        health: &health,
                    };
                    evaluate(inputs, &requirements(plan)).status
                })
            })
        });
        let tables = Tables {
            digests,
            admission,
            before_expiry,
            expiry,
        };
        tables.check();
        tables
    }

    /// The plans exercise admission as the model's doc says: the plain plan
    /// is always allowed; the filesystem plan only with the context
    /// approved and the MCP healthy.
    fn check(&self) {
        for fs in [FsContext::None, FsContext::Approved, FsContext::Removed] {
            for healthy in [false, true] {
                assert_eq!(self.admission(Plan::Plain, fs, healthy), Status::Allowed);
                let open = fs == FsContext::Approved && healthy;
                let want = if open {
                    Status::Allowed
                } else {
                    Status::Blocked
                };
                assert_eq!(self.admission(Plan::Filesystem, fs, healthy), want);
            }
        }
    }

    pub fn digest(&self, draft: Draft) -> &Digest {
        &self.digests[draft.plan as usize][draft.agent as usize]
    }

    pub fn admission(&self, plan: Plan, fs: FsContext, healthy: bool) -> Status {
        self.admission[plan as usize][fs as usize][healthy as usize]
    }

    /// The server's clock: before every expiry, or at the expiry.
    pub fn now(&self, expired: bool) -> Timestamp {
        if expired {
            self.expiry
        } else {
            self.before_expiry
        }
    }

    pub fn expires_at(&self, plan: Plan) -> Option<Timestamp> {
        match plan {
            Plan::Plain => None,
            Plan::Filesystem => Some(self.expiry),
        }
    }
}

/// `limits.max_submissions` of a plan.
pub fn max_submissions(plan: Plan) -> i64 {
    match plan {
        Plan::Plain => 2,
        Plan::Filesystem => 1,
    }
}

fn requirements(plan: Plan) -> Vec<McpRequirement> {
    match plan {
        Plan::Plain => Vec::new(),
        Plan::Filesystem => vec![McpRequirement {
            mcp_id: "filesystem".into(),
            agent: "frontend".into(),
            requirement: Requirement::Required,
            capabilities: vec!["filesystem.project.read".into()],
            fallback: Fallback::Block,
            prohibited_capabilities: Vec::new(),
            prompt_context: None,
        }],
    }
}

fn proposal(draft: Draft, expiry: &Timestamp) -> Proposal {
    let (id, login) = match draft.agent {
        Bot::BuilderBot => (10, "builder-bot"),
        Bot::ReviewBot => (11, "review-bot"),
    };
    Proposal {
        schema: SCHEMA.into(),
        version: VERSION,
        grant_id: 1,
        repository: ProposalRepository {
            id: 1,
            full_name: "acme/widgets".into(),
        },
        agent: ProposalAgent {
            id,
            login: login.into(),
        },
        task: format!("{:?}", draft.plan),
        summary: String::new(),
        limits: Limits {
            max_submissions: max_submissions(draft.plan),
            expires_at: (draft.plan == Plan::Filesystem).then(|| expiry.to_proposal_text()),
        },
        mcp_requirements: requirements(draft.plan),
    }
}

fn fs_history(fs: FsContext) -> FsHistory {
    let approved = FsChange::Approved(BTreeSet::from(["read".to_owned()]));
    let changes = match fs {
        FsContext::None => Vec::new(),
        FsContext::Approved => vec![approved],
        FsContext::Removed => vec![approved, FsChange::Removed],
    };
    FsHistory {
        latest_id: (!changes.is_empty()).then_some(changes.len() as i64),
        changes,
    }
}

fn filesystem_health(healthy: bool) -> BTreeMap<String, McpHealth> {
    let health = McpHealth {
        installed: true,
        healthy,
        detail: String::new(),
        checked_at: "2026-06-01T00:00:00.000000Z".into(),
    };
    BTreeMap::from([("filesystem".to_owned(), health)])
}
