//! The grant pages and forms: list, prepare, the grant page, and the edit,
//! approve and withdraw forms.

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum_extra::extract::CookieJar;
use serde::Deserialize;

use super::grant_form::{self, GrantFormPost};
use super::present::{self, ProposalText};
use super::templates::{self, FieldValues};
use super::{chrome, form_session, html, not_found_page, refusal, signed_in};
use crate::domain::grant::{GrantState, Refusal};
use crate::domain::ids::{GrantId, is_reserved};
use crate::domain::words;
use crate::service::forms::{self, FormTarget};
use crate::service::sessions::WebSession;
use crate::service::{Ctx, Error, pages};

#[derive(Deserialize)]
pub(super) struct ListParams {
    state: Option<String>,
    page: Option<String>,
}

pub(super) async fn repo_grants(
    State(ctx): State<Ctx>,
    jar: CookieJar,
    Path((owner, repo)): Path<(String, String)>,
    query: Result<Query<ListParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    if is_reserved(&owner) {
        return not_found_page();
    }
    let session = match signed_in(&ctx, &jar).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let Ok(Query(q)) = query else {
        return refusal(
            &ctx,
            &session,
            Error::Unprocessable("invalid filter".into()),
        )
        .await;
    };
    let state = q.state.unwrap_or_else(|| "open".to_owned());
    let states: Vec<&str> = match state.as_str() {
        "open" => vec!["awaiting_agent", "awaiting_human", "active"],
        "all" => vec!["awaiting_agent", "awaiting_human", "active", "revoked"],
        s => match crate::domain::grant::GrantState::parse(s) {
            Some(st) => vec![st.as_str()],
            None => {
                return refusal(
                    &ctx,
                    &session,
                    Error::Unprocessable("unknown state filter".into()),
                )
                .await;
            }
        },
    };
    let page = q
        .page
        .as_deref()
        .and_then(crate::domain::ids::parse_positive_i64)
        .unwrap_or(1) as u64;
    let limit = 30;
    let data = try_page!(
        &ctx,
        &session,
        pages::repo_grants(&ctx, &session, &owner, &repo, &states, page, limit).await
    );
    let chrome = try_page!(&ctx, &session, chrome(&ctx, &session, None).await);
    let last = (data.page.total.max(0) as u64).div_ceil(limit).max(1);
    let full_name = data.repo.full_name();
    let now = ctx.now();
    let mut states = vec![("open", "Open (not withdrawn)")];
    states.extend(GrantState::ALL.map(|s| (s.as_str(), words::state_label(s))));
    states.push(("all", "All"));
    html(
        StatusCode::OK,
        templates::RepoGrantsPage {
            chrome: chrome.in_repo(&full_name, &[]),
            can_prepare: data.perm >= crate::domain::access::Permission::Write,
            is_admin: data.perm == crate::domain::access::Permission::Admin,
            full_name,
            states,
            state,
            total: data.page.total,
            cards: data
                .page
                .items
                .iter()
                .map(|g| present::card(g, None, &[], now))
                .collect(),
            page,
            last_page: last,
            prev_page: (page > 1).then(|| page - 1),
            next_page: (page < last).then(|| page + 1),
        },
    )
}

async fn new_grant_form(
    ctx: &Ctx,
    session: &WebSession,
    owner: &str,
    repo: &str,
    status: StatusCode,
    fields: FieldValues,
    error: Option<String>,
) -> Response {
    let data = try_page!(
        ctx,
        session,
        pages::new_grant_page(ctx, session, owner, repo).await
    );
    let chrome = try_page!(ctx, session, chrome(ctx, session, None).await);
    let full_name = data.repo.full_name();
    let here = format!("/{full_name}/agent-work-grants/new");
    let chrome = chrome.in_repo(&full_name, &[(here.as_str(), "Prepare a grant")]);
    let fields = FieldValues {
        max_submissions: if fields.max_submissions.is_empty() {
            "10".into()
        } else {
            fields.max_submissions
        },
        rows: if fields.rows.is_empty() {
            grant_form::rows_of(&[])
        } else {
            fields.rows.clone()
        },
        ..fields
    };
    html(
        status,
        templates::NewGrantPage {
            chrome,
            full_name,
            nonce: data.nonce,
            bots: data.bots,
            fields,
            error,
        },
    )
}

