//! Browser pages and forms. Humans act only here; tokens never work here.
//! Every changing POST checks Origin/Referer and Sec-Fetch-Site, and the
//! service consumes its nonce inside the change's own transaction.

pub mod grant_form;
pub mod settings;
pub mod templates;

use askama::Template;
use axum::Router;
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum_extra::extract::CookieJar;
use axum_extra::extract::cookie::{Cookie, SameSite};
use serde::Deserialize;

use crate::domain::grant::Refusal;
use crate::domain::ids::{GrantId, is_reserved};
use crate::service::forms;
use crate::service::sessions::{self, LoginFailure, NewCookie, WebSession};
use crate::service::{Ctx, Error, pages};
use grant_form::GrantFormPost;
use templates::{Chrome, ErrorPage, FieldValues};

const COOKIE: &str = "writ_session";

/// Every browser route.
pub fn routes() -> Router<Ctx> {
    Router::new()
        .route("/", get(dashboard))
        .route("/user/login", get(login_page).post(login))
        .route("/user/logout", post(logout))
        .route("/static/writ.css", get(stylesheet))
        .route(
            "/{owner}/{repo}/agent-work-grants",
            get(repo_grants).post(prepare),
        )
        .route("/{owner}/{repo}/agent-work-grants/new", get(new_grant))
        .route("/{owner}/{repo}/agent-work-grants/{id}", get(grant_page))
        .route("/{owner}/{repo}/agent-work-grants/{id}/edit", post(edit))
        .route(
            "/{owner}/{repo}/agent-work-grants/{id}/approve",
            post(approve),
        )
        .route(
            "/{owner}/{repo}/agent-work-grants/{id}/withdraw",
            post(withdraw),
        )
        .route(
            "/{owner}/{repo}/settings/filesystem-context",
            get(settings::fs_context_page).post(settings::fs_context_change),
        )
        .route("/admin/mcp", get(settings::admin_mcp))
}

async fn stylesheet() -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/css; charset=utf-8"),
        )],
        include_str!("../../../templates/static/writ.css"),
    )
}

pub(crate) fn html(status: StatusCode, page: impl Template) -> Response {
    match page.render() {
        Ok(body) => (
            status,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            body,
        )
            .into_response(),
        Err(e) => crate::http::error::ApiError(Error::Internal(e.into())).into_response(),
    }
}

/// The 404 page, exactly as for something that does not exist.
pub fn not_found_page() -> Response {
    error_response(&Error::NotFound, Chrome::default())
}

pub(crate) fn error_response(err: &Error, chrome: Chrome) -> Response {
    if let Error::Internal(_) = err {
        let Error::Internal(cause) = err else {
            unreachable!()
        };
        return crate::http::error::ApiError(Error::Internal(anyhow::anyhow!("{cause:#}")))
            .into_response();
    }
    let heading = match err.status() {
        401 => "Log in failed",
        403 => "Not allowed",
        404 => "Not found",
        409 => "Conflict",
        422 => "Check the form",
        429 => "Too many attempts",
        _ => "Refused",
    };
    let status = StatusCode::from_u16(err.status()).unwrap_or(StatusCode::BAD_REQUEST);
    html(
        status,
        ErrorPage {
            chrome,
            heading: heading.to_owned(),
            message: match err {
                Error::NotFound => "There is nothing here, or you may not see it.".to_owned(),
                other => other.message(),
            },
        },
    )
}

/// Resolves the session cookie.
async fn current_session(ctx: &Ctx, jar: &CookieJar) -> Result<Option<WebSession>, Error> {
    match jar.get(COOKIE) {
        Some(c) => sessions::resolve(ctx, c.value()).await,
        None => Ok(None),
    }
}

/// The frame of a signed-in page, with a fresh logout nonce.
pub(crate) async fn chrome(
    ctx: &Ctx,
    session: &WebSession,
    notice: Option<String>,
) -> Result<Chrome, Error> {
    let login = session.user.as_ref().map(|u| u.login.clone());
    let logout_nonce = if login.is_some() {
        sessions::issue_nonces(ctx, session.id, &[("logout", String::new())])
            .await?
            .remove(0)
    } else {
        String::new()
    };
    Ok(Chrome {
        login,
        logout_nonce,
        notice,
    })
}

fn cookie(ctx: &Ctx, value: NewCookie) -> Cookie<'static> {
    Cookie::build((COOKIE, value.0))
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(ctx.config.public_is_https())
        .path("/")
        .build()
}

