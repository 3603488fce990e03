//! Webhook subscriptions (setup privilege) and their delivery: every event
//! that commits has one delivery row per matching enabled subscription,
//! written in its transaction (`store::webhooks::enqueue`); the workers of
//! every process lease due rows, POST them (Standard Webhooks signatures,
//! or the `slack` format) to the address they checked, and record each
//! attempt, retrying with backoff until the delivery is delivered or given
//! up (docs/events.md "Webhooks").

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use super::admin::Setup;
use super::auth::Caller;
use super::events::{self, EventView};
use super::{Ctx, Error, Result};
use crate::config::{Resolver, WebhookSettings};
use crate::domain::scope::Scope;
use crate::domain::time::Timestamp;
use crate::domain::webhooks::{
    self as rules, DISABLE_AFTER_FAILED_DELIVERIES, ROTATION_OVERLAP_SECONDS,
};
use crate::store::webhooks::{
    self as store, Attempt, DeliveryRow, DueDelivery, SubscriptionFields, SubscriptionRow,
};

/// A subscription as the admin API shows it (never its secret).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SubscriptionView {
    pub id: i64,
    pub url: String,
    /// Event types and `prefix.*` patterns; empty: every type.
    pub types: Vec<String>,
    /// `owner/name` and `owner/*` patterns; empty: every repository.
    pub repos: Vec<String>,
    /// `standard` or `slack`.
    pub format: String,
    pub description: String,
    pub enabled: bool,
    /// Consecutive deliveries that failed for good; at 20 the
    /// subscription is disabled.
    pub consecutive_failures: i64,
    /// Set when repeated failures disabled it.
    pub disabled_at: Option<String>,
    /// While a rotated-out secret still signs: until when.
    pub previous_secret_until: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// A new subscription's answer: the view and, this once, its secret.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CreatedSubscription {
    #[serde(flatten)]
    pub subscription: SubscriptionView,
    /// `whsec_…`: shown only now.
    pub secret: String,
}

/// A rotation's answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RotatedSecret {
    /// The new secret (`whsec_…`), shown only now.
    pub secret: String,
    /// Until when the previous secret signs too.
    pub previous_secret_until: String,
}

/// A delivery and its latest attempt.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DeliveryView {
    pub id: i64,
    pub subscription_id: i64,
    pub event_id: i64,
    pub event_type: String,
    /// `pending`, `delivered` or `failed`.
    pub status: String,
    pub attempts: i64,
    pub next_attempt_at: Option<String>,
    pub last_attempt_at: Option<String>,
    pub last_status_code: Option<i64>,
    pub last_error: Option<String>,
    pub delivered_at: Option<String>,
    pub created_at: String,
}

impl DeliveryView {
    fn from_row(d: DeliveryRow) -> DeliveryView {
        DeliveryView {
            next_attempt_at: (d.status == "pending").then_some(d.next_attempt_at),
            id: d.id,
            subscription_id: d.subscription_id,
            event_id: d.event_id,
            event_type: d.event_type,
            status: d.status,
            attempts: d.attempts,
            last_attempt_at: d.last_attempt_at,
            last_status_code: d.last_status_code,
            last_error: d.last_error,
            delivered_at: d.delivered_at,
            created_at: d.created_at,
        }
    }
}

/// `POST /api/v1/admin/webhooks`; absent members take their defaults.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionInput {
    /// `https://` (`http://` too with `webhooks.allow_private_targets`);
    /// its host must resolve to addresses Writ may connect to (400
    /// otherwise: not a property of the text).
    pub url: String,
    /// Empty: every type.
    #[serde(default)]
    #[schema(value_type = Vec<super::schema::EventTypePatternText>, inline, max_items = 50)]
    pub types: Vec<String>,
    /// Empty: every repository (and the events of none).
    #[serde(default)]
    #[schema(value_type = Vec<super::schema::WebhookRepoPatternText>, inline, max_items = 50)]
    pub repos: Vec<String>,
    /// `standard` (default) or `slack`.
    #[serde(default)]
    #[schema(value_type = Option<super::schema::WebhookFormatText>, inline)]
    pub format: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<super::schema::WebhookDescriptionText>, inline)]
    pub description: Option<String>,
    /// Default true.
    #[serde(default)]
    pub enabled: Option<bool>,
}