pub(super) async fn new_grant(
    State(ctx): State<Ctx>,
    jar: CookieJar,
    Path((owner, repo)): Path<(String, String)>,
) -> Response {
    if is_reserved(&owner) {
        return not_found_page();
    }
    match signed_in(&ctx, &jar).await {
        Ok(session) => {
            new_grant_form(
                &ctx,
                &session,
                &owner,
                &repo,
                StatusCode::OK,
                FieldValues::default(),
                None,
            )
            .await
        }
        Err(r) => r,
    }
}

pub(super) async fn prepare(
    State(ctx): State<Ctx>,
    jar: CookieJar,
    headers: HeaderMap,
    Path((owner, repo)): Path<(String, String)>,
    form: Result<axum_extra::extract::Form<GrantFormPost>, axum_extra::extract::FormRejection>,
) -> Response {
    let session = match form_session(&ctx, &jar, &headers).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let Ok(axum_extra::extract::Form(form)) = form else {
        return refusal(
            &ctx,
            &session,
            Error::Unprocessable("the form is malformed".into()),
        )
        .await;
    };
    match forms::prepare(&ctx, &session, &form.nonce, &owner, &repo, &form.fields()).await {
        Ok(id) => Redirect::to(&format!("/{owner}/{repo}/agent-work-grants/{id}")).into_response(),
        Err(Error::Unprocessable(m)) => {
            new_grant_form(
                &ctx,
                &session,
                &owner,
                &repo,
                StatusCode::UNPROCESSABLE_ENTITY,
                form.values(),
                Some(m),
            )
            .await
        }
        Err(e) => refusal(&ctx, &session, e).await,
    }
}

async fn render_grant(
    ctx: &Ctx,
    session: &WebSession,
    owner: &str,
    repo: &str,
    id: GrantId,
    status: StatusCode,
    notice: Option<String>,
) -> Response {
    let data = try_page!(
        ctx,
        session,
        pages::grant_page(ctx, session, owner, repo, id).await
    );
    let chrome = try_page!(ctx, session, chrome(ctx, session, notice).await);
    let now = ctx.now();
    let text = ProposalText::of(&data.grant);
    let proposal = &text.json;
    let fields = FieldValues {
        agent: proposal["agent"]["login"].as_str().unwrap_or("").to_owned(),
        task: proposal["task"].as_str().unwrap_or("").to_owned(),
        summary: proposal["summary"].as_str().unwrap_or("").to_owned(),
        max_submissions: proposal["limits"]["max_submissions"].to_string(),
        expires_at: proposal["limits"]["expires_at"]
            .as_str()
            .unwrap_or("")
            .to_owned(),
        mcp_requirements: String::new(),
        rows: grant_form::rows_of(
            &serde_json::from_value::<Vec<crate::domain::proposal::McpRequirement>>(
                proposal["mcp_requirements"].clone(),
            )
            .unwrap_or_default(),
        ),
    };
    let g = &data.grant;
    let full_name = g.repository.full_name.clone();
    let (here, label) = (present::grant_path(g), format!("Grant #{}", g.id));
    let chrome = chrome.in_repo(&full_name, &[(here.as_str(), label.as_str())]);
    html(
        status,
        templates::GrantPage {
            chrome,
            said: present::state_of(g, &text, now),
            max_submissions: text.max_submissions,
            expires: text
                .expires_at
                .map(|at| templates::When::of(&at.to_text(), now)),
            expired: text.expired(now),
            created: templates::When::of(&g.created_at, now),
            reach: present::reach(&data.admission.decisions),
            approving_does: present::approving_does(g, &text, now),
            timeline: data
                .events
                .iter()
                .map(|e| {
                    present::timeline_line(
                        &e.event,
                        &e.actor_login,
                        e.detail.as_deref(),
                        &e.at,
                        e.state_revision,
                        now,
                    )
                })
                .collect(),
            receipts: data
                .receipts
                .iter()
                .map(|r| templates::ReceiptRow {
                    line: present::receipt_line(r, now),
                    request_key: r.request_key.clone(),
                    admission: r
                        .admission
                        .as_ref()
                        .map(|a| format!("{} (evaluation {})", a.status, a.evaluation_id)),
                })
                .collect(),
            proposal_pretty: serde_json::to_string_pretty(proposal).unwrap_or_default(),
            summary: text.summary.clone(),
            task: text.task.clone(),
            edit_nonce: data.edit_nonce,
            approve_nonce: data.approve_nonce,
            withdraw_nonce: data.withdraw_nonce,
            approve_blocked_reason: data.approve_blocked_reason,
            bots: Vec::new(),
            fields,
            sections: templates::AdmissionSections::of(&data.admission.decisions),
            fs_needed: fs_needed(&data.admission.decisions),
            admission: data.admission,
            viewer_is_admin: data.viewer_is_admin,
            fs_nonce: data.fs_nonce,
            grant: data.grant,
        },
    )
}