/// Refuses a changing POST unless it comes from Writ's own public origin.
fn check_origin(ctx: &Ctx, headers: &HeaderMap) -> Result<(), Error> {
    const REFUSED: Error = Error::Forbidden("this form was not posted from this site");
    let origin = ctx.config.public_origin();
    if headers
        .get("sec-fetch-site")
        .is_some_and(|site| site.as_bytes() != b"same-origin")
    {
        return Err(REFUSED);
    }
    if let Some(value) = headers.get(header::ORIGIN) {
        return if value.as_bytes() == origin.as_bytes() {
            Ok(())
        } else {
            Err(REFUSED)
        };
    }
    match headers.get(header::REFERER).and_then(|v| v.to_str().ok()) {
        Some(r) if r == origin || r.starts_with(&format!("{origin}/")) => Ok(()),
        _ => Err(REFUSED),
    }
}

/// A page that needs a signed-in human: the session, or a redirect to login.
pub(crate) async fn signed_in(ctx: &Ctx, jar: &CookieJar) -> Result<WebSession, Response> {
    match current_session(ctx, jar).await {
        Ok(Some(s)) if s.user.is_some() => Ok(s),
        Ok(_) => Err(Redirect::to("/user/login").into_response()),
        Err(e) => Err(error_response(&e, Chrome::default())),
    }
}

/// A changing POST: origin checked, session required (else 403).
pub(crate) async fn form_session(
    ctx: &Ctx,
    jar: &CookieJar,
    headers: &HeaderMap,
) -> Result<WebSession, Response> {
    if let Err(e) = check_origin(ctx, headers) {
        return Err(error_response(&e, Chrome::default()));
    }
    match current_session(ctx, jar).await {
        Ok(Some(s)) if s.user.is_some() => Ok(s),
        Ok(_) => Err(error_response(
            &Error::Forbidden("log in to do this"),
            Chrome::default(),
        )),
        Err(e) => Err(error_response(&e, Chrome::default())),
    }
}

pub(crate) async fn refusal(ctx: &Ctx, session: &WebSession, err: Error) -> Response {
    let chrome = chrome(ctx, session, None).await.unwrap_or_default();
    error_response(&err, chrome)
}

macro_rules! try_page {
    ($ctx:expr, $session:expr, $e:expr) => {
        match $e {
            Ok(v) => v,
            Err(err) => return refusal($ctx, $session, err).await,
        }
    };
}

async fn dashboard(State(ctx): State<Ctx>, jar: CookieJar) -> Response {
    let session = match signed_in(&ctx, &jar).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let d = try_page!(&ctx, &session, pages::dashboard(&ctx, &session).await);
    let chrome = try_page!(&ctx, &session, chrome(&ctx, &session, None).await);
    html(
        StatusCode::OK,
        templates::DashboardPage {
            chrome,
            awaiting_me: d.awaiting_me,
            issued: d.issued,
            repos: d.repos,
        },
    )
}

async fn login_form(
    ctx: &Ctx,
    session: &WebSession,
    status: StatusCode,
    login: String,
    notice: Option<String>,
) -> Response {
    match sessions::issue_nonces(ctx, session.id, &[("login", String::new())]).await {
        Ok(mut n) => html(
            status,
            templates::LoginPage {
                chrome: Chrome {
                    notice,
                    ..Chrome::default()
                },
                nonce: n.remove(0),
                login,
            },
        ),
        Err(e) => error_response(&e, Chrome::default()),
    }
}

async fn login_page(State(ctx): State<Ctx>, jar: CookieJar) -> Response {
    match current_session(&ctx, &jar).await {
        Ok(Some(s)) if s.user.is_some() => Redirect::to("/").into_response(),
        Ok(Some(pre)) => login_form(&ctx, &pre, StatusCode::OK, String::new(), None).await,
        Ok(None) => match sessions::start_anonymous(&ctx).await {
            Ok((pre, value)) => {
                let jar = jar.add(cookie(&ctx, value));
                (
                    jar,
                    login_form(&ctx, &pre, StatusCode::OK, String::new(), None).await,
                )
                    .into_response()
            }
            Err(e) => error_response(&e, Chrome::default()),
        },
        Err(e) => error_response(&e, Chrome::default()),
    }
}

#[derive(Deserialize)]
struct LoginForm {
    #[serde(default)]
    login: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    nonce: String,
}

