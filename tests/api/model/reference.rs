//! The reference model: what every operation of the fixture's principals
//! must answer, and what it leaves behind, written from the spec
//! (grant-lifecycle.md, native-api.md, admission.md, browser.md,
//! mcp-and-policy.md) with no IO. `step` is the whole protocol.
//! `scripts/linearizability.py` mirrors its per-grant rules (confirm,
//! submit, readback, read, open and post for approve and withdraw, under
//! the same names) to check the harnesses' concurrent histories: a rule
//! changed here is changed there too.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// The humans of the fixture: alice and bob are admins of acme/widgets,
/// carol can write to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Human {
    Alice,
    Bob,
    Carol,
}

impl Human {
    pub const ALL: [Human; 3] = [Human::Alice, Human::Bob, Human::Carol];

    fn admin(self) -> bool {
        self != Human::Carol
    }
}

/// The two bots; both start as writers of acme/widgets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Bot {
    Builder,
    Rival,
}

/// The credential an agent call carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Cred {
    /// The bot's token with the adapter's scopes.
    Bot(Bot),
    /// builder-bot's token with only `read:repository` and `read:issue`.
    BuilderReadOnly,
    /// builder-bot's token with every agent scope, reduced to acme/other.
    BuilderElsewhere,
    /// alice's token with every scope (a human's).
    HumanToken,
}

impl Cred {
    fn bot(self) -> Option<Bot> {
        match self {
            Cred::Bot(bot) => Some(bot),
            Cred::BuilderReadOnly | Cred::BuilderElsewhere => Some(Bot::Builder),
            Cred::HumanToken => None,
        }
    }

    fn can_write_issues(self) -> bool {
        !matches!(self, Cred::BuilderReadOnly)
    }
}

/// The native route or the `/mcp` tool of the same name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Via {
    Api,
    Mcp,
}

/// The MCP requirements a proposal carries (tests/api/model/drive.rs has
/// their JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reqs {
    /// None: allowed.
    Nothing,
    /// Required `filesystem.project.read`, fallback `block`.
    FsRequired,
    /// Optional `filesystem.project.read` + `.search`, may proceed.
    FsOptional,
    /// Optional `github.pull_requests.create` (deferred), may proceed.
    Deferred,
    /// A required capability with a typo: never admissible.
    Typo,
}

/// `limits.expires_at`, relative to the model's clock at prepare or edit.
/// Every boundary the model meets (expiry, nonce lifetime) sits 500 s away
/// from a multiple of the clock's 1000 s steps, so the seconds a run takes
/// in real time never decide an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Expiry {
    Never,
    In2500s,
    In6500s,
}

impl Expiry {
    fn at(self, now: i64) -> Option<i64> {
        match self {
            Expiry::Never => None,
            Expiry::In2500s => Some(now + 2500),
            Expiry::In6500s => Some(now + 6500),
        }
    }
}

/// Lifetime of a form nonce in the model test's configuration.
pub const NONCE_SECONDS: i64 = 1500;

/// Which digest a confirm or submit offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DigestPick {
    Current,
    /// The digest before the last edit (or `Other` when never edited).
    Previous,
    /// A well-formed digest of no proposal.
    Other,
}

/// A concrete digest: version `n` of a grant's proposal, or none's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Digest {
    Version(u32),
    Other,
}

/// A grant page's action forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Form {
    Edit,
    Approve,
    Withdraw,
}

/// What the filesystem-context settings form posts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FsAction {
    /// Approve with these capabilities (bits: read, list, search).
    Approve(u8),
    Deny,
    Remove,
}

/// An agent's `/mcp` tool grants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Tools {
    /// Every tool on any repository.
    All,
    /// The two read tools, on acme/widgets only.
    ReadOnly,
    /// No grant: default deny.
    Nothing,
}

/// A bot's collaborator entry on acme/widgets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Access {
    Removed,
    Read,
    Write,
}

/// What an edit form posts besides its nonce and revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditSpec {
    pub agent: Bot,
    pub reqs: Reqs,
    pub max: u8,
    pub expiry: Expiry,
}

