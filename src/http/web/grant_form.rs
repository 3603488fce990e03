//! The prepare/edit form as posted: the contract's fields plus the rows of
//! the requirement editor (repeated `req_*` fields, one value per row).

use serde::Deserialize;

use super::templates::{FieldValues, RowValues};
use crate::service::forms::{GrantForm, RequirementRow};

/// Blank rows the editor offers below the existing ones.
pub const BLANK_ROWS: usize = 2;

/// Every field of the prepare and edit forms.
#[derive(Debug, Default, Deserialize)]
pub struct GrantFormPost {
    #[serde(default)]
    pub nonce: String,
    #[serde(default)]
    pub state_revision: String,
    #[serde(default)]
    pub agent: String,
    #[serde(default)]
    pub task: String,
    #[serde(default)]
    pub summary: String,
    #[serde(default)]
    pub max_submissions: String,
    #[serde(default)]
    pub expires_at: String,
    #[serde(default)]
    pub mcp_requirements: String,
    #[serde(default)]
    pub req_mcp_id: Vec<String>,
    #[serde(default)]
    pub req_agent: Vec<String>,
    #[serde(default)]
    pub req_requirement: Vec<String>,
    #[serde(default)]
    pub req_capabilities: Vec<String>,
    #[serde(default)]
    pub req_fallback: Vec<String>,
    #[serde(default)]
    pub req_prohibited: Vec<String>,
    #[serde(default)]
    pub req_prompt_context: Vec<String>,
}

fn at(list: &[String], i: usize) -> String {
    list.get(i).cloned().unwrap_or_default()
}

impl GrantFormPost {
    /// The fields the service validates.
    pub fn fields(&self) -> GrantForm {
        let n = [
            self.req_mcp_id.len(),
            self.req_agent.len(),
            self.req_requirement.len(),
            self.req_capabilities.len(),
            self.req_fallback.len(),
            self.req_prohibited.len(),
            self.req_prompt_context.len(),
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
        .min(crate::domain::proposal::MAX_REQUIREMENTS + BLANK_ROWS);
        let rows = (0..n)
            .map(|i| RequirementRow {
                mcp_id: at(&self.req_mcp_id, i),
                agent: at(&self.req_agent, i),
                requirement: at(&self.req_requirement, i),
                capabilities: at(&self.req_capabilities, i),
                fallback: at(&self.req_fallback, i),
                prohibited: at(&self.req_prohibited, i),
                prompt_context: at(&self.req_prompt_context, i),
            })
            .collect();
        GrantForm {
            agent: self.agent.clone(),
            task: self.task.clone(),
            summary: self.summary.clone(),
            max_submissions: self.max_submissions.clone(),
            expires_at: self.expires_at.clone(),
            mcp_requirements: self.mcp_requirements.clone(),
            rows,
        }
    }

    /// The values to show again when the form is refused.
    pub fn values(&self) -> FieldValues {
        let fields = self.fields();
        let mut rows: Vec<RowValues> = fields
            .rows
            .iter()
            .filter(|r| {
                !r.mcp_id.trim().is_empty()
                    || !r.agent.trim().is_empty()
                    || !r.capabilities.trim().is_empty()
            })
            .map(|r| RowValues {
                mcp_id: r.mcp_id.clone(),
                agent: r.agent.clone(),
                requirement: r.requirement.clone(),
                capabilities: r.capabilities.clone(),
                fallback: r.fallback.clone(),
                prohibited: r.prohibited.clone(),
                prompt_context: r.prompt_context.clone(),
            })
            .collect();
        rows.extend((0..BLANK_ROWS).map(|_| RowValues::blank()));
        FieldValues {
            agent: self.agent.clone(),
            task: self.task.clone(),
            summary: self.summary.clone(),
            max_submissions: self.max_submissions.clone(),
            expires_at: self.expires_at.clone(),
            mcp_requirements: self.mcp_requirements.clone(),
            rows,
        }
    }
}

/// Editor rows for an existing proposal's requirements, plus blank rows.
pub fn rows_of(requirements: &[crate::domain::proposal::McpRequirement]) -> Vec<RowValues> {
    let mut rows: Vec<RowValues> = requirements
        .iter()
        .map(|r| RowValues {
            mcp_id: r.mcp_id.clone(),
            agent: r.agent.clone(),
            requirement: serde_json::to_value(r.requirement)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            capabilities: r.capabilities.join(", "),
            fallback: serde_json::to_value(r.fallback)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            prohibited: r.prohibited_capabilities.join(", "),
            prompt_context: r.prompt_context.clone().unwrap_or_default(),
        })
        .collect();
    rows.extend((0..BLANK_ROWS).map(|_| RowValues::blank()));
    rows
}