/// `PATCH /api/v1/admin/webhooks/{id}`: the members to change.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionPatch {
    pub url: Option<String>,
    #[schema(value_type = Option<Vec<super::schema::EventTypePatternText>>, inline, max_items = 50)]
    pub types: Option<Vec<String>>,
    #[schema(value_type = Option<Vec<super::schema::WebhookRepoPatternText>>, inline, max_items = 50)]
    pub repos: Option<Vec<String>>,
    #[schema(value_type = Option<super::schema::WebhookFormatText>, inline)]
    pub format: Option<String>,
    #[schema(value_type = Option<super::schema::WebhookDescriptionText>, inline)]
    pub description: Option<String>,
    pub enabled: Option<bool>,
}

fn view(row: &SubscriptionRow, now: Timestamp) -> SubscriptionView {
    let list = |json: &str| serde_json::from_str::<Vec<String>>(json).unwrap_or_default();
    let rotating = row
        .previous_until
        .as_deref()
        .filter(|until| *until > now.to_text().as_str());
    SubscriptionView {
        id: row.id,
        url: row.url.clone(),
        types: list(&row.types),
        repos: list(&row.repos),
        format: row.format.clone(),
        description: row.description.clone(),
        enabled: row.enabled,
        consecutive_failures: row.consecutive_failures,
        disabled_at: row.disabled_at.clone(),
        previous_secret_until: rotating.map(str::to_owned),
        created_at: row.created_at.clone(),
        updated_at: row.updated_at.clone(),
    }
}

/// A checked subscription, ready to store.
struct Checked {
    url: String,
    types_json: String,
    repos_json: String,
    types: Vec<&'static str>,
    repos: Vec<(String, Option<String>)>,
    format: String,
    description: String,
    enabled: bool,
}

impl Checked {
    fn fields(&self) -> SubscriptionFields<'_> {
        SubscriptionFields {
            url: &self.url,
            types_json: &self.types_json,
            repos_json: &self.repos_json,
            types: &self.types,
            repos: &self.repos,
            format: &self.format,
            description: &self.description,
            enabled: self.enabled,
        }
    }
}

/// Checks a subscription's members; an enabled one's target must resolve
/// to addresses Writ may connect to.
async fn check(ctx: &Ctx, input: SubscriptionInput) -> Result<Checked> {
    let allow_private = ctx.config.webhooks.allow_private_targets;
    let target = rules::parse_url(&input.url, allow_private).map_err(Error::Invalid)?;
    let types = rules::parse_types(&input.types).map_err(Error::Invalid)?;
    let repos = rules::parse_repos(&input.repos)
        .map_err(Error::Invalid)?
        .into_iter()
        .map(|p| (p.owner, p.name))
        .collect();
    let format = input.format.unwrap_or_else(|| "standard".to_owned());
    if !matches!(format.as_str(), "standard" | "slack") {
        return Err(Error::Invalid("format must be standard or slack".into()));
    }
    let description = input.description.unwrap_or_default();
    if description.chars().count() > rules::MAX_DESCRIPTION_CHARS || description.contains('\0') {
        return Err(Error::Invalid(format!(
            "description must be at most {} characters without NUL",
            rules::MAX_DESCRIPTION_CHARS
        )));
    }
    let enabled = input.enabled.unwrap_or(true);
    if enabled {
        resolve(&ctx.config.webhooks, &target.host, target.port)
            .await
            .map_err(Error::Invalid)?;
    }
    let json = |v: &Vec<String>| serde_json::to_string(v).map_err(anyhow::Error::from);
    Ok(Checked {
        url: target.url.to_string(),
        types_json: json(&input.types)?,
        repos_json: json(&input.repos)?,
        types,
        repos,
        format,
        description,
        enabled,
    })
}

/// Creates a subscription; its secret is in the answer only.
pub async fn create(ctx: &Ctx, _: Setup, input: SubscriptionInput) -> Result<CreatedSubscription> {
    let checked = check(ctx, input).await?;
    let secret = rules::new_secret(&rand::random::<[u8; 32]>());
    let now = ctx.now();
    let mut tx = ctx.store.write().await?;
    let id =
        store::insert_subscription(&mut tx, &checked.fields(), &secret, &now.to_text()).await?;
    let row = store::subscription(&mut tx, id)
        .await?
        .ok_or(Error::NotFound)?;
    tx.commit().await?;
    Ok(CreatedSubscription {
        subscription: view(&row, now),
        secret,
    })
}

