//! Rules for the free text Writ stores byte-for-byte.

/// Longest title, in Unicode scalar values.
pub const TITLE_MAX_SCALARS: usize = 255;

/// Checks an issue title: 1–255 scalar values, not only whitespace, no NUL.
pub fn check_title(title: &str) -> Result<(), &'static str> {
    if title.contains('\0') {
        return Err("title must not contain U+0000");
    }
    if title.trim().is_empty() {
        return Err("title must not be empty or only whitespace");
    }
    if title.chars().count() > TITLE_MAX_SCALARS {
        return Err("title must be at most 255 characters");
    }
    Ok(())
}

/// Checks free text that may be empty: no NUL, at most `max_bytes`.
pub fn check_text(text: &str, max_bytes: usize) -> Result<(), &'static str> {
    if text.contains('\0') {
        return Err("text must not contain U+0000");
    }
    if text.len() > max_bytes {
        return Err("text is too long");
    }
    Ok(())
}

/// A copy of `text` fit to be recorded or shown: control characters removed,
/// at most `max_chars` characters.
pub fn printable(text: &str, max_chars: usize) -> String {
    text.chars()
        .filter(|c| !c.is_control())
        .take(max_chars)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles() {
        assert!(check_title("x").is_ok());
        assert!(check_title(" padded ").is_ok());
        assert!(check_title(&"é".repeat(255)).is_ok());
        assert!(check_title(&"é".repeat(256)).is_err());
        assert!(check_title("").is_err());
        assert!(check_title(" \t\n").is_err());
        assert!(check_title("a\0b").is_err());
    }
}
