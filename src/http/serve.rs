//! The connection loop of `writ serve` (and of the test servers): accepts
//! TCP connections, bounds how many are open in all and per client address,
//! and serves each with hyper's HTTP/1.1 connection, under two timeouts of
//! its own:
//!
//! - the **header-read timeout** runs from the moment a connection opens,
//!   or from the first byte of a later request on it, until its request's
//!   headers are in;
//! - the **idle timeout** runs on a kept-alive connection from the end of
//!   one answer until the first byte of the next request.
//!
//! While a request is being answered (its handler running, its answer's
//! body being sent, however long a long-poll or a stream lasts) neither
//! runs. A connection over a cap is closed at once, before a byte is read.
//! The caps are per process: resource limits, not database invariants.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::Request;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;

use crate::config::Config;
use crate::domain::net::{TrustedProxies, address_key};

/// The connection limits of one server.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Longest wait for a request's headers.
    pub header_read: Duration,
    /// Longest idle wait between two requests of a kept-alive connection.
    pub idle: Duration,
    /// Open connections at most.
    pub total: usize,
    /// Open connections from one client address at most.
    pub per_address: usize,
    /// Peers without a per-address cap (the reverse proxies).
    pub exempt: TrustedProxies,
}

impl Limits {
    /// The configured limits, the total kept below this process's
    /// descriptor limit.
    pub fn from_config(config: &Config) -> Result<Limits, String> {
        let total = connection_cap(
            config.max_connections_total,
            config.max_connections,
            descriptor_limit(),
        );
        if total < config.max_connections_total as usize {
            tracing::warn!(
                configured = config.max_connections_total,
                effective = total,
                "max_connections_total lowered to fit the open-file limit (ulimit -n)"
            );
        }
        Ok(Limits {
            header_read: Duration::from_secs(config.header_read_timeout_seconds.max(1)),
            idle: Duration::from_secs(config.idle_timeout_seconds.max(1)),
            total,
            per_address: per_address_cap(config.max_connections_per_address, total),
            exempt: TrustedProxies::parse(&config.trusted_proxies)?,
        })
    }
}

