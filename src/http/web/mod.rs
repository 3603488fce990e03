//! Browser pages and forms. Humans act only here; tokens never work here.
//! Every changing POST checks Origin/Referer and Sec-Fetch-Site, and the
//! service consumes its nonce inside the change's own transaction.

pub mod form_utf8;
pub mod grant_form;
pub mod present;
pub mod security;
pub mod settings;
pub mod templates;

use askama::Template;
use axum::Extension;
use axum::Router;
use axum::extract::rejection::FormRejection;
use axum::extract::{ConnectInfo, Form, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum_extra::extract::CookieJar;
use axum_extra::extract::cookie::{Cookie, SameSite};
use serde::Deserialize;

use crate::domain::access::Permission;
use crate::service::sessions::{self, LoginFailure, NewCookie, WebSession};
use crate::service::{Ctx, Error, pages};
use crate::store::repos::RepoRow;
use templates::{Chrome, ErrorPage};

const COOKIE: &str = "writ_session";

/// Every browser route.
pub fn routes() -> Router<Ctx> {
    Router::new()
        .route("/", get(dashboard))
        .route("/repositories", get(repositories))
        .route("/{owner}/{repo}", get(grants::repo_grants))
        .route("/user/login", get(login_page).post(login))
        .route("/user/logout", post(logout))
        .route("/static/writ.css", get(stylesheet))
        .route(
            "/{owner}/{repo}/agent-work-grants",
            get(grants::repo_grants).post(grants::prepare),
        )
        .route(
            "/{owner}/{repo}/agent-work-grants/new",
            get(grants::new_grant),
        )
        .route(
            "/{owner}/{repo}/agent-work-grants/{id}",
            get(grants::grant_page),
        )
        .route(
            "/{owner}/{repo}/agent-work-grants/{id}/edit",
            post(grants::edit),
        )
        .route(
            "/{owner}/{repo}/agent-work-grants/{id}/approve",
            post(grants::approve),
        )
        .route(
            "/{owner}/{repo}/agent-work-grants/{id}/withdraw",
            post(grants::withdraw),
        )
        .route(
            "/{owner}/{repo}/settings/filesystem-context",
            get(settings::fs_context_page).post(settings::fs_context_change),
        )
        .route("/admin", get(settings::admin))
        .route("/admin/mcp", get(settings::admin_mcp))
        .route("/admin/tool-grants", get(settings::admin_tool_grants))
        .route("/admin/webhooks", get(settings::admin_webhooks))
        .route("/{owner}/{repo}/issues/{index}", get(grants::issue_page))
        .layer(axum::middleware::from_fn(form_utf8::refuse_invalid_utf8))
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
    if let Error::StorageUnavailable(cause) = err {
        crate::http::error::storage_unavailable(cause);
    }
    let heading = match err.status() {
        401 => "Log in failed",
        403 => "Not allowed",
        404 => "Not found",
        409 => "Conflict",
        422 => "Check the form",
        429 => "Too many attempts",
        503 => "Temporarily unavailable",
        _ => "Refused",
    };
    let status = StatusCode::from_u16(err.status()).unwrap_or(StatusCode::BAD_REQUEST);
    let mut response = html(
        status,
        ErrorPage {
            chrome,
            heading: heading.to_owned(),
            message: match err {
                Error::NotFound => "There is nothing here, or you may not see it.".to_owned(),
                other => other.message(),
            },
        },
    );
    if status == StatusCode::SERVICE_UNAVAILABLE {
        crate::http::error::retry_later(&mut response);
    }
    response
}

/// The client's address key (`domain::net::address_key`): the TCP peer,
/// or the client a trusted proxy names in `X-Forwarded-For`.
fn client_address(
    ctx: &Ctx,
    peer: Option<Extension<ConnectInfo<std::net::SocketAddr>>>,
    headers: &HeaderMap,
) -> String {
    let peer = peer.map_or(
        std::net::IpAddr::from([0, 0, 0, 0]),
        |Extension(ConnectInfo(p))| p.ip(),
    );
    let forwarded: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    crate::domain::net::address_key(ctx.proxies.client(peer, &forwarded))
}

/// A `Retry-After` header on a response.
fn with_retry_after(mut response: Response, seconds: i64) -> Response {
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(seconds.max(1)));
    response
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
        is_admin: session.user.as_ref().is_some_and(|u| u.is_admin),
        logout_nonce,
        notice,
        crumbs: Vec::new(),
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

mod grants;

async fn dashboard(State(ctx): State<Ctx>, jar: CookieJar) -> Response {
    let session = match signed_in(&ctx, &jar).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let d = try_page!(&ctx, &session, pages::dashboard(&ctx, &session).await);
    let chrome = try_page!(&ctx, &session, chrome(&ctx, &session, None).await);
    let now = ctx.now();
    let section = |id, title, empty, s: pages::DashboardSection| templates::Section {
        id,
        title,
        total: s.total,
        more: s.total > s.grants.len() as i64,
        empty,
        cards: s
            .grants
            .into_iter()
            .map(|g| present::card(&g.grant, g.blocked, &g.receipts, now))
            .collect(),
    };
    let sections = vec![
        section(
            "awaiting-me",
            "Waiting for my approval",
            "Nothing waits for your approval.",
            d.awaiting_me,
        ),
        section(
            "awaiting-agent",
            "Waiting on an agent",
            "No grant waits for a bot's confirmation.",
            d.awaiting_agent,
        ),
        section("active", "Active", "No grant is active.", d.active),
        section(
            "finished",
            "Recently finished",
            "No grant has been withdrawn.",
            d.finished,
        ),
    ];
    let nothing_yet = sections.iter().all(|s| s.total == 0);
    let prepare_href = d
        .repos
        .iter()
        .find(|(_, p)| *p >= Permission::Write)
        .map(|(r, _)| format!("/{}/agent-work-grants/new", r.full_name()));
    html(
        StatusCode::OK,
        templates::DashboardPage {
            chrome,
            sections,
            nothing_yet,
            prepare_href,
            repos: repo_lines(&d.repos, &session),
        },
    )
}

/// Repositories with the person's role on each.
fn repo_lines(repos: &[(RepoRow, Permission)], session: &WebSession) -> Vec<templates::RepoLine> {
    let me = session.user.as_ref().map(|u| u.id);
    repos
        .iter()
        .map(|(r, p)| templates::RepoLine {
            full_name: r.full_name(),
            private: r.private,
            role: if Some(r.owner_id) == me {
                "owner"
            } else {
                p.as_str()
            },
        })
        .collect()
}

async fn repositories(State(ctx): State<Ctx>, jar: CookieJar) -> Response {
    let session = match signed_in(&ctx, &jar).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let repos = try_page!(&ctx, &session, pages::repositories(&ctx, &session).await);
    let chrome = try_page!(&ctx, &session, chrome(&ctx, &session, None).await);
    html(
        StatusCode::OK,
        templates::RepositoriesPage {
            chrome: chrome.at(&[("/repositories", "Repositories")]),
            repos: repo_lines(&repos, &session),
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

async fn login_page(
    State(ctx): State<Ctx>,
    peer: Option<Extension<ConnectInfo<std::net::SocketAddr>>>,
    headers: HeaderMap,
    jar: CookieJar,
) -> Response {
    match current_session(&ctx, &jar).await {
        Ok(Some(s)) if s.user.is_some() => Redirect::to("/").into_response(),
        Ok(Some(pre)) => login_form(&ctx, &pre, StatusCode::OK, String::new(), None).await,
        Ok(None) => {
            match sessions::start_anonymous(&ctx, &client_address(&ctx, peer, &headers)).await {
                Ok((_, value, nonce)) => {
                    let jar = jar.add(cookie(&ctx, value));
                    let page = templates::LoginPage {
                        chrome: Chrome::default(),
                        nonce,
                        login: String::new(),
                    };
                    (jar, html(StatusCode::OK, page)).into_response()
                }
                Err(e) => error_response(&e, Chrome::default()),
            }
        }
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
    peer: Option<Extension<ConnectInfo<std::net::SocketAddr>>>,
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
    let address = client_address(&ctx, peer, &headers);
    match sessions::login(
        &ctx,
        &pre,
        &form.nonce,
        &form.login,
        &form.password,
        &address,
    )
    .await
    {
        Ok(Ok(value)) => (jar.add(cookie(&ctx, value)), Redirect::to("/")).into_response(),
        Ok(Err(LoginFailure::BadCredentials)) => {
            let notice = Some("Wrong login or password.".to_owned());
            login_form(&ctx, &pre, StatusCode::UNAUTHORIZED, form.login, notice).await
        }
        Ok(Err(LoginFailure::Throttled(wait))) => {
            let notice =
                Some("Too many failed attempts for this login; wait a few minutes.".to_owned());
            let page = login_form(
                &ctx,
                &pre,
                StatusCode::TOO_MANY_REQUESTS,
                form.login,
                notice,
            )
            .await;
            with_retry_after(page, wait)
        }
        Ok(Err(LoginFailure::Busy(wait))) => {
            let notice = Some("The server is busy; try again in a moment.".to_owned());
            let page = login_form(
                &ctx,
                &pre,
                StatusCode::SERVICE_UNAVAILABLE,
                form.login,
                notice,
            )
            .await;
            with_retry_after(page, wait)
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
