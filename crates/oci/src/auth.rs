//! Where credentials come from, in order: the flags (`--username`,
//! `--password`), the environment (`GPACK_REGISTRY_USERNAME` and
//! `GPACK_REGISTRY_PASSWORD`, or `GPACK_REGISTRY_TOKEN` for a bearer token),
//! then the docker config file (`$DOCKER_CONFIG/config.json`, else
//! `~/.docker/config.json`: `auths.<host>.auth` = base64 `user:password`,
//! or `username`/`password`), else anonymous. With a username and password
//! the client answers a Basic challenge directly and a Bearer challenge by
//! the registry token flow (the token endpoint is asked with them).
//! Credential helpers (`credsStore`, `credHelpers`) are not run.

use crate::error::{io, Credentials, DockerConfigProblem, Error, Result};
use base64::Engine;
use oci_client::secrets::RegistryAuth;
use std::path::{Path, PathBuf};

/// Credentials given on the command line.
#[derive(Debug, Clone, Default)]
pub struct Flags {
    /// `--username`.
    pub username: Option<String>,
    /// `--password`.
    pub password: Option<String>,
    /// A docker config file to read instead of the default one.
    pub docker_config: Option<PathBuf>,
}

/// The docker config file is read only up to this size.
const MAX_DOCKER_CONFIG: u64 = 1 << 20;

/// The credentials for `registry` and a description of their source (for
/// error messages; never the secret).
pub fn resolve(registry: &str, flags: &Flags) -> Result<(RegistryAuth, Credentials)> {
    if let (Some(u), Some(p)) = (&flags.username, &flags.password) {
        return Ok((
            RegistryAuth::Basic(u.clone(), p.clone()),
            Credentials::Flags { user: u.clone() },
        ));
    }
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let user = flags
        .username
        .clone()
        .or_else(|| env("GPACK_REGISTRY_USERNAME"));
    if let (Some(u), Some(p)) = (&user, env("GPACK_REGISTRY_PASSWORD")) {
        return Ok((
            RegistryAuth::Basic(u.clone(), p),
            Credentials::Environment { user: u.clone() },
        ));
    }
    if let Some(t) = env("GPACK_REGISTRY_TOKEN") {
        return Ok((RegistryAuth::Bearer(t), Credentials::Token));
    }
    let path = match &flags.docker_config {
        Some(p) => Some(p.clone()),
        None => default_docker_config(),
    };
    if let Some(path) = path.filter(|p| p.is_file()) {
        if let Some((u, p)) = from_docker_config(&path, registry)? {
            let what = Credentials::DockerConfig {
                user: u.clone(),
                path,
            };
            return Ok((RegistryAuth::Basic(u, p), what));
        }
    }
    Ok((RegistryAuth::Anonymous, Credentials::Anonymous))
}

fn default_docker_config() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("DOCKER_CONFIG") {
        return Some(PathBuf::from(d).join("config.json"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker/config.json"))
}

/// `auths.<registry>` of a docker config file, if it has an entry.
pub fn from_docker_config(path: &Path, registry: &str) -> Result<Option<(String, String)>> {
    use std::io::Read;
    let bad = |problem| Error::DockerConfig {
        path: path.to_path_buf(),
        problem,
    };
    let f = std::fs::File::open(path).map_err(io("open", path))?;
    let mut text = Vec::new();
    f.take(MAX_DOCKER_CONFIG + 1)
        .read_to_end(&mut text)
        .map_err(io("read", path))?;
    if text.len() as u64 > MAX_DOCKER_CONFIG {
        return Err(bad(DockerConfigProblem::TooLarge {
            max: MAX_DOCKER_CONFIG,
        }));
    }
    let v: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| bad(DockerConfigProblem::NotJson(e)))?;
    let Some(auths) = v.get("auths").and_then(|a| a.as_object()) else {
        return Ok(None);
    };
    let entry = auths.iter().find(|(k, _)| {
        let k = k
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        k == registry || k.split('/').next() == Some(registry)
    });
    let Some((key, e)) = entry else {
        return Ok(None);
    };
    if let Some(a) = e
        .get("auth")
        .and_then(|a| a.as_str())
        .filter(|a| !a.is_empty())
    {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(a.trim())
            .map_err(|source| {
                bad(DockerConfigProblem::NotBase64 {
                    key: key.clone(),
                    source,
                })
            })?;
        let s = String::from_utf8(raw)
            .map_err(|_| bad(DockerConfigProblem::NotUtf8 { key: key.clone() }))?;
        let (u, p) = s
            .split_once(':')
            .ok_or_else(|| bad(DockerConfigProblem::NoColon { key: key.clone() }))?;
        return Ok(Some((u.to_string(), p.to_string())));
    }
    let (u, p) = (
        e.get("username").and_then(|x| x.as_str()),
        e.get("password").and_then(|x| x.as_str()),
    );
    Ok(u.zip(p).map(|(u, p)| (u.to_string(), p.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_come_first_and_are_named_as_the_source() {
        let flags = Flags {
            username: Some("alice".into()),
            password: Some("pw".into()),
            docker_config: None,
        };
        let (auth, from) = resolve("reg.example.com", &flags).unwrap();
        assert!(matches!(auth, RegistryAuth::Basic(u, p) if u == "alice" && p == "pw"));
        assert_eq!(
            from,
            Credentials::Flags {
                user: "alice".into()
            }
        );
        assert_eq!(from.to_string(), "user alice from the flags");
    }

    #[test]
    fn docker_config_auth_entries() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("config.json");
        let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3cret:x");
        std::fs::write(
            &p,
            format!(r#"{{"auths":{{"https://reg.example.com":{{"auth":"{auth}"}},"127.0.0.1:5000":{{"username":"bob","password":"pw"}}}}}}"#),
        )
        .unwrap();
        assert_eq!(
            from_docker_config(&p, "reg.example.com").unwrap(),
            Some(("alice".into(), "s3cret:x".into()))
        );
        assert_eq!(
            from_docker_config(&p, "127.0.0.1:5000").unwrap(),
            Some(("bob".into(), "pw".into()))
        );
        assert_eq!(from_docker_config(&p, "other.io").unwrap(), None);
        std::fs::write(&p, r#"{"auths":{"a.io":{"auth":"***"}}}"#).unwrap();
        let e = from_docker_config(&p, "a.io").unwrap_err();
        assert!(
            matches!(&e, Error::DockerConfig { path, problem: DockerConfigProblem::NotBase64 { key, .. } } if *path == p && key == "a.io"),
            "{e:?}"
        );
        let chain = gpack_format::error_chain(&e);
        assert!(
            chain.contains("auths.a.io.auth is not base64: ") && chain.contains("config.json"),
            "{chain}"
        );
        std::fs::write(&p, "{").unwrap();
        let e = from_docker_config(&p, "a.io").unwrap_err();
        assert!(
            matches!(
                &e,
                Error::DockerConfig {
                    problem: DockerConfigProblem::NotJson(_),
                    ..
                }
            ),
            "{e:?}"
        );
    }
}
