//! Parsing a REF (`host[:port]/repo[:tag|@sha256:…]`) and telling whether
//! its registry is this machine (the only place `--insecure` may reach).

use crate::error::{Error, ReferenceProblem, Result};
use oci_client::Reference;
use std::net::IpAddr;

/// Parses `s` as a registry reference. Unlike `docker pull`, the registry
/// host is required (no implicit docker.io), so a REF can never be mistaken
/// for a relative file path: its first component must contain a `.` or a
/// `:` or be `localhost`.
pub fn parse(s: &str) -> Result<Reference> {
    let bad = |problem| Error::BadReference {
        reference: s.to_string(),
        problem,
    };
    let Some((host, rest)) = s.split_once('/') else {
        return Err(bad(ReferenceProblem::NoHost));
    };
    if rest.is_empty() {
        return Err(bad(ReferenceProblem::NoRepository));
    }
    if !(host.contains('.') || host.contains(':') || host == "localhost") {
        return Err(bad(ReferenceProblem::NotAHost));
    }
    Reference::try_from(s).map_err(|e| bad(ReferenceProblem::Syntax(e)))
}

/// Whether `s` looks like a REF rather than a file path (see [`parse`]).
pub fn looks_like_reference(s: &str) -> bool {
    parse(s).is_ok()
}

/// Whether the registry host (with an optional port) is a loopback name or
/// address: `localhost`, `127.0.0.0/8`, `[::1]`.
pub fn is_loopback(registry: &str) -> bool {
    let host = if let Some(rest) = registry.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        registry.rsplit_once(':').map_or(registry, |(h, p)| {
            if p.bytes().all(|b| b.is_ascii_digit()) {
                h
            } else {
                registry
            }
        })
    };
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The repository's own name in the store (`host_port/repo/tag` path parts,
/// with `:` of the port replaced).
pub(crate) fn store_key(r: &Reference) -> String {
    let tag = match (r.tag(), r.digest()) {
        (Some(t), _) => t.to_string(),
        (None, Some(d)) => d.replace(':', "-"),
        (None, None) => "latest".to_string(),
    };
    format!(
        "{}/{}/{}",
        r.registry().replace(':', "_"),
        r.repository(),
        tag
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_need_a_host() {
        let r = parse("127.0.0.1:5000/models/tiny:v1").unwrap();
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert_eq!(r.repository(), "models/tiny");
        assert_eq!(r.tag(), Some("v1"));
        let problem = |s| match parse(s) {
            Err(Error::BadReference { problem, .. }) => problem,
            r => panic!("{s}: {r:?}"),
        };
        assert_eq!(problem("models/tiny.gpack"), ReferenceProblem::NotAHost);
        assert_eq!(problem("tiny.gpack"), ReferenceProblem::NoHost);
        assert!(parse("localhost/x").is_ok());
        assert_eq!(problem("localhost:5000/"), ReferenceProblem::NoRepository);
        assert!(matches!(
            problem("localhost:5000/UPPER"),
            ReferenceProblem::Syntax(_)
        ));
        assert!(!looks_like_reference("./m.gpack"));
        assert_eq!(store_key(&r), "127.0.0.1_5000/models/tiny/v1");
    }

    #[test]
    fn loopback_hosts() {
        for h in [
            "localhost",
            "localhost:5000",
            "127.0.0.1:5000",
            "127.3.4.5",
            "[::1]:5000",
        ] {
            assert!(is_loopback(h), "{h}");
        }
        for h in [
            "registry.example.com",
            "10.0.0.1:5000",
            "ghcr.io",
            "localhost.evil.com",
        ] {
            assert!(!is_loopback(h), "{h}");
        }
    }
}
