//! Repository settings (project filesystem context) and the admin pages
//! (MCP health, bots' tool grants).

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum_extra::extract::CookieJar;
use axum_extra::extract::Form;
use serde::Deserialize;

use super::templates::{self, Chrome};
use super::{chrome, error_response, form_session, html, not_found_page, refusal, signed_in};
use crate::domain::admission::fs_context::FS_CAPABILITIES;
use crate::domain::ids::is_reserved;
use crate::service::sessions::WebSession;
use crate::service::{Ctx, Error, fs_context, health, policy, webhooks};

async fn render(
    ctx: &Ctx,
    session: &WebSession,
    owner: &str,
    repo: &str,
    status: StatusCode,
    error: Option<String>,
) -> Response {
    let page = match fs_context::page(ctx, session, owner, repo).await {
        Ok(p) => p,
        Err(e) => return refusal(ctx, session, e).await,
    };
    let chrome = match chrome(ctx, session, None).await {
        Ok(c) => c,
        Err(e) => return error_response(&e, Chrome::default()),
    };
    let full_name = page.repo.full_name();
    let here = format!("/{full_name}/settings/filesystem-context");
    let chrome = chrome.in_repo(&full_name, &[(here.as_str(), "Project filesystem context")]);
    html(
        status,
        templates::FsContextPage {
            chrome,
            full_name,
            current: page.current,
            capabilities: FS_CAPABILITIES
                .iter()
                .map(|c| (*c, page.capabilities.contains(*c)))
                .collect(),
            history: page.history,
            nonce: page.nonce,
            error,
        },
    )
}

/// `GET /{owner}/{repo}/settings/filesystem-context`
pub async fn fs_context_page(
    State(ctx): State<Ctx>,
    jar: CookieJar,
    Path((owner, repo)): Path<(String, String)>,
) -> Response {
    if is_reserved(&owner) {
        return not_found_page();
    }
    match signed_in(&ctx, &jar).await {
        Ok(session) => render(&ctx, &session, &owner, &repo, StatusCode::OK, None).await,
        Err(r) => r,
    }
}

#[derive(Deserialize)]
pub struct FsForm {
    #[serde(default)]
    nonce: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    capabilities: Vec<String>,
}

/// `POST /{owner}/{repo}/settings/filesystem-context`
pub async fn fs_context_change(
    State(ctx): State<Ctx>,
    jar: CookieJar,
    headers: HeaderMap,
    Path((owner, repo)): Path<(String, String)>,
    form: Result<Form<FsForm>, axum_extra::extract::FormRejection>,
) -> Response {
    let session = match form_session(&ctx, &jar, &headers).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let Ok(Form(form)) = form else {
        return refusal(
            &ctx,
            &session,
            Error::Unprocessable("the form is malformed".into()),
        )
        .await;
    };
    match fs_context::change(
        &ctx,
        &session,
        &form.nonce,
        &owner,
        &repo,
        &form.action,
        &form.capabilities,
    )
    .await
    {
        Ok(()) => {
            let back = came_from(&ctx, &headers)
                .unwrap_or_else(|| format!("/{owner}/{repo}/settings/filesystem-context"));
            Redirect::to(&back).into_response()
        }
        Err(Error::Unprocessable(m)) => {
            render(
                &ctx,
                &session,
                &owner,
                &repo,
                StatusCode::UNPROCESSABLE_ENTITY,
                Some(m),
            )
            .await
        }
        Err(e) => refusal(&ctx, &session, e).await,
    }
}

/// A site admin's session and page frame at `crumbs`; anyone else gets the
/// 404 page, as if the page did not exist.
async fn admin_frame(
    ctx: &Ctx,
    jar: &CookieJar,
    crumbs: &[(&str, &str)],
) -> Result<(WebSession, Chrome), Response> {
    let session = signed_in(ctx, jar).await?;
    if !session.user.as_ref().is_some_and(|u| u.is_admin) {
        return Err(refusal(ctx, &session, Error::NotFound).await);
    }
    match chrome(ctx, &session, None).await {
        Ok(c) => Ok((session, c.at(crumbs))),
        Err(e) => Err(error_response(&e, Chrome::default())),
    }
}

const ADMIN: (&str, &str) = ("/admin", "Admin");

/// `GET /admin` (site admins): where the admin pages are.
pub async fn admin(State(ctx): State<Ctx>, jar: CookieJar) -> Response {
    match admin_frame(&ctx, &jar, &[ADMIN]).await {
        Ok((_, chrome)) => html(StatusCode::OK, templates::AdminPage { chrome }),
        Err(r) => r,
    }
}

/// `GET /admin/mcp` (site admins)
pub async fn admin_mcp(State(ctx): State<Ctx>, jar: CookieJar) -> Response {
    let (session, chrome) =
        match admin_frame(&ctx, &jar, &[ADMIN, ("/admin/mcp", "MCP health")]).await {
            Ok(v) => v,
            Err(r) => return r,
        };
    let report = match health::report(&ctx).await {
        Ok(r) => r,
        Err(e) => return refusal(&ctx, &session, e).await,
    };
    html(
        StatusCode::OK,
        templates::AdminMcpPage {
            chrome,
            report,
            catalog_text: ctx.catalog.text.clone(),
        },
    )
}

/// `GET /admin/tool-grants` (site admins): each bot's MCP tool grants, read
/// only (they are changed with the CLI or the admin API).
pub async fn admin_tool_grants(State(ctx): State<Ctx>, jar: CookieJar) -> Response {
    let crumbs = [ADMIN, ("/admin/tool-grants", "Bots' MCP tool grants")];
    let (session, chrome) = match admin_frame(&ctx, &jar, &crumbs).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    match policy::every_bot(&ctx).await {
        Ok(bots) => html(StatusCode::OK, templates::ToolGrantsPage { chrome, bots }),
        Err(e) => refusal(&ctx, &session, e).await,
    }
}

/// `GET /admin/webhooks` (site admins): each webhook subscription and its
/// latest deliveries, read only (changed with the admin API).
pub async fn admin_webhooks(State(ctx): State<Ctx>, jar: CookieJar) -> Response {
    let crumbs = [ADMIN, ("/admin/webhooks", "Webhooks")];
    let (session, chrome) = match admin_frame(&ctx, &jar, &crumbs).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let loaded = async {
        let mut hooks = Vec::new();
        for subscription in webhooks::every(&ctx).await? {
            let deliveries = webhooks::deliveries_of(&ctx, subscription.id, 20).await?;
            hooks.push(templates::WebhookCard {
                subscription,
                deliveries,
            });
        }
        Ok::<_, Error>(hooks)
    };
    match loaded.await {
        Ok(hooks) => html(StatusCode::OK, templates::WebhooksPage { chrome, hooks }),
        Err(e) => refusal(&ctx, &session, e).await,
    }
}

/// The same-origin page a form was posted from (its path and query), so the
/// answer can send the person back there; never another origin.
fn came_from(ctx: &Ctx, headers: &HeaderMap) -> Option<String> {
    let referer = headers.get(axum::http::header::REFERER)?.to_str().ok()?;
    let path = referer.strip_prefix(&ctx.config.public_origin())?;
    (path.starts_with('/') && !path.starts_with("//") && !path.contains('\\'))
        .then(|| path.to_owned())
}