pub(super) async fn grant_page(
    State(ctx): State<Ctx>,
    jar: CookieJar,
    Path((owner, repo, id)): Path<(String, String, String)>,
) -> Response {
    if is_reserved(&owner) {
        return not_found_page();
    }
    let session = match signed_in(&ctx, &jar).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let id = try_page!(
        &ctx,
        &session,
        GrantId::parse(&id).map_err(|_| Error::NotFound)
    );
    render_grant(&ctx, &session, &owner, &repo, id, StatusCode::OK, None).await
}

/// The filesystem capabilities the preview's decisions need, pre-ticked.
fn fs_needed(decisions: &[crate::domain::admission::Decision]) -> Vec<(&'static str, bool)> {
    use crate::domain::admission::fs_context::FS_CAPABILITIES;
    let needed: Vec<&str> = decisions
        .iter()
        .filter(|d| d.grant_state.is_some())
        .flat_map(|d| d.normalized_capabilities.iter())
        .filter_map(|c| c.strip_prefix("filesystem.project."))
        .collect();
    FS_CAPABILITIES
        .iter()
        .map(|c| (*c, needed.contains(c)))
        .collect()
}

/// Answers a grant form: 303 to the grant page on success; the grant page
/// again with 409 when it changed since it was opened; a refusal page else.
async fn after_grant_form(
    ctx: &Ctx,
    session: &WebSession,
    owner: &str,
    repo: &str,
    id: GrantId,
    result: Result<(), Error>,
) -> Response {
    match result {
        Ok(()) => {
            Redirect::to(&format!("/{owner}/{repo}/agent-work-grants/{}", id.0)).into_response()
        }
        Err(Error::Refused { refusal: r, .. }) => {
            let notice = match r {
                Refusal::StateConflict => {
                    "This grant changed since you opened it. Here is its current state; nothing was changed."
                }
                Refusal::GrantRevoked => "This grant was withdrawn; nothing was changed.",
                _ => "This grant cannot do that now; nothing was changed.",
            };
            render_grant(
                ctx,
                session,
                owner,
                repo,
                id,
                StatusCode::CONFLICT,
                Some(notice.to_owned()),
            )
            .await
        }
        Err(Error::AdmissionBlocked { .. }) => {
            // The grant page shows the same decisions, blockers first, with
            // their recovery actions.
            let notice = "The admission blocks this approval; nothing was approved. \
                          The blocking decisions and what to do are listed below.";
            render_grant(
                ctx,
                session,
                owner,
                repo,
                id,
                StatusCode::CONFLICT,
                Some(notice.to_owned()),
            )
            .await
        }
        Err(Error::Unprocessable(m)) => {
            render_grant(
                ctx,
                session,
                owner,
                repo,
                id,
                StatusCode::UNPROCESSABLE_ENTITY,
                Some(m),
            )
            .await
        }
        Err(e @ Error::Forbidden(_)) => {
            // An expired or used nonce, or a missing permission: the grant
            // page again (with fresh forms), saying nothing was changed.
            let notice = format!("{} Nothing was changed.", e.message());
            render_grant(
                ctx,
                session,
                owner,
                repo,
                id,
                StatusCode::FORBIDDEN,
                Some(notice),
            )
            .await
        }
        Err(e) => refusal(ctx, session, e).await,
    }
}

