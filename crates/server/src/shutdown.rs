//! What SIGTERM and SIGINT do to a server, decided once here.
//!
//! While the model loads there is nothing to drain: the temporary files of
//! writes under way (a registry pull) are removed and the process exits
//! with status 130, as other `gpack` commands do.
//!
//! While it serves, the first signal starts the drain:
//!
//! 1. readiness (`/readyz`) turns 503 at once, so that Kubernetes takes the
//!    pod out of its Service's endpoints and load balancers stop sending;
//! 2. for [`crate::Options::drain_grace`] (SIGTERM only) the server goes on
//!    accepting connections and serving new requests: requests routed to it
//!    before the endpoint change reached every proxy still succeed. A
//!    second signal, or SIGINT (a person at a terminal, no load balancer
//!    in front), skips this window;
//! 3. then the listener closes, and the requests in flight (streams and
//!    queued ones included) get [`crate::Options::drain_timeout`] to
//!    finish ([`crate::listen::serve`]); those still generating after it
//!    end with an error (code `server_shutting_down`).
//!
//! So the longest SIGTERM-to-exit time is grace + drain timeout + about
//! one second of flush: `terminationGracePeriodSeconds` should exceed it
//! (docs/DEPLOY.md).

use crate::probes::{Front, Phase};
use std::sync::Arc;
use std::time::Duration;

/// Which signal came.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Signal {
    Term,
    Int,
}

/// The process's SIGTERM and SIGINT handlers (installed once, inside the
/// runtime).
pub(crate) struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn install() -> std::io::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Signals {
                term: signal(SignalKind::terminate())?,
                int: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    /// The next signal.
    pub async fn next(&mut self) -> Signal {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.term.recv() => Signal::Term,
                _ = self.int.recv() => Signal::Int,
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            Signal::Int
        }
    }
}

/// Completes when the listener should stop accepting: after the first
/// signal and the grace window (see the module's documentation). A signal
/// while the model still loads exits the process.
pub(crate) async fn drain_start(mut signals: Signals, front: Arc<Front>, grace: Duration) {
    let first = signals.next().await;
    if front.start_drain() == Phase::Loading {
        log::warn!("{first:?} while the model was loading: exiting");
        gpack_format::remove_live_temp_files();
        std::process::exit(130);
    }
    if first == Signal::Term && !grace.is_zero() {
        log::info!(
            "SIGTERM: not ready (/readyz 503); still serving new requests for {grace:?} \
             (the drain grace), then finishing in-flight ones"
        );
        tokio::select! {
            () = tokio::time::sleep(grace) => {},
            s = signals.next() => log::info!("{s:?} during the drain grace: draining now"),
        }
    }
    log::info!("shutdown: no new connections, finishing in-flight requests");
}
