//! A registry token server (the Docker token authentication protocol, as
//! CNCF distribution's `auth: token:` expects it) for the OCI tests: it
//! answers `GET /token?service=…&scope=…` with HTTP Basic credentials by
//! an ES256 JWT granting the requested scopes, signed by a self-signed P-256
//! certificate that the registry trusts (`rootcertbundle`) and that the
//! token carries in its `x5c` header. Wrong or missing credentials get 401.
//! The registry that verifies the tokens is the real one.

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// The `service` and `issuer` names the registry is configured with.
pub const SERVICE: &str = "gpack-test-registry";
const ISSUER: &str = "gpack-test-token-server";

/// One request the server answered: its scopes and whether it granted them.
#[derive(Debug, Clone)]
pub struct Request {
    pub scopes: Vec<String>,
    pub granted: bool,
}

struct Signer {
    key: EcdsaKeyPair,
    cert_der: Vec<u8>,
}

/// A running token server (a thread serving one connection at a time; it
/// lives as long as the test process).
pub struct TokenServer {
    pub realm: String,
    signer: Arc<Signer>,
    cert_pem: String,
    dir: tempfile::TempDir,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl TokenServer {
    /// Serves tokens to `user` with `password`.
    pub fn start(user: &str, password: &str) -> TokenServer {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let params = rcgen::CertificateParams::new(vec!["gpack-test-token-server".into()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        let signer = Arc::new(Signer {
            key: EcdsaKeyPair::from_pkcs8(
                &ECDSA_P256_SHA256_FIXED_SIGNING,
                &key.serialize_der(),
                &SystemRandom::new(),
            )
            .unwrap(),
            cert_der: cert.der().to_vec(),
        });
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let realm = format!("http://{}/token", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let basic = format!(
            "Basic {}",
            STANDARD.encode(format!("{user}:{password}").as_bytes())
        );
        let (s, r) = (signer.clone(), requests.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                // A client that hangs up mid-request is its own problem.
                let _ = serve(conn, &basic, &s, &r);
            }
        });
        TokenServer {
            realm,
            signer,
            cert_pem: cert.pem(),
            dir: tempfile::tempdir().unwrap(),
            requests,
        }
    }

    /// The registry config's `auth:` section (indented under it) trusting
    /// this server's certificate.
    pub fn registry_auth(&self) -> String {
        let bundle = self.dir.path().join("token-root.pem");
        std::fs::write(&bundle, &self.cert_pem).unwrap();
        format!(
            "  token:\n    realm: {}\n    service: {SERVICE}\n    issuer: {ISSUER}\n    \
             rootcertbundle: {}\n",
            self.realm,
            bundle.display()
        )
    }

    /// A token granting `scopes` (`repository:NAME:ACTIONS`), as the server
    /// would hand out.
    pub fn mint(&self, subject: &str, scopes: &[String]) -> String {
        mint(&self.signer, subject, scopes)
    }

    /// The requests answered so far.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve(
    conn: TcpStream,
    basic: &str,
    signer: &Signer,
    log: &Mutex<Vec<Request>>,
) -> std::io::Result<()> {
    let mut rd = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    rd.read_line(&mut line)?;
    let target = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let mut authorized = false;
    loop {
        let mut h = String::new();
        if rd.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = h.split_once(':') {
            if name.eq_ignore_ascii_case("authorization") && value.trim() == basic {
                authorized = true;
            }
        }
    }
    let query = target.split_once('?').map_or("", |(_, q)| q);
    let params: Vec<(String, String)> = query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (percent_decode(k), percent_decode(v)))
        .collect();
    let service_ok = params.iter().any(|(k, v)| k == "service" && v == SERVICE);
    let scopes: Vec<String> = params
        .iter()
        .filter(|(k, _)| k == "scope")
        .flat_map(|(_, v)| v.split(' ').map(str::to_string))
        .collect();
    let account = params
        .iter()
        .find(|(k, _)| k == "account")
        .map_or("anonymous", |(_, v)| v.as_str())
        .to_string();
    let granted = authorized && service_ok && target.starts_with("/token");
    log.lock().unwrap().push(Request {
        scopes: scopes.clone(),
        granted,
    });
    let (status, body) = if granted {
        let t = mint(signer, &account, &scopes);
        (
            "200 OK",
            json!({"token": t, "access_token": t, "expires_in": 300}),
        )
    } else {
        (
            "401 Unauthorized",
            json!({"errors": [{"code": "UNAUTHORIZED", "message": "wrong credentials"}]}),
        )
    };
    let body = body.to_string();
    let mut w = conn;
    write!(
        w,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )?;
    w.flush()
}

fn mint(signer: &Signer, subject: &str, scopes: &[String]) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let access: Vec<_> = scopes
        .iter()
        .filter_map(|s| {
            // repository:NAME:ACTIONS, NAME may hold ':' only before a port,
            // which repository names do not have.
            let mut it = s.splitn(3, ':');
            let (ty, name, actions) = (it.next()?, it.next()?, it.next()?);
            Some(json!({"type": ty, "name": name, "actions": actions.split(',').collect::<Vec<_>>()}))
        })
        .collect();
    let header = json!({"typ": "JWT", "alg": "ES256", "x5c": [STANDARD.encode(&signer.cert_der)]});
    let claims = json!({
        "iss": ISSUER, "sub": subject, "aud": SERVICE,
        "exp": now + 300, "nbf": now - 10, "iat": now,
        "jti": format!("{now}-{}", scopes.len()),
        "access": access,
    });
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let sig = signer
        .key
        .sign(&SystemRandom::new(), input.as_bytes())
        .unwrap();
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz");
                match u8::from_str_radix(hex, 16) {
                    Ok(v) => {
                        out.push(v);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
