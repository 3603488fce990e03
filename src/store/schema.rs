//! Table and column identifiers, one enum per table (`Table` is its name).

use sea_query::Iden;

/// `users`
#[derive(Iden, Clone, Copy)]
pub enum Users {
    Table,
    Id,
    Login,
    LowerLogin,
    Kind,
    IsAdmin,
    PasswordHash,
    CreatedAt,
}

/// `access_tokens`
#[derive(Iden, Clone, Copy)]
pub enum AccessTokens {
    Table,
    Id,
    UserId,
    Name,
    TokenHash,
    Scopes,
    PublicOnly,
    Repositories,
    CreatedAt,
    RevokedAt,
}

/// `repositories`
#[derive(Iden, Clone, Copy)]
pub enum Repositories {
    Table,
    Id,
    OwnerId,
    Name,
    LowerName,
    Private,
    RequireDistinctApprover,
    NextIssueIndex,
    CreatedAt,
}

/// `collaborators`
#[derive(Iden, Clone, Copy)]
pub enum Collaborators {
    Table,
    RepositoryId,
    UserId,
    Permission,
}

/// `grants`
#[derive(Iden, Clone, Copy)]
pub enum Grants {
    Table,
    Id,
    RepositoryId,
    AgentId,
    IssuerId,
    ApproverId,
    State,
    StateRevision,
    Proposal,
    ProposalDigest,
    MaxSubmissions,
    ExpiresAt,
    SubmissionCount,
    CreatedAt,
    UpdatedAt,
    ConfirmedAt,
    ApprovedAt,
    RevokedAt,
    RevokedBy,
    RevokeReason,
}

/// `grant_counts`: grants per (agent, repository, state), kept by triggers.
#[derive(Iden, Clone, Copy)]
pub enum GrantCounts {
    Table,
    AgentId,
    RepositoryId,
    State,
    N,
}

/// `grant_events`
#[derive(Iden, Clone, Copy)]
pub enum GrantEvents {
    Table,
    Id,
    GrantId,
    Event,
    ActorId,
    FromState,
    ToState,
    StateRevision,
    ProposalDigest,
    Detail,
    At,
}

/// `sessions`
#[derive(Iden, Clone, Copy)]
pub enum Sessions {
    Table,
    Id,
    TokenHash,
    UserId,
    CreatedAt,
    ExpiresAt,
    AbsoluteExpiresAt,
    RevokedAt,
    Address,
}

/// `form_nonces`
#[derive(Iden, Clone, Copy)]
pub enum FormNonces {
    Table,
    Id,
    SessionId,
    NonceHash,
    Action,
    Target,
    CreatedAt,
    ExpiresAt,
    UsedAt,
}

/// `login_failures`
#[derive(Iden, Clone, Copy)]
pub enum LoginFailures {
    Table,
    Id,
    LowerLogin,
    At,
    Address,
}

/// `login_addresses`
#[derive(Iden, Clone, Copy)]
pub enum LoginAddresses {
    Table,
    UserId,
    Address,
    LastLoginAt,
}

/// `issues`
#[derive(Iden, Clone, Copy)]
pub enum Issues {
    Table,
    Id,
    RepositoryId,
    IssueIndex,
    Title,
    Body,
    PosterId,
    CreatedAt,
}

/// `submissions`
#[derive(Iden, Clone, Copy)]
pub enum Submissions {
    Table,
    Id,
    GrantId,
    RequestKey,
    ContentDigest,
    ProposalDigest,
    AgentId,
    IssueId,
    IssueIndex,
    RepositoryId,
    RepositoryFullName,
    IssueUrl,
    EvaluationId,
    CreatedAt,
    /// The audit record of the call that created the receipt.
    CallId,
}

/// `catalogs`
#[derive(Iden, Clone, Copy)]
pub enum Catalogs {
    Table,
    Version,
    Content,
    FirstLoadedAt,
}

/// `mcp_health`
#[derive(Iden, Clone, Copy)]
pub enum McpHealth {
    Table,
    McpId,
    Installed,
    Healthy,
    Detail,
    CheckedAt,
    UpdatedBy,
}

/// `health_snapshots`
#[derive(Iden, Clone, Copy)]
pub enum HealthSnapshots {
    Table,
    Id,
    Digest,
    Content,
    CreatedAt,
}

/// `fs_context_changes`
#[derive(Iden, Clone, Copy)]
pub enum FsContextChanges {
    Table,
    Id,
    RepositoryId,
    Action,
    Capabilities,
    ActorId,
    At,
}

/// `admission_evaluations`
#[derive(Iden, Clone, Copy)]
pub enum AdmissionEvaluations {
    Table,
    Id,
    GrantId,
    Phase,
    Status,
    Retryable,
    BlockedCount,
    WarningCount,
    SnapshotId,
    CatalogVersion,
    FilesystemGrantId,
    ProposalDigest,
    Decisions,
    ActorId,
    EvaluatedAt,
}
