//! Formats reporting-view rows as they stream (CSV, JSON array, or a plain
//! table), so neither the CLI nor the admin route holds a whole report.

use futures_util::Stream;

use super::{Error, Result};
use crate::domain::time::Timestamp;
use crate::store::Store;
use crate::store::reports::{self, Kind, Report, ReportFilter, ReportRow};

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `|`-separated columns with a header, for people.
    Table,
    /// RFC 4180 CSV with a header; cells are neutralized against formula
    /// injection ([`neutralize_cell`]).
    Csv,
    /// One JSON array of objects.
    Json,
}

impl Format {
    /// Parses `table`, `csv` or `json`.
    pub fn parse(raw: &str) -> Option<Format> {
        match raw {
            "table" => Some(Format::Table),
            "csv" => Some(Format::Csv),
            "json" => Some(Format::Json),
            _ => None,
        }
    }

    /// The HTTP content type.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Table => "text/plain; charset=utf-8",
            Format::Csv => "text/csv; charset=utf-8",
            Format::Json => "application/json",
        }
    }
}

/// Writes a report piece by piece.
pub struct Formatter {
    report: Report,
    format: Format,
    rows: u64,
}

impl Formatter {
    /// A formatter for one report in one format.
    pub fn new(report: Report, format: Format) -> Formatter {
        Formatter {
            report,
            format,
            rows: 0,
        }
    }

    fn names(&self) -> impl Iterator<Item = &'static str> {
        self.report.columns().iter().map(|(n, _)| *n)
    }

    /// What comes before the first row.
    pub fn header(&self) -> String {
        match self.format {
            Format::Table => format!("{}\n", self.names().collect::<Vec<_>>().join(" | ")),
            Format::Csv => csv_line(self.names().map(Some)),
            Format::Json => "[".to_owned(),
        }
    }

    /// One row.
    pub fn row(&mut self, row: &ReportRow) -> String {
        self.rows += 1;
        match self.format {
            Format::Table => {
                let cells: Vec<&str> = row.iter().map(|c| c.as_deref().unwrap_or("")).collect();
                format!("{}\n", cells.join(" | "))
            }
            Format::Csv => csv_line(row.iter().map(|c| c.as_deref())),
            Format::Json => {
                let mut object = serde_json::Map::new();
                for ((name, kind), cell) in self.report.columns().iter().zip(row) {
                    let value = match (kind, cell) {
                        (_, None) => serde_json::Value::Null,
                        (Kind::Int, Some(text)) => text
                            .parse::<i64>()
                            .map(serde_json::Value::from)
                            .unwrap_or_else(|_| serde_json::Value::from(text.clone())),
                        (Kind::Text, Some(text)) => serde_json::Value::from(text.clone()),
                    };
                    object.insert((*name).to_owned(), value);
                }
                let sep = if self.rows == 1 { "\n" } else { ",\n" };
                format!("{sep}{}", serde_json::Value::Object(object))
            }
        }
    }

    /// What comes after the last row.
    pub fn footer(&self) -> String {
        match self.format {
            Format::Json => "\n]\n".to_owned(),
            _ => String::new(),
        }
    }
}

/// A CSV cell a spreadsheet would not read as a formula (OWASP "CSV
/// injection"): a cell starting with `=`, `+`, `-`, `@`, a tab or a carriage
/// return gets a leading `'`; any other cell is unchanged.
pub fn neutralize_cell(cell: &str) -> std::borrow::Cow<'_, str> {
    if cell.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        std::borrow::Cow::Owned(format!("'{cell}"))
    } else {
        std::borrow::Cow::Borrowed(cell)
    }
}

/// One CSV record, every cell neutralized; the only place Writ writes CSV.
fn csv_line<'a>(cells: impl Iterator<Item = Option<&'a str>>) -> String {
    let mut writer = csv::Writer::from_writer(Vec::new());
    let _ = writer.write_record(cells.map(|c| neutralize_cell(c.unwrap_or("")).into_owned()));
    let bytes = writer.into_inner().unwrap_or_default();
    String::from_utf8(bytes).unwrap_or_default()
}

/// Builds a filter from raw options; times must be RFC 3339.
pub fn filter(
    repo: Option<String>,
    agent: Option<String>,
    since: Option<&str>,
    until: Option<&str>,
) -> Result<ReportFilter> {
    let time = |raw: Option<&str>, name: &str| -> Result<Option<String>> {
        raw.map(|t| {
            Timestamp::parse_rfc3339(t)
                .map(|t| t.to_text())
                .ok_or_else(|| Error::Invalid(format!("{name} must be an RFC 3339 time")))
        })
        .transpose()
    };
    for (name, value) in [("repo", &repo), ("agent", &agent)] {
        if value.as_deref().is_some_and(|v| v.contains('\0')) {
            return Err(Error::Invalid(format!("{name} must not contain U+0000")));
        }
    }
    Ok(ReportFilter {
        repo,
        agent,
        since: time(since, "since")?,
        until: time(until, "until")?,
    })
}

/// The formatted report as a stream of text chunks (header, rows, footer).
pub fn formatted(
    store: &Store,
    report: Report,
    filter: &ReportFilter,
    format: Format,
) -> impl Stream<Item = Result<String>> + Send + 'static {
    let rx = reports::stream(store, report, filter);
    let formatter = Formatter::new(report, format);
    let first = formatter.header();
    futures_util::stream::unfold(Some((rx, formatter, Some(first))), |state| async move {
        let (mut rx, mut formatter, pending) = state?;
        if let Some(header) = pending {
            return Some((Ok(header), Some((rx, formatter, None))));
        }
        match rx.recv().await {
            Some(Ok(row)) => {
                let chunk = formatter.row(&row);
                Some((Ok(chunk), Some((rx, formatter, None))))
            }
            Some(Err(e)) => Some((Err(Error::from(e)), None)),
            None => Some((Ok(formatter.footer()), None)),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        let mut f = Formatter::new(Report::Grants, Format::Json);
        let mut row: ReportRow = vec![None; Report::Grants.columns().len()];
        row[0] = Some("7".into());
        row[1] = Some("acme/w".into());
        let out = format!("{}{}{}", f.header(), f.row(&row), f.footer());
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v[0]["grant_id"], 7);
        assert_eq!(v[0]["repository"], "acme/w");
        assert!(v[0]["approver_login"].is_null());
        let mut c = Formatter::new(Report::Grants, Format::Csv);
        row[1] = Some("a,\"b\"".into());
        let line = c.row(&row);
        assert!(line.starts_with("7,\"a,\"\"b\"\"\","), "{line}");
        assert!(line.ends_with('\n'), "{line:?}");
        assert!(c.header().ends_with("last_admission_status\n"));
        row[1] = Some("=HYPERLINK(\"http://x\")".into());
        let line = c.row(&row);
        assert!(
            line.starts_with("7,\"'=HYPERLINK(\"\"http://x\"\")\","),
            "{line}"
        );
    }

    #[test]
    fn neutralizes_formula_cells() {
        for (cell, expected) in [
            ("=1+2", "'=1+2"),
            ("+1", "'+1"),
            ("-1", "'-1"),
            ("@SUM(A1)", "'@SUM(A1)"),
            ("\tx", "'\tx"),
            ("\rx", "'\rx"),
            ("'=x", "'=x"),
            ("", ""),
            ("acme/w", "acme/w"),
            ("a=b", "a=b"),
            (" =x", " =x"),
            ("\nx", "\nx"),
        ] {
            assert_eq!(neutralize_cell(cell), expected, "{cell:?}");
        }
    }
}