/// Every subscription (`read:admin`).
pub async fn list(ctx: &Ctx, caller: &Caller) -> Result<Vec<SubscriptionView>> {
    caller.require_admin(Scope::ReadAdmin)?;
    every(ctx).await
}

/// Every subscription, for the admin page.
pub async fn every(ctx: &Ctx) -> Result<Vec<SubscriptionView>> {
    let mut tx = ctx.store.read().await?;
    let rows = store::subscriptions(&mut tx).await?;
    tx.commit().await?;
    let now = ctx.now();
    Ok(rows.iter().map(|r| view(r, now)).collect())
}

/// One subscription (`read:admin`).
pub async fn get(ctx: &Ctx, caller: &Caller, id: i64) -> Result<SubscriptionView> {
    caller.require_admin(Scope::ReadAdmin)?;
    let mut tx = ctx.store.read().await?;
    let row = store::subscription(&mut tx, id)
        .await?
        .ok_or(Error::NotFound)?;
    tx.commit().await?;
    Ok(view(&row, ctx.now()))
}

/// Changes the members a patch names; enabling again resets the failure
/// count.
pub async fn update(
    ctx: &Ctx,
    _: Setup,
    id: i64,
    patch: SubscriptionPatch,
) -> Result<SubscriptionView> {
    let current = {
        let mut tx = ctx.store.read().await?;
        let row = store::subscription(&mut tx, id).await?;
        tx.commit().await?;
        row.ok_or(Error::NotFound)?
    };
    let list = |json: &str| serde_json::from_str::<Vec<String>>(json).unwrap_or_default();
    let input = SubscriptionInput {
        url: patch.url.unwrap_or(current.url),
        types: patch.types.unwrap_or_else(|| list(&current.types)),
        repos: patch.repos.unwrap_or_else(|| list(&current.repos)),
        format: Some(patch.format.unwrap_or(current.format)),
        description: Some(patch.description.unwrap_or(current.description)),
        enabled: Some(patch.enabled.unwrap_or(current.enabled)),
    };
    let checked = check(ctx, input).await?;
    let now = ctx.now();
    let mut tx = ctx.store.write().await?;
    if store::update_subscription(&mut tx, id, &checked.fields(), &now.to_text()).await? != 1 {
        return Err(Error::NotFound);
    }
    let row = store::subscription(&mut tx, id)
        .await?
        .ok_or(Error::NotFound)?;
    tx.commit().await?;
    Ok(view(&row, now))
}

/// Deletes a subscription; its deliveries stay on record.
pub async fn delete(ctx: &Ctx, _: Setup, id: i64) -> Result<()> {
    let mut tx = ctx.store.write().await?;
    if store::delete_subscription(&mut tx, id, &ctx.now().to_text()).await? != 1 {
        return Err(Error::NotFound);
    }
    tx.commit().await?;
    Ok(())
}

/// A new secret; the previous one signs too for 24 h.
pub async fn rotate_secret(ctx: &Ctx, _: Setup, id: i64) -> Result<RotatedSecret> {
    let now = ctx.now();
    let until = now.plus_seconds(ROTATION_OVERLAP_SECONDS).to_text();
    let secret = rules::new_secret(&rand::random::<[u8; 32]>());
    let mut tx = ctx.store.write().await?;
    let current = store::subscription(&mut tx, id)
        .await?
        .ok_or(Error::NotFound)?;
    store::rotate_secret(
        &mut tx,
        id,
        &secret,
        &current.secret,
        &until,
        &now.to_text(),
    )
    .await?;
    tx.commit().await?;
    Ok(RotatedSecret {
        secret,
        previous_secret_until: until,
    })
}

/// The newest deliveries of a subscription (`read:admin`).
pub async fn deliveries(
    ctx: &Ctx,
    caller: &Caller,
    id: i64,
    limit: u64,
) -> Result<Vec<DeliveryView>> {
    caller.require_admin(Scope::ReadAdmin)?;
    deliveries_of(ctx, id, limit).await
}

/// The newest deliveries of a subscription, for the admin page.
pub async fn deliveries_of(ctx: &Ctx, id: i64, limit: u64) -> Result<Vec<DeliveryView>> {
    let mut tx = ctx.store.read().await?;
    store::subscription(&mut tx, id)
        .await?
        .ok_or(Error::NotFound)?;
    let rows = store::deliveries_of(&mut tx, id, limit).await?;
    tx.commit().await?;
    Ok(rows.into_iter().map(DeliveryView::from_row).collect())
}