/// One operation of one principal. Grants are named by their position in
/// the order they were prepared; the position one past the last names a
/// grant that does not exist.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Op {
    Prepare {
        by: Human,
        agent: Bot,
        max: u8,
        expiry: Expiry,
        reqs: Reqs,
    },
    /// A human opens the grant page (a tab whose forms are posted later).
    Open {
        by: Human,
        grant: usize,
    },
    /// A human posts a form of the tab opened last on that grant.
    Post {
        by: Human,
        grant: usize,
        form: Form,
        acknowledge: bool,
        edit: EditSpec,
    },
    Read {
        cred: Cred,
        grant: usize,
        via: Via,
    },
    Confirm {
        cred: Cred,
        grant: usize,
        digest: DigestPick,
        via: Via,
    },
    Submit {
        cred: Cred,
        grant: usize,
        key: u8,
        title: u8,
        digest: DigestPick,
        via: Via,
    },
    Readback {
        cred: Cred,
        grant: usize,
        key: u8,
        via: Via,
    },
    /// The setup privilege deletes the `nth` issue still in acme/widgets.
    DeleteIssue {
        nth: u8,
    },
    /// The setup privilege moves the `nth` issue of acme/widgets to acme/other.
    TransferIssue {
        nth: u8,
    },
    SetHealth {
        installed: bool,
        healthy: bool,
    },
    FsContext {
        by: Human,
        action: FsAction,
    },
    SetAccess {
        bot: Bot,
        access: Access,
    },
    SetTools {
        bot: Bot,
        tools: Tools,
    },
    Advance {
        seconds: i64,
    },
}

/// A grant as the model knows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Grant {
    pub agent: Bot,
    pub issuer: Human,
    pub state: State,
    pub revision: i64,
    /// Proposal version: 1 at prepare, +1 per edit (every edit changes the
    /// task text, so every version has its own digest).
    pub version: u32,
    pub max: i64,
    pub expires_at: Option<i64>,
    pub reqs: Reqs,
    pub count: i64,
    /// Receipts by request-key slot: (digest, title, issue index).
    pub receipts: BTreeMap<u8, (Digest, u8, i64)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    AwaitingAgent,
    AwaitingHuman,
    Active,
    Revoked,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::AwaitingAgent => "awaiting_agent",
            State::AwaitingHuman => "awaiting_human",
            State::Active => "active",
            State::Revoked => "revoked",
        }
    }
}

/// An issue of acme/widgets created by a submission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Issue {
    Present,
    Deleted,
    Transferred,
}

/// A loaded grant page: the revision it displayed and its forms' nonces.
#[derive(Clone, Debug, PartialEq)]
pub struct Tab {
    pub revision: i64,
    pub forms: BTreeSet<Form>,
    pub used: BTreeSet<Form>,
    pub opened_at: i64,
}

/// The whole world of the model.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    /// Seconds the server's clock was moved forward.
    pub now: i64,
    pub grants: Vec<Grant>,
    /// acme/widgets' issues by index (1-based: `issues[i - 1]`).
    pub issues: Vec<Issue>,
    pub access: BTreeMap<Bot, Access>,
    pub tools: BTreeMap<Bot, Tools>,
    pub installed: bool,
    pub healthy: bool,
    /// The project filesystem context grant: `None` when there is none,
    /// `Some(0)` when denied, else the approved capability bits.
    pub fs: Option<u8>,
    pub tabs: BTreeMap<(Human, usize), Tab>,
    /// Agent calls that must each have left one audit record.
    pub audited: u64,
    /// What the last operation must answer.
    pub expect: Expect,
}

/// The grant facts an answer carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrantFacts {
    pub state: State,
    pub revision: i64,
    pub count: i64,
}

/// A receipt as readback and submit show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiptFacts {
    pub index: i64,
    pub status: &'static str,
}

/// The predicted answer of one operation. `status` 0 with a code is a
/// `/mcp` tool call refused by the tool policy before any native work.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Expect {
    pub status: u16,
    pub code: Option<&'static str>,
    pub grant: Option<GrantFacts>,
    pub receipt: Option<ReceiptFacts>,
    /// A replayed submission (`Idempotent-Replayed: true` on the API).
    pub replayed: bool,
    /// An opened page: the revision it shows and its forms.
    pub page: Option<(i64, BTreeSet<Form>)>,
    /// A prepared grant's position.
    pub prepared: Option<usize>,
}

impl Expect {
    fn status(status: u16) -> Expect {
        Expect {
            status,
            ..Expect::default()
        }
    }

    fn error(status: u16, code: &'static str) -> Expect {
        Expect {
            status,
            code: Some(code),
            ..Expect::default()
        }
    }

