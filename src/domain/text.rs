//! Rules for the free text Writ stores byte-for-byte.

/// Longest title, in Unicode scalar values.
pub const TITLE_MAX_SCALARS: usize = 255;

/// The characters Rust's `char::is_whitespace` (Unicode `White_Space`)
/// holds, listed so that a schema can spell "not only whitespace"; equal to
/// it (checked by a unit test).
pub const WHITESPACE: [char; 25] = [
    '\t', '\n', '\u{b}', '\u{c}', '\r', ' ', '\u{85}', '\u{a0}', '\u{1680}', '\u{2000}',
    '\u{2001}', '\u{2002}', '\u{2003}', '\u{2004}', '\u{2005}', '\u{2006}', '\u{2007}', '\u{2008}',
    '\u{2009}', '\u{200a}', '\u{2028}', '\u{2029}', '\u{202f}', '\u{205f}', '\u{3000}',
];

/// Checks an issue title: 1–255 scalar values, not only whitespace, no NUL.
pub fn check_title(title: &str) -> Result<(), &'static str> {
    if title.contains('\0') {
        return Err("title must not contain U+0000");
    }
    if title.chars().all(|c| WHITESPACE.contains(&c)) {
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

    #[test]
    fn whitespace_is_rusts() {
        for c in (0..=0x10ffff).filter_map(char::from_u32) {
            assert_eq!(WHITESPACE.contains(&c), c.is_whitespace(), "{c:?}");
        }
    }
}