/// Makes a delivery due now (pending again, its attempts kept).
pub async fn retry(ctx: &Ctx, _: Setup, id: i64, delivery_id: i64) -> Result<DeliveryView> {
    let now = ctx.now().to_text();
    let mut tx = ctx.store.write().await?;
    store::subscription(&mut tx, id)
        .await?
        .ok_or(Error::NotFound)?;
    store::delivery(&mut tx, id, delivery_id)
        .await?
        .ok_or(Error::NotFound)?;
    store::retry(&mut tx, delivery_id, &now).await?;
    let row = store::delivery(&mut tx, id, delivery_id)
        .await?
        .ok_or(Error::NotFound)?;
    tx.commit().await?;
    Ok(DeliveryView::from_row(row))
}

/// The addresses `host` resolves to (an IP literal is itself; `localhost`
/// is loopback and `.invalid` names never resolve, without asking anyone; a
/// name in `webhooks.hosts` is resolved there, others by the system
/// resolver unless `webhooks.resolver` is `static`), refused unless Writ
/// may connect to every one of them.
async fn resolve(
    settings: &WebhookSettings,
    host: &str,
    port: u16,
) -> std::result::Result<Vec<SocketAddr>, String> {
    let addrs: Vec<SocketAddr> = if let Ok(ip) = host.parse::<IpAddr>() {
        vec![SocketAddr::new(ip, port)]
    } else if let Some(ip) = rules::reserved_name(host)? {
        vec![SocketAddr::new(ip, port)]
    } else if let Some(ips) = settings.hosts.get(&host.to_ascii_lowercase()) {
        ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect()
    } else if settings.resolver == Resolver::Static {
        return Err("the target's host name is not in webhooks.hosts \
                    (webhooks.resolver = \"static\")"
            .into());
    } else {
        tokio::net::lookup_host((host, port))
            .await
            .map_err(|_| "the target's host name does not resolve".to_owned())?
            .collect()
    };
    if addrs.is_empty() {
        return Err("the target's host name does not resolve".into());
    }
    if let Some(refused) = addrs
        .iter()
        .find(|a| !rules::may_connect(a.ip(), settings.allow_private_targets))
    {
        return Err(format!(
            "the target resolves to a {:?} address, which webhooks may not reach \
             (webhooks.allow_private_targets)",
            rules::classify(refused.ip())
        )
        .to_lowercase());
    }
    Ok(addrs)
}

/// The HTTP client's name resolution: [`resolve`], so a connection goes
/// only to an address that was checked, at the moment it is made.
struct CheckedResolver(WebhookSettings);

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let settings = self.0.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs = resolve(&settings, &host, 0).await?;
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The client every delivery of this process goes through: no proxy from
/// the environment, no redirects, 10 s per attempt, names resolved by
/// [`CheckedResolver`], TLS with the system roots and the optional
/// `webhooks.extra_ca_file`.
fn client(settings: &WebhookSettings) -> anyhow::Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(ATTEMPT_TIMEOUT)
        .user_agent(concat!("Writ-Webhooks/", env!("CARGO_PKG_VERSION")))
        .dns_resolver(std::sync::Arc::new(CheckedResolver(settings.clone())));
    if let Some(path) = &settings.extra_ca_file {
        let pem = std::fs::read(path)
            .map_err(|e| anyhow::anyhow!("webhooks.extra_ca_file {path}: {e}"))?;
        for cert in reqwest::Certificate::from_pem_bundle(&pem)? {
            builder = builder.add_root_certificate(cert);
        }
    }
    Ok(builder.build()?)
}

/// How long a worker holds a delivery it took: beyond the 10 s of an
/// attempt, so a process that died mid-attempt frees it within a minute.
const LEASE_SECONDS: i64 = 60;
/// Deliveries one worker takes at a time.
const BATCH: u64 = 16;
/// A receiver has this long to answer.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of a receiver's answer that is read (and discarded).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Delivers due deliveries until the process ends. With none due it looks
/// again when events commit (at most every [`IDLE_LOOK`], so a stream of
/// commits costs a few looks a second, not one per commit) and every
/// second, for retries coming due.
pub async fn run(ctx: Ctx) {
    if !ctx.config.webhooks.deliver {
        return;
    }
    let client = match client(&ctx.config.webhooks) {
        Ok(client) => client,
        Err(e) => {
            tracing::error!(error = %e, "webhook deliveries disabled: no HTTP client");
            return;
        }
    };
    let mut commits = ctx.store.events().subscribe();
    loop {
        let taken = deliver_due(&ctx, &client).await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "webhook deliveries: cannot take due deliveries");
            0
        });
        if taken == 0 {
            tokio::time::sleep(IDLE_LOOK).await;
            let _ = tokio::time::timeout(Duration::from_secs(1), commits.changed()).await;
        }
    }
}

