//! The server's life cycle as probes see it, and the front the listener
//! serves from the moment it binds.
//!
//! * `GET /livez`: 200 whenever the process answers HTTP (while the model
//!   loads, while it serves, while it drains). It never looks at the model:
//!   a liveness probe that failed on a slow load or a damaged file would
//!   make Kubernetes restart a process a restart cannot fix.
//! * `GET /readyz`: 503 while the model loads (opening, `--verify before`,
//!   binding the weights, compiling the template), 200 once requests can be
//!   served, and 503 again from the first SIGTERM/SIGINT on (the drain) or
//!   when the server can no longer generate (the decoding thread stopped,
//!   the weights failed their background check: what `/health` reports).
//!
//! Both answer without the API key: their bodies are one status word.
//!
//! The listener binds before the model loads and serves [`Front`]: the two
//! probes always, and every other route through [`Ready`], which answers
//! 503 (code `model_loading`) until [`Front::install`] hands it the loaded
//! server's state.

use crate::api::ApiError;
use crate::http::AppState;
use crate::metrics::Metrics;
use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

/// Where the server is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Bound; the model is being opened, verified and bound.
    Loading = 0,
    /// Serving.
    Serving = 1,
    /// A shutdown signal came: finishing what is in flight.
    Draining = 2,
}

/// What every connection's router shares from the moment the socket binds.
pub(crate) struct Front {
    phase: AtomicU8,
    /// The loaded server's state, once loaded.
    app: OnceLock<Arc<AppState>>,
    /// `/metrics`' counters (they exist before the model does, so the
    /// metrics port answers from its start).
    pub metrics: Arc<Metrics>,
}

impl Front {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Front {
            phase: AtomicU8::new(Phase::Loading as u8),
            app: OnceLock::new(),
            metrics,
        }
    }

    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Acquire) {
            0 => Phase::Loading,
            1 => Phase::Serving,
            _ => Phase::Draining,
        }
    }

    /// The model is loaded: routes serve `app` from now on, and readiness
    /// turns 200 (unless a drain already began).
    pub fn install(&self, app: Arc<AppState>) {
        let _ = self.app.set(app);
        let _ = self.phase.compare_exchange(
            Phase::Loading as u8,
            Phase::Serving as u8,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// A shutdown signal came: readiness turns 503 for good. The phase it
    /// left.
    pub fn start_drain(&self) -> Phase {
        match self.phase.swap(Phase::Draining as u8, Ordering::AcqRel) {
            0 => Phase::Loading,
            1 => Phase::Serving,
            _ => Phase::Draining,
        }
    }

    /// Ends the generations still running (the drain deadline), if the
    /// engine was started.
    pub fn abort(&self) {
        if let Some(a) = self.app.get() {
            a.engine.abort();
        }
    }

    /// Why the server cannot take requests now (`None`: it can).
    fn not_ready(&self) -> Option<&'static str> {
        match self.phase() {
            Phase::Loading => return Some("loading"),
            Phase::Draining => return Some("draining"),
            Phase::Serving => {}
        }
        let app = self.app.get()?;
        if !app.engine.is_alive() {
            Some("engine stopped")
        } else if app.integrity_failure().is_some() {
            Some("integrity check failed")
        } else {
            None
        }
    }
}

/// `GET /livez`.
pub(crate) async fn livez() -> Response {
    Json(json!({"status": "alive"})).into_response()
}

/// `GET /readyz`.
pub(crate) async fn readyz(State(f): State<Arc<Front>>) -> Response {
    match f.not_ready() {
        None => Json(json!({"status": "ready"})).into_response(),
        Some(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": why})),
        )
            .into_response(),
    }
}

/// The loaded server's state, as a handler's argument: a request that
/// arrives while the model loads gets 503 (code `model_loading`) instead.
pub(crate) struct Ready(pub Arc<AppState>);

impl FromRequestParts<Arc<Front>> for Ready {
    type Rejection = ApiError;

    async fn from_request_parts(_: &mut Parts, f: &Arc<Front>) -> Result<Self, ApiError> {
        match f.app.get() {
            Some(a) => Ok(Ready(a.clone())),
            None => Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "the model is still loading (GET /readyz answers 200 once it is served)",
            )
            .with_code("model_loading")),
        }
    }
}