/// The soft `RLIMIT_NOFILE` of this process, if it has one.
fn descriptor_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct it is given and nothing else.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    (rc == 0 && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

/// The connection cap: the configured one, but never more than 90% of the
/// descriptor limit less what the database (up to three descriptors per
/// pooled connection: a socket, or SQLite's database, WAL and shared-memory
/// files) and the process itself (64) may hold; at least 1.
pub fn connection_cap(configured: u32, db_connections: u32, nofile: Option<u64>) -> usize {
    let configured = configured.max(1) as usize;
    match nofile {
        Some(n) => {
            let reserve = 3 * u64::from(db_connections) + 64;
            let room = (n.saturating_mul(9) / 10).saturating_sub(reserve).max(1);
            configured.min(usize::try_from(room).unwrap_or(usize::MAX))
        }
        None => configured,
    }
}

/// The per-address cap: the configured one, but at most half the total, so
/// one address can never hold every connection.
pub fn per_address_cap(configured: u32, total: usize) -> usize {
    (configured.max(1) as usize).min((total / 2).max(1))
}

/// Serves `router` on `listener` until `shutdown` completes, then stops
/// accepting, lets every open connection finish its current request, and
/// returns when all are closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let caps = Arc::new(Caps {
        total: Arc::new(Semaphore::new(limits.total)),
        per_address: Mutex::default(),
        limits: limits.clone(),
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut builder = hyper::server::conn::http1::Builder::new();
    // Both timeouts are this module's (hyper's own would also end idle
    // keep-alive connections at the header-read timeout).
    builder.header_read_timeout(None);
    let builder = Arc::new(builder);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    accept_error(e).await;
                    continue;
                }
            },
        };
        let Some(admission) = caps.admit(peer.ip()) else {
            // Over a cap: closed before a byte is read.
            drop(stream);
            continue;
        };
        let router = router.clone();
        let builder = Arc::clone(&builder);
        let stop = stop_rx.clone();
        let limits = limits.clone();
        tokio::spawn(async move {
            serve_connection(stream, peer, router, &builder, &limits, stop).await;
            drop(admission);
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every open connection holds one permit of the total.
    let _all = caps
        .total
        .acquire_many(u32::try_from(limits.total).unwrap_or(u32::MAX))
        .await;
    Ok(())
}

/// As `axum::serve`: a failed accept that concerns one connection is
/// skipped; anything else (out of descriptors) is logged and waited out.
async fn accept_error(e: io::Error) {
    if matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    metrics::counter!("writ_connections_refused_total", "reason" => "accept_error").increment(1);
    tracing::error!("accept error: {e}");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// The open connections, in all and per address.
struct Caps {
    total: Arc<Semaphore>,
    per_address: Mutex<HashMap<String, usize>>,
    limits: Limits,
}

impl Caps {
    fn counts(&self) -> MutexGuard<'_, HashMap<String, usize>> {
        self.per_address
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A place for a connection from `ip`, or `None` over a cap.
    fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<Admission> {
        let Ok(permit) = Arc::clone(&self.total).try_acquire_owned() else {
            metrics::counter!("writ_connections_refused_total", "reason" => "total").increment(1);
            return None;
        };
        let key = if self.limits.exempt.contains(ip) {
            None
        } else {
            let key = address_key(ip);
            let mut counts = self.counts();
            let n = counts.entry(key.clone()).or_default();
            if *n >= self.limits.per_address {
                drop(counts);
                metrics::counter!("writ_connections_refused_total", "reason" => "per_address")
                    .increment(1);
                return None;
            }
            *n += 1;
            Some(key)
        };
        metrics::gauge!("writ_connections_open").increment(1.0);
        Some(Admission {
            caps: Arc::clone(self),
            key,
            _permit: permit,
        })
    }
}

/// One admitted connection's places; given back on drop.
struct Admission {
    caps: Arc<Caps>,
    key: Option<String>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Admission {
    fn drop(&mut self) {
        metrics::gauge!("writ_connections_open").decrement(1.0);
        if let Some(key) = self.key.take() {
            let mut counts = self.caps.counts();
            if let Some(n) = counts.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(&key);
                }
            }
        }
    }
}

/// Serves one connection until it closes, a timeout ends it, or shutdown
/// has let its current request finish.
async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    router: Router,
    builder: &hyper::server::conn::http1::Builder,
    limits: &Limits,
    mut stop: watch::Receiver<bool>,
) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        io: stream,
        activity: Arc::clone(&activity),
    });
    let service = {
        let activity = Arc::clone(&activity);
        hyper::service::service_fn(move |mut req: Request<Incoming>| {
            req.extensions_mut().insert(ConnectInfo(peer));
            let answering = Answering::new(Arc::clone(&activity));
            let mut router = router.clone();
            async move {
                let response = tower_service::Service::call(&mut router, req).await?;
                Ok::<_, Infallible>(response.map(|body| Tracked {
                    body,
                    _answering: answering,
                }))
            }
        })
    };
    let conn = builder.serve_connection(io, service).with_upgrades();
    tokio::pin!(conn);
    let mut stopping = *stop.borrow();
    if stopping {
        conn.as_mut().graceful_shutdown();
    }
    loop {
        let check = activity.next_check(limits);
        tokio::select! {
            _ = conn.as_mut() => break,
            () = tokio::time::sleep_until(check) => {
                if let Some(reason) = activity.expired(limits) {
                    metrics::counter!("writ_connections_timed_out_total", "reason" => reason)
                        .increment(1);
                    break;
                }
            }
            changed = stop.changed(), if !stopping => {
                stopping = true;
                if changed.is_ok() {
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// What a connection is doing, for its timeouts.
struct Activity(Mutex<Phase>);

#[derive(Clone, Copy)]
enum Phase {
    /// Waiting for (the rest of) a request's headers since then.
    Head(Instant),
    /// Answering this many requests.
    Answering(usize),
    /// Idle between requests since then.
    Idle(Instant),
}

impl Activity {
    fn new() -> Activity {
        Activity(Mutex::new(Phase::Head(Instant::now())))
    }

    fn phase(&self) -> MutexGuard<'_, Phase> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Bytes arrived: an idle connection starts a request.
    fn read_bytes(&self) {
        let mut phase = self.phase();
        if let Phase::Idle(_) = *phase {
            *phase = Phase::Head(Instant::now());
        }
    }

    fn begin(&self) {
        let mut phase = self.phase();
        *phase = match *phase {
            Phase::Answering(n) => Phase::Answering(n + 1),
            _ => Phase::Answering(1),
        };
    }

    fn end(&self) {
        let mut phase = self.phase();
        *phase = match *phase {
            Phase::Answering(n) if n > 1 => Phase::Answering(n - 1),
            _ => Phase::Idle(Instant::now()),
        };
    }

    /// When to look again.
    fn next_check(&self, limits: &Limits) -> Instant {
        match *self.phase() {
            Phase::Head(since) => since + limits.header_read,
            Phase::Idle(since) => since + limits.idle,
            Phase::Answering(_) => Instant::now() + limits.header_read.min(limits.idle),
        }
    }

    /// The timeout that has run out, if one has.
    fn expired(&self, limits: &Limits) -> Option<&'static str> {
        let now = Instant::now();
        match *self.phase() {
            Phase::Head(since) if now >= since + limits.header_read => Some("header_read"),
            Phase::Idle(since) if now >= since + limits.idle => Some("idle"),
            _ => None,
        }
    }
}

/// One request being answered, from its headers until its answer's body
/// has been sent (or dropped with the connection).
struct Answering(Arc<Activity>);

impl Answering {
    fn new(activity: Arc<Activity>) -> Answering {
        activity.begin();
        Answering(activity)
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// An answer's body that keeps its request counted as being answered.
struct Tracked {
    body: axum::body::Body,
    _answering: Answering,
}

impl Body for Tracked {
    type Data = <axum::body::Body as Body>::Data;
    type Error = <axum::body::Body as Body>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The TCP stream, noting when bytes arrive.
struct Watched {
    io: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read_bytes();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_fits_the_descriptor_limit() {
        assert_eq!(connection_cap(4096, 16, None), 4096);
        assert_eq!(connection_cap(4096, 16, Some(1_048_576)), 4096);
        // 1024 * 0.9 = 921, less 3 * 16 + 64.
        assert_eq!(connection_cap(4096, 16, Some(1024)), 809);
        assert_eq!(connection_cap(4096, 16, Some(256)), 118);
        assert_eq!(connection_cap(4096, 16, Some(10)), 1);
        assert_eq!(per_address_cap(256, 118), 59);
        assert_eq!(per_address_cap(256, 4096), 256);
        assert_eq!(per_address_cap(256, 1), 1);
    }
}