/// The least time between two looks that found nothing due.
const IDLE_LOOK: Duration = Duration::from_millis(100);

/// Takes up to [`BATCH`] due deliveries, attempts them side by side and
/// records every attempt in one transaction; how many it took.
pub async fn deliver_due(ctx: &Ctx, client: &reqwest::Client) -> Result<usize> {
    let now = ctx.now();
    let lease = now.plus_seconds(LEASE_SECONDS);
    let mut tx = ctx.store.write().await?;
    let due = store::claim_due(&mut tx, &now.to_text(), &lease.to_text(), BATCH).await?;
    if due.is_empty() {
        tx.commit().await?;
        return Ok(0);
    }
    let ids: Vec<i64> = due.iter().map(|d| d.event_id).collect();
    let events: HashMap<i64, EventView> = crate::store::events::by_ids(&mut tx, &ids)
        .await?
        .into_iter()
        .map(|row| (row.id, EventView::from_row(row)))
        .collect();
    tx.commit().await?;
    let tried = futures_util::future::join_all(
        due.iter()
            .map(|d| attempt(ctx, client, d, events.get(&d.event_id))),
    )
    .await;
    if let Err(e) = record(ctx, &due, &tried).await {
        // The leases run out and the deliveries are attempted again: at
        // least once.
        tracing::warn!(error = %e, "webhook deliveries: attempts not recorded");
    }
    Ok(due.len())
}

/// How one attempt went, at `at`.
struct Tried {
    at: Timestamp,
    /// The receiver's status, if it answered.
    status: Option<u16>,
    /// Why it failed; `None` for a 2xx.
    error: Option<String>,
    /// When to try again; `None` when delivered or given up.
    next: Option<String>,
}

async fn attempt(
    ctx: &Ctx,
    client: &reqwest::Client,
    d: &DueDelivery,
    event: Option<&EventView>,
) -> Tried {
    let sent = match event {
        Some(event) => send(ctx, client, d, event).await,
        None => Err("the event is gone".to_owned()),
    };
    let at = ctx.now();
    let made = u32::try_from(d.attempts + 1).unwrap_or(u32::MAX);
    let settings = &ctx.config.webhooks;
    let next = || {
        let jitter = rand::random::<f64>() * 2.0 - 1.0;
        let delay = rules::retry_delay(made, &settings.retry_schedule_seconds, jitter);
        // Not truncated to whole seconds: a 1 s step with -20% jitter is
        // 0.8 s, not an immediate retry.
        let next = at.plus(delay);
        let give_up = Timestamp::parse_text(&d.created_at)
            .unwrap_or(at)
            .plus_seconds(settings.give_up_after_seconds as i64);
        (next <= give_up).then(|| next.to_text())
    };
    let (status, error) = match sent {
        Ok(status) if (200..300).contains(&status) => (Some(status), None),
        Ok(status) => (Some(status), Some(format!("HTTP {status}"))),
        Err(e) => (None, Some(e)),
    };
    let next = error.is_some().then(next).flatten();
    let label = match (&error, &next) {
        (None, _) => "delivered",
        (Some(_), Some(_)) => "retry",
        (Some(_), None) => "failed",
    };
    metrics::counter!("writ_webhook_deliveries_total", "outcome" => label).increment(1);
    Tried {
        at,
        status,
        error,
        next,
    }
}

