//! A connection to one registry: the `oci-client` client (protocol, auth,
//! token flow, ranged GETs), its credentials and a small tokio runtime the
//! blocking API drives.
//!
//! Why `oci-client` for everything: it does the distribution protocol we
//! need — the `/v2/` challenge, Basic and the Bearer token flow, `HEAD` of
//! blobs, cross-repository mounts, monolithic streamed uploads, raw
//! manifests, and `pull_blob_stream_partial`, a ranged `GET` (`Range:
//! bytes=N-`) that resumes a blob — so no request is hand-written here.

use crate::error::{Credentials, Error, Operation, Result};
use crate::reference::is_loopback;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};

/// How to reach a registry.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Plain HTTP; refused unless the registry is on a loopback address.
    pub insecure: bool,
    /// Credentials.
    pub auth: crate::auth::Flags,
}

/// An authenticated client for the registry of one reference.
pub struct Registry {
    pub(crate) client: Client,
    pub(crate) auth: RegistryAuth,
    pub(crate) credentials: Credentials,
    pub(crate) host: String,
    pub(crate) insecure: bool,
    pub(crate) rt: tokio::runtime::Runtime,
}

impl Registry {
    /// Connects to `r`'s registry for `op` (TLS verified unless `insecure`
    /// on loopback) and runs the auth handshake.
    pub fn connect(r: &Reference, opts: &Options, op: RegistryOperation) -> Result<Registry> {
        let host = r.resolve_registry().to_string();
        if opts.insecure && !is_loopback(&host) {
            return Err(Error::InsecureNotLoopback { host });
        }
        let protocol = if opts.insecure {
            ClientProtocol::HttpsExcept(vec![host.clone()])
        } else {
            ClientProtocol::Https
        };
        let config = ClientConfig {
            protocol,
            use_monolithic_push: true,
            ..Default::default()
        };
        // The process's TLS crypto (see Cargo.toml); a second install is a
        // no-op error.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (auth, credentials) = crate::auth::resolve(&host, &opts.auth)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(crate::error::io(
                "start",
                std::path::Path::new("tokio runtime"),
            ))?;
        let reg = Registry {
            client: Client::new(config),
            auth,
            credentials,
            host,
            insecure: opts.insecure,
            rt,
        };
        reg.rt
            .block_on(reg.client.auth(r, &reg.auth, op))
            .map_err(|e| reg.err(Operation::Authenticating, e))?;
        Ok(reg)
    }

    /// The registry host.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Maps a client error: a 401 becomes [`Error::Unauthorized`].
    pub(crate) fn err(&self, op: Operation, e: OciDistributionError) -> Error {
        if is_unauthorized(&e) {
            return Error::Unauthorized {
                registry: self.host.clone(),
                op,
                credentials: Box::new(self.credentials.clone()),
            };
        }
        Error::Registry {
            registry: self.host.clone(),
            op,
            needs_insecure: !self.insecure
                && is_loopback(&self.host)
                && matches!(e, OciDistributionError::RequestError(_)),
            source: Box::new(e),
        }
    }
}

/// Whether the registry refused the credentials (HTTP 401), however the
/// client reports it.
pub(crate) fn is_unauthorized(e: &OciDistributionError) -> bool {
    use oci_client::errors::OciErrorCode;
    match e {
        OciDistributionError::UnauthorizedError { .. } => true,
        OciDistributionError::AuthenticationFailure(_) => true,
        OciDistributionError::ServerError { code, .. } => *code == 401,
        OciDistributionError::RegistryError { envelope, .. } => envelope
            .errors
            .iter()
            .any(|x| x.code == OciErrorCode::Unauthorized),
        OciDistributionError::RequestError(r) => r.status().is_some_and(|s| s.as_u16() == 401),
        _ => false,
    }
}