    fn with_grant(mut self, grant: &Grant) -> Expect {
        self.grant = Some(grant.facts());
        self
    }
}

impl Grant {
    fn facts(&self) -> GrantFacts {
        GrantFacts {
            state: self.state,
            revision: self.revision,
            count: self.count,
        }
    }

    fn expired(&self, now: i64) -> bool {
        self.expires_at.is_some_and(|at| now >= at)
    }

    fn steward(&self, by: Human) -> bool {
        self.issuer == by || by.admin()
    }

    /// The forms the grant page offers `by` now.
    fn forms_for(&self, by: Human) -> BTreeSet<Form> {
        let mut forms = BTreeSet::new();
        let steward = self.steward(by);
        if steward && matches!(self.state, State::AwaitingAgent | State::AwaitingHuman) {
            forms.insert(Form::Edit);
        }
        if by.admin() && self.state == State::AwaitingHuman {
            forms.insert(Form::Approve);
        }
        if steward && self.state != State::Revoked {
            forms.insert(Form::Withdraw);
        }
        forms
    }
}

/// The package status of admission.md for these requirements now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Package {
    Allowed,
    Warning,
    Blocked,
}

const READ: u8 = 1;
const SEARCH: u8 = 4;

impl Model {
    pub fn new() -> Model {
        Model {
            now: 0,
            grants: Vec::new(),
            issues: Vec::new(),
            access: [(Bot::Builder, Access::Write), (Bot::Rival, Access::Write)].into(),
            tools: [(Bot::Builder, Tools::Nothing), (Bot::Rival, Tools::Nothing)].into(),
            installed: false,
            healthy: false,
            fs: None,
            tabs: BTreeMap::new(),
            audited: 0,
            expect: Expect::default(),
        }
    }

    /// Admission of a package now (the decision table of admission.md for
    /// the requirement kinds the model uses).
    pub fn admission(&self, reqs: Reqs) -> Package {
        let covers = |bits: u8| self.fs.is_some_and(|caps| caps & bits == bits && caps != 0);
        let healthy = self.installed && self.healthy;
        match reqs {
            Reqs::Nothing => Package::Allowed,
            Reqs::FsRequired if covers(READ) && healthy => Package::Allowed,
            Reqs::FsRequired => Package::Blocked,
            Reqs::FsOptional if covers(READ | SEARCH) && healthy => Package::Allowed,
            Reqs::FsOptional | Reqs::Deferred => Package::Warning,
            Reqs::Typo => Package::Blocked,
        }
    }

    fn digest(&self, grant: &Grant, pick: DigestPick) -> Digest {
        match pick {
            DigestPick::Current => Digest::Version(grant.version),
            DigestPick::Previous if grant.version > 1 => Digest::Version(grant.version - 1),
            _ => Digest::Other,
        }
    }

    fn receipt(&self, index: i64) -> ReceiptFacts {
        let status = match self.issues[(index - 1) as usize] {
            Issue::Present => "submitted",
            Issue::Deleted => "issue_deleted",
            Issue::Transferred => "issue_binding_changed",
        };
        ReceiptFacts { index, status }
    }

    /// The indexes of acme/widgets' issues still there.
    pub fn present_issues(&self) -> Vec<i64> {
        (1..=self.issues.len() as i64)
            .filter(|i| self.issues[(*i - 1) as usize] == Issue::Present)
            .collect()
    }

    /// The checks every agent route makes before it reads the grant: the
    /// tool policy on `/mcp`, agent only, scopes, the repository, the
    /// token's reducer, and the grant being the caller's.
    fn reach(
        &mut self,
        cred: Cred,
        grant: usize,
        via: Via,
        tool: Tool,
    ) -> Result<usize, (u16, &'static str)> {
        if via == Via::Mcp {
            let bot = cred.bot().expect("/mcp calls carry a bot's token");
            let granted = match self.tools[&bot] {
                Tools::All => true,
                Tools::ReadOnly => matches!(tool, Tool::Get | Tool::Readback),
                Tools::Nothing => false,
            };
            self.audited += 1;
            if !granted {
                return Err((0, "tool_not_granted"));
            }
        } else {
            self.audited += 1;
        }
        let Some(bot) = cred.bot() else {
            return Err((403, "agent_only"));
        };
        if (tool == Tool::Confirm || tool == Tool::Submit) && !cred.can_write_issues() {
            return Err((403, "insufficient_scope"));
        }
        if self.access[&bot] == Access::Removed {
            return Err((404, "not_found"));
        }
        if cred == Cred::BuilderElsewhere {
            return Err((403, "insufficient_scope"));
        }
        match self.grants.get(grant) {
            Some(g) if g.agent == bot => Ok(grant),
            _ => Err((404, "not_found")),
        }
    }