async fn login(
    State(ctx): State<Ctx>,
    jar: CookieJar,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, FormRejection>,
) -> Response {
    if let Err(e) = check_origin(&ctx, &headers) {
        return error_response(&e, Chrome::default());
    }
    let pre = match current_session(&ctx, &jar).await {
        Ok(Some(s)) if s.user.is_none() => s,
        Ok(_) => {
            return error_response(
                &Error::Forbidden("open the login page again"),
                Chrome::default(),
            );
        }
        Err(e) => return error_response(&e, Chrome::default()),
    };
    let Ok(Form(form)) = form else {
        return error_response(
            &Error::Unprocessable("the login form is malformed".into()),
            Chrome::default(),
        );
    };
    match sessions::login(&ctx, &pre, &form.nonce, &form.login, &form.password).await {
        Ok(Ok(value)) => (jar.add(cookie(&ctx, value)), Redirect::to("/")).into_response(),
        Ok(Err(LoginFailure::BadCredentials)) => {
            let notice = Some("Wrong login or password.".to_owned());
            login_form(&ctx, &pre, StatusCode::UNAUTHORIZED, form.login, notice).await
        }
        Ok(Err(LoginFailure::Throttled)) => {
            let notice =
                Some("Too many failed attempts for this login; wait a few minutes.".to_owned());
            login_form(
                &ctx,
                &pre,
                StatusCode::TOO_MANY_REQUESTS,
                form.login,
                notice,
            )
            .await
        }
        Err(e) => error_response(&e, Chrome::default()),
    }
}

#[derive(Deserialize)]
struct NonceForm {
    #[serde(default)]
    nonce: String,
}

async fn logout(
    State(ctx): State<Ctx>,
    jar: CookieJar,
    headers: HeaderMap,
    form: Result<Form<NonceForm>, FormRejection>,
) -> Response {
    let session = match form_session(&ctx, &jar, &headers).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let nonce = form.map(|Form(f)| f.nonce).unwrap_or_default();
    match sessions::logout(&ctx, &session, &nonce).await {
        Ok(()) => (
            jar.remove(Cookie::build(COOKIE).path("/")),
            Redirect::to("/user/login"),
        )
            .into_response(),
        Err(e) => refusal(&ctx, &session, e).await,
    }
}

#[derive(Deserialize)]
struct ListParams {
    state: Option<String>,
    page: Option<String>,
}

async fn repo_grants(
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
    html(
        StatusCode::OK,
        templates::RepoGrantsPage {
            chrome,
            full_name: data.repo.full_name(),
            can_prepare: data.perm >= crate::domain::access::Permission::Write,
            states: vec![
                ("open", "Open (not withdrawn)"),
                ("awaiting_agent", "Awaiting agent"),
                ("awaiting_human", "Awaiting approval"),
                ("active", "Active"),
                ("revoked", "Withdrawn"),
                ("all", "All"),
            ],
            state,
            total: data.page.total,
            grants: data.page.items,
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
            full_name: data.repo.full_name(),
            nonce: data.nonce,
            bots: data.bots,
            fields,
            error,
        },
    )
}

async fn new_grant(
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

async fn prepare(
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
    let proposal: serde_json::Value =
        serde_json::from_str(data.grant.proposal.get()).unwrap_or_default();
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
    html(
        status,
        templates::GrantPage {
            chrome,
            max_submissions: proposal["limits"]["max_submissions"].as_i64().unwrap_or(0),
            proposal_pretty: serde_json::to_string_pretty(&proposal).unwrap_or_default(),
            grant: data.grant,
            events: data.events,
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
            receipts: data.receipts,
        },
    )
}

async fn grant_page(
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
struct ApproveForm {
    #[serde(default)]
    nonce: String,
    #[serde(default)]
    state_revision: String,
    #[serde(default)]
    acknowledge_warnings: Option<String>,
}

#[derive(Deserialize)]
struct WithdrawForm {
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

async fn edit(
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
    let result = forms::edit(
        &ctx,
        &session,
        &f.nonce,
        &owner,
        &repo,
        id,
        rev,
        &f.fields(),
    )
    .await;
    after_grant_form(&ctx, &session, &owner, &repo, id, result).await
}

async fn approve(
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
    let result = forms::approve(
        &ctx,
        &session,
        &f.nonce,
        &owner,
        &repo,
        id,
        rev,
        acknowledged,
    )
    .await;
    after_grant_form(&ctx, &session, &owner, &repo, id, result).await
}

async fn withdraw(
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
    let result = forms::withdraw(&ctx, &session, &f.nonce, &owner, &repo, id, rev, &f.reason).await;
    after_grant_form(&ctx, &session, &owner, &repo, id, result).await
}