#[derive(Deserialize)]
pub(super) struct ApproveForm {
    #[serde(default)]
    nonce: String,
    #[serde(default)]
    state_revision: String,
    #[serde(default)]
    acknowledge_warnings: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct WithdrawForm {
    #[serde(default)]
    nonce: String,
    #[serde(default)]
    state_revision: String,
    #[serde(default)]
    reason: String,
}

/// The common front of the three grant forms: origin, session, grant id,
/// parsed form and revision.
async fn grant_form<T>(
    ctx: &Ctx,
    jar: &CookieJar,
    headers: &HeaderMap,
    id: &str,
    form: Option<T>,
    revision: impl Fn(&T) -> &str,
) -> Result<(WebSession, GrantId, T, i64), Response> {
    let session = form_session(ctx, jar, headers).await?;
    let parsed = GrantId::parse(id)
        .map_err(|_| Error::NotFound)
        .and_then(|id| {
            let f = form.ok_or_else(|| Error::Unprocessable("the form is malformed".into()))?;
            let rev = forms::parse_revision(revision(&f))?;
            Ok((id, f, rev))
        });
    match parsed {
        Ok((id, f, rev)) => Ok((session, id, f, rev)),
        Err(e) => Err(refusal(ctx, &session, e).await),
    }
}

pub(super) async fn edit(
    State(ctx): State<Ctx>,
    jar: CookieJar,
    headers: HeaderMap,
    Path((owner, repo, id)): Path<(String, String, String)>,
    form: Result<axum_extra::extract::Form<GrantFormPost>, axum_extra::extract::FormRejection>,
) -> Response {
    let (session, id, f, rev) =
        match grant_form(&ctx, &jar, &headers, &id, form.ok().map(|f| f.0), |f| {
            &f.state_revision
        })
        .await
        {
            Ok(v) => v,
            Err(r) => return r,
        };
    let target = FormTarget {
        nonce: &f.nonce,
        owner: &owner,
        repo: &repo,
        id,
        revision: rev,
    };
    let result = forms::edit(&ctx, &session, target, &f.fields()).await;
    after_grant_form(&ctx, &session, &owner, &repo, id, result).await
}

pub(super) async fn approve(
    State(ctx): State<Ctx>,
    jar: CookieJar,
    headers: HeaderMap,
    Path((owner, repo, id)): Path<(String, String, String)>,
    form: Result<Form<ApproveForm>, FormRejection>,
) -> Response {
    let (session, id, f, rev) =
        match grant_form(&ctx, &jar, &headers, &id, form.ok().map(|f| f.0), |f| {
            &f.state_revision
        })
        .await
        {
            Ok(v) => v,
            Err(r) => return r,
        };
    let acknowledged = f.acknowledge_warnings.as_deref() == Some("on");
    let target = FormTarget {
        nonce: &f.nonce,
        owner: &owner,
        repo: &repo,
        id,
        revision: rev,
    };
    let result = forms::approve(&ctx, &session, target, acknowledged).await;
    after_grant_form(&ctx, &session, &owner, &repo, id, result).await
}

pub(super) async fn withdraw(
    State(ctx): State<Ctx>,
    jar: CookieJar,
    headers: HeaderMap,
    Path((owner, repo, id)): Path<(String, String, String)>,
    form: Result<Form<WithdrawForm>, FormRejection>,
) -> Response {
    let (session, id, f, rev) =
        match grant_form(&ctx, &jar, &headers, &id, form.ok().map(|f| f.0), |f| {
            &f.state_revision
        })
        .await
        {
            Ok(v) => v,
            Err(r) => return r,
        };
    let target = FormTarget {
        nonce: &f.nonce,
        owner: &owner,
        repo: &repo,
        id,
        revision: rev,
    };
    let result = forms::withdraw(&ctx, &session, target, &f.reason).await;
    after_grant_form(&ctx, &session, &owner, &repo, id, result).await
}

/// `GET /{owner}/{repo}/issues/{index}`: where receipts' `issue.url` points.
pub(super) async fn issue_page(
    State(ctx): State<Ctx>,
    jar: CookieJar,
    Path((owner, repo, index)): Path<(String, String, String)>,
) -> Response {
    if is_reserved(&owner) {
        return not_found_page();
    }
    let session = match signed_in(&ctx, &jar).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let Some(index) = crate::domain::ids::parse_positive_i64(&index) else {
        return refusal(&ctx, &session, Error::NotFound).await;
    };
    let issue = match pages::issue_page(&ctx, &session, &owner, &repo, index).await {
        Ok(i) => i,
        Err(e) => return refusal(&ctx, &session, e).await,
    };
    match chrome(&ctx, &session, None).await {
        Ok(chrome) => {
            let full_name = issue.repository.full_name.clone();
            let here = format!("/{full_name}/issues/{index}");
            let label = format!("Issue #{index}");
            html(
                StatusCode::OK,
                templates::IssuePage {
                    chrome: chrome.in_repo(&full_name, &[(here.as_str(), label.as_str())]),
                    created: templates::When::of(&issue.created_at, ctx.now()),
                    issue,
                },
            )
        }
        Err(e) => refusal(&ctx, &session, e).await,
    }
}
