//! Accepting connections: HTTP/1.1 with a header-read timeout (which also
//! closes keep-alive connections idle for that long), a cap on open
//! connections, and a shutdown that drains in-flight requests for at most a
//! bounded time whatever slow or idle clients hold.
//!
//! Slow clients cost a task and a socket each until the header timeout
//! closes them; beyond the cap, new connections wait in the kernel's accept
//! backlog instead of taking memory.

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Connection limits ([`crate::Options`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// A request's headers must arrive within this (also: the longest a
    /// keep-alive connection may sit idle between requests).
    pub header_timeout: Duration,
    /// Open connections at most.
    pub max_connections: usize,
    /// After the shutdown signal, in-flight requests get this long.
    pub drain_timeout: Duration,
}

/// After the drain deadline, how long the responses that `at_deadline`
/// ended get to reach their clients (their last event and the stream's
/// end) before the connections are dropped.
pub(crate) const FLUSH: Duration = Duration::from_secs(1);

/// Serves `app` on `listener` until `shutdown` completes, then stops
/// accepting and lets in-flight requests finish (idle and half-sent
/// connections are closed at once). At `limits.drain_timeout` it calls
/// `at_deadline` (which ends the generations still running, so that their
/// responses end) and returns once every connection is closed, or
/// [`FLUSH`] later.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
    at_deadline: impl FnOnce(),
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        // A free slot first: at the cap, connections wait in the backlog.
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, _) = tokio::select! {
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    log::warn!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let conn =
            http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _ = conn.await;
            drop(permit);
        });
    }
    drop(listener);
    let drained = graceful.shutdown();
    tokio::pin!(drained);
    if tokio::time::timeout(limits.drain_timeout, &mut drained)
        .await
        .is_ok()
    {
        return;
    }
    log::warn!(
        "shutdown: requests still running after {:?}; ending them",
        limits.drain_timeout
    );
    at_deadline();
    if tokio::time::timeout(FLUSH, &mut drained).await.is_err() {
        log::warn!("shutdown: closing the connections still open");
    }
}
