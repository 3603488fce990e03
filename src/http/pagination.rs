//! List query parsing (`page`, `limit`, `state`; anything else is 400) and
//! the `X-Total-Count` / `Link` headers.

use axum::http::{HeaderMap, HeaderName, HeaderValue, header};

use crate::domain::grant::GrantState;
use crate::domain::ids::parse_positive_i64;
use crate::service::agent::ListParams;
use crate::service::{Error, Result};

/// Default page size.
pub const DEFAULT_LIMIT: u64 = 30;

/// Largest page number accepted (larger ones are 400, not an empty page).
pub const MAX_PAGE: u64 = crate::domain::tools::MAX_PAGE;

/// The raw query as parsed, for building links.
#[derive(Debug, Clone)]
pub struct ListQuery {
    /// Validated parameters.
    pub params: ListParams,
    /// The `state` value as given, if any.
    pub state: Option<String>,
}

/// Parses `page`, `limit` and `state`; unknown or repeated parameters are 400.
pub fn parse_list_query(raw: Option<&str>, max_limit: u64) -> Result<ListQuery> {
    let (mut page, mut limit, mut state) = (None, None, None);
    for (key, value) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
        let slot = match key.as_ref() {
            "page" => &mut page,
            "limit" => &mut limit,
            "state" => &mut state,
            _ => return Err(Error::Invalid("unknown query parameter".into())),
        };
        if slot.replace(value.into_owned()).is_some() {
            return Err(Error::Invalid("a query parameter is repeated".into()));
        }
    }
    let page = match page.as_deref() {
        None => 1,
        Some(p) => parse_positive_i64(p)
            .filter(|p| *p as u64 <= MAX_PAGE)
            .ok_or_else(|| {
                Error::Invalid(format!("page must be an integer from 1 to {MAX_PAGE}"))
            })? as u64,
    };
    let limit = match limit.as_deref() {
        None => DEFAULT_LIMIT,
        Some(l) => {
            let v: i64 =
                parse_signed(l).ok_or_else(|| Error::Invalid("limit must be an integer".into()))?;
            if v <= 0 {
                DEFAULT_LIMIT
            } else {
                (v as u64).min(max_limit)
            }
        }
    };
    let states = match state.as_deref() {
        None => vec!["awaiting_agent", "awaiting_human", "active"],
        Some("all") => GrantState::ALL.iter().map(|s| s.as_str()).collect(),
        Some(s) => vec![
            GrantState::parse(s)
                .ok_or_else(|| {
                    Error::Invalid(
                        "state must be awaiting_agent, awaiting_human, active, revoked or all"
                            .into(),
                    )
                })?
                .as_str(),
        ],
    };
    Ok(ListQuery {
        params: ListParams {
            page,
            limit,
            states,
        },
        state,
    })
}

/// An integer with an optional leading `-`; huge magnitudes saturate.
fn parse_signed(raw: &str) -> Option<i64> {
    let (neg, digits) = match raw.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, raw),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let magnitude = digits.parse::<i64>().unwrap_or(i64::MAX);
    Some(if neg { -magnitude } else { magnitude })
}

/// Adds `X-Total-Count` and `Link` (first, prev, next, last) as absolute URLs.
pub fn link_headers(headers: &mut HeaderMap, base_url: &str, query: &ListQuery, total: i64) {
    let limit = query.params.limit;
    let page = query.params.page;
    let last = ((total.max(0) as u64).div_ceil(limit)).max(1);
    let state = query
        .state
        .as_deref()
        .map(|s| {
            format!(
                "&state={}",
                form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>()
            )
        })
        .unwrap_or_default();
    let link =
        |p: u64, rel: &str| format!("<{base_url}?page={p}&limit={limit}{state}>; rel=\"{rel}\"");
    let mut links = Vec::new();
    if page < last {
        links.push(link(page + 1, "next"));
    }
    if page > 1 {
        links.push(link(page - 1, "prev"));
    }
    links.push(link(1, "first"));
    links.push(link(last, "last"));
    if let Ok(v) = HeaderValue::from_str(&links.join(", ")) {
        headers.insert(header::LINK, v);
    }
    headers.insert(
        HeaderName::from_static("x-total-count"),
        HeaderValue::from(total.max(0)),
    );
    headers.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("X-Total-Count, Link"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_clamps() {
        let q = parse_list_query(Some("page=2&limit=1000"), 50).unwrap();
        assert_eq!((q.params.page, q.params.limit), (2, 50));
        assert_eq!(
            parse_list_query(Some("limit=0"), 50).unwrap().params.limit,
            30
        );
        assert_eq!(
            parse_list_query(Some("limit=-5"), 50).unwrap().params.limit,
            30
        );
        for bad in [
            "page=0",
            "page=-1",
            "page=abc",
            "page=",
            "x=1",
            "state=nope",
            "page=1&page=2",
            "limit=abc",
        ] {
            assert!(parse_list_query(Some(bad), 50).is_err(), "{bad}");
        }
        assert_eq!(parse_list_query(None, 50).unwrap().params.states.len(), 3);
        assert_eq!(
            parse_list_query(Some("state=all"), 50)
                .unwrap()
                .params
                .states
                .len(),
            4
        );
    }

    #[test]
    fn links() {
        let q = parse_list_query(Some("page=2&limit=10&state=active"), 50).unwrap();
        let mut h = HeaderMap::new();
        link_headers(&mut h, "http://x/api/v1/agent-work-grants", &q, 31);
        let link = h.get(header::LINK).unwrap().to_str().unwrap();
        assert!(link.contains(
            "<http://x/api/v1/agent-work-grants?page=3&limit=10&state=active>; rel=\"next\""
        ));
        assert!(link.contains("page=1&limit=10&state=active>; rel=\"prev\""));
        assert!(link.contains("page=4&limit=10&state=active>; rel=\"last\""));
        assert_eq!(h.get("x-total-count").unwrap(), "31");
    }
}