    /// Applies one operation: the answer it must get is left in `expect`.
    pub fn step(&mut self, op: &Op) {
        self.expect = match op {
            Op::Prepare {
                by,
                agent,
                max,
                expiry,
                reqs,
            } => {
                self.grants.push(Grant {
                    agent: *agent,
                    issuer: *by,
                    state: State::AwaitingAgent,
                    revision: 1,
                    version: 1,
                    max: i64::from(*max),
                    expires_at: expiry.at(self.now),
                    reqs: *reqs,
                    count: 0,
                    receipts: BTreeMap::new(),
                });
                Expect {
                    prepared: Some(self.grants.len() - 1),
                    ..Expect::status(303)
                }
            }
            Op::Open { by, grant } => match self.grants.get(*grant) {
                None => Expect::status(404),
                Some(g) => {
                    let forms = g.forms_for(*by);
                    let page = (g.revision, forms.clone());
                    self.tabs.insert(
                        (*by, *grant),
                        Tab {
                            revision: g.revision,
                            forms,
                            used: BTreeSet::new(),
                            opened_at: self.now,
                        },
                    );
                    Expect {
                        page: Some(page),
                        ..Expect::status(200)
                    }
                }
            },
            Op::Post {
                by,
                grant,
                form,
                acknowledge,
                edit,
            } => self.post(*by, *grant, *form, *acknowledge, *edit),
            Op::Read { cred, grant, via } => match self.reach(*cred, *grant, *via, Tool::Get) {
                Err((status, code)) => Expect::error(status, code),
                Ok(i) => Expect::status(200).with_grant(&self.grants[i]),
            },
            Op::Confirm {
                cred,
                grant,
                digest,
                via,
            } => match self.reach(*cred, *grant, *via, Tool::Confirm) {
                Err((status, code)) => Expect::error(status, code),
                Ok(i) => self.confirm(i, *digest),
            },
            Op::Submit {
                cred,
                grant,
                key,
                title,
                digest,
                via,
            } => match self.reach(*cred, *grant, *via, Tool::Submit) {
                Err((status, code)) => Expect::error(status, code),
                Ok(i) => self.submit(i, *key, *title, *digest),
            },
            Op::Readback {
                cred,
                grant,
                key,
                via,
            } => match self.reach(*cred, *grant, *via, Tool::Readback) {
                Err((status, code)) => Expect::error(status, code),
                Ok(i) => match self.grants[i].receipts.get(key) {
                    None => Expect::error(404, "not_found"),
                    Some((_, _, index)) => Expect {
                        receipt: Some(self.receipt(*index)),
                        ..Expect::status(200).with_grant(&self.grants[i])
                    },
                },
            },
            Op::DeleteIssue { nth } | Op::TransferIssue { nth } => {
                let present = self.present_issues();
                if present.is_empty() {
                    Expect::status(404)
                } else {
                    let index = present[*nth as usize % present.len()];
                    let (after, status) = match op {
                        Op::DeleteIssue { .. } => (Issue::Deleted, 204),
                        _ => (Issue::Transferred, 200),
                    };
                    self.issues[(index - 1) as usize] = after;
                    Expect::status(status)
                }
            }
            Op::SetHealth { installed, healthy } => {
                self.installed = *installed;
                self.healthy = *healthy;
                Expect::status(200)
            }
            Op::FsContext { action, .. } => {
                self.fs = match action {
                    FsAction::Approve(bits) => Some(*bits),
                    FsAction::Deny => Some(0),
                    FsAction::Remove => None,
                };
                Expect::status(303)
            }
            Op::SetAccess { bot, access } => {
                // Removing an entry that is not there is a 404.
                let before = self.access.insert(*bot, *access);
                if *access == Access::Removed && before == Some(Access::Removed) {
                    Expect::status(404)
                } else {
                    Expect::status(204)
                }
            }
            Op::SetTools { bot, tools } => {
                self.tools.insert(*bot, *tools);
                Expect::status(200)
            }
            Op::Advance { seconds } => {
                self.now += seconds;
                Expect::default()
            }
        };
    }

