//! Receipts: the content fingerprint that makes a request key idempotent, and
//! the outcome a receipt shows once its issue moved or went away.

use serde::Serialize;

use super::proposal::sha256_hex;

/// What became of a submission's issue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReceiptStatus {
    /// The issue still exists at the committed repository and index.
    Submitted,
    /// The issue was deleted.
    IssueDeleted,
    /// The issue exists but is no longer at that repository and index.
    IssueBindingChanged,
}

impl ReceiptStatus {
    /// The wire and view name.
    pub fn as_str(self) -> &'static str {
        match self {
            ReceiptStatus::Submitted => "submitted",
            ReceiptStatus::IssueDeleted => "issue_deleted",
            ReceiptStatus::IssueBindingChanged => "issue_binding_changed",
        }
    }
}

/// The outcome from where the issue was committed and where it is now.
pub fn receipt_status(committed: (i64, i64), current: Option<(i64, i64)>) -> ReceiptStatus {
    match current {
        None => ReceiptStatus::IssueDeleted,
        Some(now) if now == committed => ReceiptStatus::Submitted,
        Some(_) => ReceiptStatus::IssueBindingChanged,
    }
}

/// SHA-256 over the canonical JSON of `{proposal_digest, title, body}`: two
/// submissions are the same content iff all three are byte-equal.
pub fn content_digest(proposal_digest: &str, title: &str, body: &str) -> String {
    #[derive(Serialize)]
    struct Content<'a> {
        proposal_digest: &'a str,
        title: &'a str,
        body: &'a str,
    }
    let canonical = serde_jcs::to_string(&Content {
        proposal_digest,
        title,
        body,
    })
    .expect("strings always serialize");
    sha256_hex(canonical.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses() {
        assert_eq!(
            receipt_status((1, 7), Some((1, 7))),
            ReceiptStatus::Submitted
        );
        assert_eq!(receipt_status((1, 7), None), ReceiptStatus::IssueDeleted);
        assert_eq!(
            receipt_status((1, 7), Some((2, 1))),
            ReceiptStatus::IssueBindingChanged
        );
        assert_eq!(
            receipt_status((1, 7), Some((1, 8))),
            ReceiptStatus::IssueBindingChanged
        );
    }

    #[test]
    fn content_is_byte_exact() {
        let d = "a".repeat(64);
        let base = content_digest(&d, "Title", "body");
        assert_eq!(base, content_digest(&d, "Title", "body"));
        assert_ne!(base, content_digest(&d, "Title ", "body"));
        assert_ne!(base, content_digest(&d, "Title", "body\n"));
        assert_ne!(base, content_digest(&"b".repeat(64), "Title", "body"));
        // No ambiguity between fields.
        assert_ne!(content_digest(&d, "ab", "c"), content_digest(&d, "a", "bc"));
    }
}
