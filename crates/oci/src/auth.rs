//! Where credentials come from, in order: the flags (`--username`,
//! `--password`), the environment (`GPACK_REGISTRY_USERNAME` and
//! `GPACK_REGISTRY_PASSWORD`, or `GPACK_REGISTRY_TOKEN` for a bearer token),
//! then the docker config file (`$DOCKER_CONFIG/config.json`, else
//! `~/.docker/config.json`: `auths.<host>.auth` = base64 `user:password`,
//! or `username`/`password`), else anonymous. With a username and password
//! the client answers a Basic challenge directly and a Bearer challenge by
//! the registry token flow (the token endpoint is asked with them).
//!
//! Credential helpers are run as docker runs them: `credHelpers.<host>`
//! first, then `credsStore`, then the inline `auths` entry. A helper is the
//! program `docker-credential-NAME` on `PATH`, run as `… get` with the
//! registry host on its stdin; it answers `{"Username", "Secret"}` JSON, or
//! exits non-zero saying "credentials not found" (then the next source is
//! tried). Its answer is capped at 1 MiB and 60 s.

use crate::error::{io, Credentials, DockerConfigProblem, Error, HelperProblem, Result};
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
        if let Some(c) = from_docker_config(&path, registry)? {
            let what = match c.helper {
                Some(helper) => Credentials::DockerCredentialHelper {
                    user: c.user.clone(),
                    helper,
                    path,
                },
                None => Credentials::DockerConfig {
                    user: c.user.clone(),
                    path,
                },
            };
            return Ok((RegistryAuth::Basic(c.user, c.password), what));
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

/// Credentials a docker config file gives for a registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerCredentials {
    /// The user name.
    pub user: String,
    /// The password (or the helper's secret).
    pub password: String,
    /// The credential helper that gave them (`NAME` of
    /// `docker-credential-NAME`), or `None` for an inline `auths` entry.
    pub helper: Option<String>,
}

/// How long a credential helper may take, and how much it may print.
const HELPER_TIMEOUT_SECS: u64 = 60;
const MAX_HELPER_ANSWER: u64 = 1 << 20;

/// The credentials a docker config file gives for `registry`: from its
/// `credHelpers.<registry>` helper, else its `credsStore` helper, else its
/// `auths.<registry>` entry; `None` when none of them has any.
pub fn from_docker_config(path: &Path, registry: &str) -> Result<Option<DockerCredentials>> {
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
    let helpers = [
        v.get("credHelpers").and_then(|h| h.get(registry)),
        v.get("credsStore"),
    ];
    for name in helpers.into_iter().flatten().filter_map(|h| h.as_str()) {
        if name.is_empty() {
            continue;
        }
        let answer = run_helper(name, registry).map_err(|problem| {
            bad(DockerConfigProblem::Helper {
                helper: name.to_string(),
                problem,
            })
        })?;
        if let Some((user, password)) = answer {
            return Ok(Some(DockerCredentials {
                user,
                password,
                helper: Some(name.to_string()),
            }));
        }
    }
    let inline = |user: &str, password: &str| {
        Some(DockerCredentials {
            user: user.to_string(),
            password: password.to_string(),
            helper: None,
        })
    };
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
        return Ok(inline(u, p));
    }
    let (u, p) = (
        e.get("username").and_then(|x| x.as_str()),
        e.get("password").and_then(|x| x.as_str()),
    );
    Ok(u.zip(p).and_then(|(u, p)| inline(u, p)))
}

/// Runs `docker-credential-NAME get` for `registry`: `Some((user, secret))`,
/// or `None` when the helper has no credentials for it.
fn run_helper(
    name: &str,
    registry: &str,
) -> std::result::Result<Option<(String, String)>, HelperProblem> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(format!("docker-credential-{name}"))
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(HelperProblem::Spawn)?;
    // A helper that exits without reading its stdin is not an error here:
    // its answer (or its status) says what happened.
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(registry.as_bytes());
    }
    let out = read_capped(child.stdout.take());
    let err = read_capped(child.stderr.take());
    let start = std::time::Instant::now();
    let status = loop {
        match child.try_wait().map_err(HelperProblem::Spawn)? {
            Some(s) => break s,
            None if start.elapsed().as_secs() >= HELPER_TIMEOUT_SECS => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(HelperProblem::TimedOut {
                    secs: HELPER_TIMEOUT_SECS,
                });
            }
            None => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    };
    let (out, err) = (
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    );
    if out.len() as u64 > MAX_HELPER_ANSWER {
        return Err(HelperProblem::TooLarge {
            max: MAX_HELPER_ANSWER,
        });
    }
    if !status.success() {
        let said = if err.iter().all(u8::is_ascii_whitespace) {
            &out
        } else {
            &err
        };
        let said: String = String::from_utf8_lossy(said)
            .trim()
            .chars()
            .take(500)
            .collect();
        // The helpers' protocol: "credentials not found in native keychain".
        if said.to_ascii_lowercase().contains("credentials not found") {
            return Ok(None);
        }
        return Err(HelperProblem::Failed {
            status,
            stderr: said,
        });
    }
    #[derive(serde::Deserialize)]
    struct Answer {
        #[serde(rename = "Username")]
        username: String,
        #[serde(rename = "Secret")]
        secret: String,
    }
    let a: Answer = serde_json::from_slice(&out).map_err(HelperProblem::BadAnswer)?;
    if a.username == "<token>" {
        return Err(HelperProblem::IdentityToken);
    }
    Ok(Some((a.username, a.secret)))
}

/// Reads `r` to its end (at most [`MAX_HELPER_ANSWER`] + 1 bytes) on a
/// thread of its own, so that a helper filling one pipe never blocks on it.
fn read_capped<R: std::io::Read + Send + 'static>(
    r: Option<R>,
) -> std::thread::JoinHandle<Vec<u8>> {
    use std::io::Read;
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(r) = r {
            let _ = r.take(MAX_HELPER_ANSWER + 1).read_to_end(&mut buf);
        }
        buf
    })
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
            Some(DockerCredentials {
                user: "alice".into(),
                password: "s3cret:x".into(),
                helper: None
            })
        );
        assert_eq!(
            from_docker_config(&p, "127.0.0.1:5000").unwrap(),
            Some(DockerCredentials {
                user: "bob".into(),
                password: "pw".into(),
                helper: None
            })
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
