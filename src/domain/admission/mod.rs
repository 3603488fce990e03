//! MCP admission: one contract at preview, approval and handoff
//! (spec `admission.md`). Pure: the catalog, the classifier, the decision
//! table and the project filesystem context phases.

pub mod catalog;
pub mod classify;
pub mod decide;
pub mod fs_context;
pub mod present;

#[cfg(test)]
mod tests;

pub use catalog::Catalog;
pub use decide::{Decision, Inputs, McpHealth, PackageDecision, Status, evaluate};