/// Records the attempts of a batch in one transaction; a delivery that
/// makes 20 failed in a row disables its subscription (`webhook.disabled`,
/// in the same transaction).
async fn record(ctx: &Ctx, due: &[DueDelivery], tried: &[Tried]) -> Result<()> {
    let mut tx = ctx.store.write().await?;
    for (d, t) in due.iter().zip(tried) {
        let at = t.at.to_text();
        let attempt = match &t.error {
            None => Attempt::Delivered {
                status: i64::from(t.status.unwrap_or(200)),
            },
            Some(error) => Attempt::Failed {
                status: t.status.map(i64::from),
                error,
                next: t.next.as_deref(),
            },
        };
        let failures =
            store::record_attempt(&mut tx, d.id, d.subscription_id, attempt, &at).await?;
        if failures >= DISABLE_AFTER_FAILED_DELIVERIES
            && store::disable(&mut tx, d.subscription_id, &at).await?
        {
            let data = json!({"subscription_id": d.subscription_id, "failed_deliveries": failures});
            events::emit(&mut tx, "webhook.disabled", &at, None, None, None, data).await?;
        }
    }
    tx.commit().await?;
    Ok(())
}

/// One attempt: the receiver's status, or why there was none. Nothing in
/// the error names the URL (a Slack URL is itself a credential).
async fn send(
    ctx: &Ctx,
    client: &reqwest::Client,
    d: &DueDelivery,
    event: &EventView,
) -> std::result::Result<u16, String> {
    let settings = &ctx.config.webhooks;
    let target = rules::parse_url(&d.url, settings.allow_private_targets)?;
    if target.host.parse::<IpAddr>().is_ok() {
        // The client resolves names through the check; an address in the
        // URL it connects to as is, so it is checked here.
        resolve(settings, &target.host, target.port).await?;
    }
    let now = ctx.now();
    let body = if d.format == "slack" {
        serde_json::to_vec(&json!({"text": slack_line(ctx, event)}))
    } else {
        serde_json::to_vec(event)
    }
    .map_err(|e| e.to_string())?;
    let mut request = client
        .post(target.url.clone())
        .header("content-type", "application/json");
    if d.format != "slack" {
        let id = format!("msg_writ_{}", d.id);
        let timestamp = now.datetime().unix_timestamp();
        let mut keys = Vec::new();
        keys.extend(rules::key_of(&d.secret));
        if d.previous_until.as_deref() > Some(now.to_text().as_str()) {
            keys.extend(d.previous_secret.as_deref().and_then(rules::key_of));
        }
        request = request
            .header("webhook-id", &id)
            .header("webhook-timestamp", timestamp.to_string())
            .header(
                "webhook-signature",
                rules::signature_header(&keys, &id, timestamp, &body),
            );
    }
    let mut response = request
        .body(body)
        .send()
        .await
        .map_err(|e| describe(&e.without_url()))?;
    let status = response.status().as_u16();
    let mut read = 0;
    while let Ok(Some(chunk)) = response.chunk().await {
        read += chunk.len();
        if read >= MAX_ANSWER_BYTES {
            break;
        }
    }
    Ok(status)
}

/// Why an attempt got no answer, without the URL: a time-out, or the
/// innermost cause (a refused target, a refused connection, a TLS error).
fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return "the receiver did not answer within 10 s".into();
    }
    let mut cause: &dyn std::error::Error = e;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    let text = if e.is_connect() {
        format!("could not connect: {cause}")
    } else {
        format!("the request failed: {cause}")
    };
    text.chars().take(300).collect()
}

fn slack_line(ctx: &Ctx, e: &EventView) -> String {
    let page = match (&e.repository, &e.grant) {
        (Some(r), Some(g)) => Some(format!(
            "{}/{}/agent-work-grants/{}",
            ctx.config.public_base(),
            r.full_name,
            g.id
        )),
        _ => None,
    };
    rules::slack_text(
        &e.kind,
        e.repository.as_ref().map(|r| r.full_name.as_str()),
        e.grant.as_ref().map(|g| (g.id, g.state.as_str())),
        e.actor.as_ref().map(|a| a.login.as_str()),
        page.as_deref(),
    )
}

/// Sets the outbox gauges: deliveries due now, and how long the oldest has
/// been due. Called when `/metrics` is read.
pub async fn export_backlog(ctx: &Ctx) {
    let now = ctx.now();
    let backlog = async {
        let mut tx = ctx.store.single().await?;
        store::backlog(&mut tx, &now.to_text()).await
    };
    if let Ok((due, oldest)) = backlog.await {
        let age = oldest
            .as_deref()
            .and_then(Timestamp::parse_text)
            .map_or(0.0, |t| {
                (now.datetime() - t.datetime()).as_seconds_f64().max(0.0)
            });
        metrics::gauge!("writ_webhook_backlog_due").set(due as f64);
        metrics::gauge!("writ_webhook_backlog_oldest_seconds").set(age);
    }
}