    fn confirm(&mut self, i: usize, pick: DigestPick) -> Expect {
        let now = self.now;
        let offered = self.digest(&self.grants[i], pick);
        let g = &mut self.grants[i];
        if g.state == State::Revoked {
            return Expect::error(409, "grant_revoked").with_grant(g);
        }
        if offered != Digest::Version(g.version) {
            return Expect::error(409, "proposal_mismatch").with_grant(g);
        }
        if g.expired(now) {
            return Expect::error(409, "grant_expired").with_grant(g);
        }
        if g.state == State::AwaitingAgent {
            g.state = State::AwaitingHuman;
            g.revision += 1;
        }
        Expect::status(200).with_grant(g)
    }

    fn submit(&mut self, i: usize, key: u8, title: u8, pick: DigestPick) -> Expect {
        let offered = self.digest(&self.grants[i], pick);
        let package = self.admission(self.grants[i].reqs);
        let (now, next_index) = (self.now, self.issues.len() as i64 + 1);
        if let Some(&(digest, used_title, index)) = self.grants[i].receipts.get(&key) {
            let g = &self.grants[i];
            if digest == offered && used_title == title {
                return Expect {
                    receipt: Some(self.receipt(index)),
                    replayed: true,
                    ..Expect::status(200).with_grant(g)
                };
            }
            return Expect::error(409, "request_key_conflict").with_grant(g);
        }
        let g = &mut self.grants[i];
        let refusal = match g.state {
            State::Revoked => Some("grant_revoked"),
            State::Active if offered != Digest::Version(g.version) => Some("proposal_mismatch"),
            State::Active if g.expired(now) => Some("grant_expired"),
            State::Active if g.count >= g.max => Some("submission_limit"),
            State::Active if package == Package::Blocked => Some("admission_blocked"),
            State::Active => None,
            _ => Some("state_conflict"),
        };
        if let Some(code) = refusal {
            return Expect::error(409, code).with_grant(g);
        }
        g.count += 1;
        g.receipts.insert(key, (offered, title, next_index));
        self.issues.push(Issue::Present);
        let g = &self.grants[i];
        Expect {
            receipt: Some(ReceiptFacts {
                index: next_index,
                status: "submitted",
            }),
            ..Expect::status(201).with_grant(g)
        }
    }

    /// A form posted from the tab `by` opened last on `grant`: the nonce is
    /// checked first, then the revision the tab displayed, then the event.
    fn post(&mut self, by: Human, grant: usize, form: Form, ack: bool, edit: EditSpec) -> Expect {
        let now = self.now;
        let package = self.admission(self.grants[grant].reqs);
        let tab = self
            .tabs
            .get_mut(&(by, grant))
            .expect("precondition: an open tab");
        if tab.used.contains(&form) || now >= tab.opened_at + NONCE_SECONDS {
            return Expect::status(403);
        }
        let g = &mut self.grants[grant];
        if tab.revision != g.revision {
            return Expect::status(409);
        }
        let allowed = match (form, g.state) {
            (_, State::Revoked) => false,
            (Form::Edit, State::AwaitingAgent | State::AwaitingHuman) => true,
            (Form::Approve, State::AwaitingHuman) => true,
            (Form::Withdraw, _) => true,
            _ => false,
        };
        if !allowed {
            return Expect::status(409);
        }
        match form {
            Form::Approve if package == Package::Blocked => {
                // The refused evaluation is committed, with the nonce.
                tab.used.insert(form);
                return Expect::status(409);
            }
            Form::Approve if package == Package::Warning && !ack => return Expect::status(422),
            Form::Approve => g.state = State::Active,
            Form::Withdraw => g.state = State::Revoked,
            Form::Edit => {
                g.state = State::AwaitingAgent;
                g.version += 1;
                g.agent = edit.agent;
                g.reqs = edit.reqs;
                g.max = i64::from(edit.max);
                g.expires_at = edit.expiry.at(now);
            }
        }
        g.revision += 1;
        tab.used.insert(form);
        Expect::status(303)
    }
}

/// The agent tool an operation is (for the `/mcp` policy and the scopes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tool {
    Get,
    Confirm,
    Submit,
    Readback,
}
