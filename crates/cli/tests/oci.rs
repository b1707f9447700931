//! `gpack push` / `gpack pull` against a real registry: Debian's
//! `docker-registry` (CNCF distribution), installed by scripts/registry.sh
//! when missing and started by each test on 127.0.0.1 with htpasswd
//! (bcrypt) auth. A test fails, never skips, when the registry cannot start.

use crate::gpack;
use crate::token_server::TokenServer;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub(crate) const USER: &str = "alice";
pub(crate) const PASSWORD: &str = "s3cret-pw";

/// A registry process with its own storage, password file and log.
pub(crate) struct Registry {
    child: Child,
    dir: tempfile::TempDir,
    pub(crate) host: String,
}

impl Registry {
    /// A registry with htpasswd (Basic) auth for `USER`/`PASSWORD`.
    pub(crate) fn start() -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let pw = Command::new("htpasswd")
            .args(["-Bbn", USER, PASSWORD])
            .output()
            .expect("htpasswd (apache2-utils) runs");
        assert!(pw.status.success(), "htpasswd failed");
        std::fs::write(dir.path().join("htpasswd"), &pw.stdout).unwrap();
        let auth = format!(
            "  htpasswd:\n    realm: gpack-test\n    path: {}\n",
            dir.path().join("htpasswd").display()
        );
        Registry::start_with(dir, &auth)
    }

    /// A registry with the token flow: it sends clients to `tokens` and
    /// accepts the JWTs that server signs.
    fn start_with_tokens(tokens: &TokenServer) -> Registry {
        let dir = tempfile::tempdir().unwrap();
        Registry::start_with(dir, &tokens.registry_auth())
    }

    /// The registry in `dir` with `auth` as its config's `auth:` section.
    fn start_with(dir: tempfile::TempDir, auth: &str) -> Registry {
        let bin = gpack_testkit::script("registry.sh");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let host = format!("127.0.0.1:{port}");
        let config = format!(
            "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\n\
             storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
             http:\n  addr: {host}\nauth:\n{auth}",
            dir.path().join("storage").display(),
        );
        std::fs::write(dir.path().join("config.yml"), config).unwrap();
        let log = std::fs::File::create(dir.path().join("log.txt")).unwrap();
        let child = Command::new(&bin)
            .arg("serve")
            .arg(dir.path().join("config.yml"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let mut r = Registry { child, dir, host };
        let start = Instant::now();
        loop {
            if let Ok(mut s) = std::net::TcpStream::connect(&r.host) {
                use std::io::{Read, Write};
                let _ = write!(s, "GET /v2/ HTTP/1.0\r\nHost: {}\r\n\r\n", r.host);
                let mut b = String::new();
                let _ = s.read_to_string(&mut b);
                if b.starts_with("HTTP/1.") && b.contains(" 401 ") {
                    break;
                }
            }
            if let Some(st) = r.child.try_wait().unwrap() {
                panic!("docker-registry exited ({st}) at start:\n{}", r.log());
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "docker-registry did not answer on {} within 30 s:\n{}",
                r.host,
                r.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        r
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log.txt")).unwrap_or_default()
    }

    /// Access-log lines of `method` requests whose path starts with `prefix`.
    pub(crate) fn requests(&self, method: &str, prefix: &str) -> usize {
        let needle = format!("\"{method} {prefix}");
        self.log().lines().filter(|l| l.contains(&needle)).count()
    }

    /// The file holding blob `digest` in the registry's storage.
    pub(crate) fn blob_data(&self, digest: &str) -> PathBuf {
        let h = digest.strip_prefix("sha256:").unwrap();
        self.dir
            .path()
            .join("storage/docker/registry/v2/blobs/sha256")
            .join(&h[..2])
            .join(h)
            .join("data")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `gpack ARGS` with the store in `cache` and the test credentials.
pub(crate) fn gp(cache: &Path, args: &[&str]) -> Command {
    let mut c = gpack();
    c.env("GPACK_CACHE", cache)
        .env_remove("GPACK_REGISTRY_USERNAME")
        .env_remove("GPACK_REGISTRY_PASSWORD")
        .env_remove("GPACK_REGISTRY_TOKEN")
        .env("DOCKER_CONFIG", cache.join("no-docker-config"))
        .args(args);
    c
}

pub(crate) const AUTH: [&str; 5] = ["--insecure", "--username", USER, "--password", PASSWORD];

pub(crate) fn ok(o: Output) -> Value {
    assert!(
        o.status.success(),
        "gpack failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// `gpack push` in the default (ModelPack) layout.
pub(crate) fn push(cache: &Path, file: &Path, r: &str) -> Value {
    let f = file.to_str().unwrap();
    ok(gp(cache, &["push", f, r, "--json"])
        .args(AUTH)
        .output()
        .unwrap())
}

/// `gpack push --per-section`.
fn push_sections(cache: &Path, file: &Path, r: &str) -> Value {
    let f = file.to_str().unwrap();
    let v = ok(gp(cache, &["push", f, r, "--json", "--per-section"])
        .args(AUTH)
        .output()
        .unwrap());
    assert_eq!(v["layout"], "sections");
    v
}

pub(crate) fn pull(cache: &Path, r: &str, out: &Path) -> Value {
    let o = out.to_str().unwrap();
    ok(gp(cache, &["pull", r, "-o", o, "--json"])
        .args(AUTH)
        .output()
        .unwrap())
}

pub(crate) fn sha256(p: &Path) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(std::fs::read(p).unwrap()))
}

pub(crate) fn tiny_gguf() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/tiny/llama/llama-f16.gguf")
}

/// The tiny llama converted with `quant` into `dir`.
pub(crate) fn tiny_gpack(dir: &Path, quant: &str) -> PathBuf {
    let out = dir.join(format!("tiny-{quant}.gpack"));
    let o = gpack()
        .arg("convert")
        .arg(tiny_gguf())
        .arg("-o")
        .arg(&out)
        .args(["--quant", quant])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

fn layer_status(rep: &Value) -> Vec<(String, String)> {
    rep["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["digest"].as_str().unwrap().to_string(),
                l["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn push_then_pull_is_byte_identical_and_a_second_variant_uploads_only_new_blobs() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let a = tiny_gpack(work.path(), "keep");
    let b = tiny_gpack(work.path(), "int8");
    let ra = format!("{}/models/tiny:keep", reg.host);
    let rep = push_sections(&cache, &a, &ra);
    let sections = gpack_format::Gpack::open(&a)
        .unwrap()
        .layout()
        .sections
        .len();
    let distinct = rep["layers"].as_array().unwrap().len();
    assert_eq!(rep["uploaded_blobs"].as_u64().unwrap() as usize, distinct);
    // One PUT per blob (sections + config) and one for the manifest.
    assert_eq!(
        reg.requests("PUT", "/v2/models/tiny/blobs/uploads/"),
        distinct
    );
    assert_eq!(reg.requests("PUT", "/v2/models/tiny/manifests/"), 1);
    assert!(
        distinct >= sections,
        "{distinct} blobs for {sections} sections"
    );

    // A fresh store (another machine): byte-identical, quick-verified.
    let out = work.path().join("pulled.gpack");
    let p = pull(&work.path().join("cache2"), &ra, &out);
    assert_eq!(sha256(&out), sha256(&a));
    assert_eq!(p["digest"], rep["digest"]);
    assert!(layer_status(&p).iter().all(|(_, s)| s == "downloaded"));
    let v = gpack().arg("verify").arg(&out).output().unwrap();
    assert!(v.status.success());

    // The int8 variant, in another repository: the blobs it shares with the
    // keep variant (metadata, tokenizer, embedding and norms) are mounted,
    // only the new ones are PUT.
    let rb = format!("{}/models/tiny-int8:v1", reg.host);
    let ga = gpack_format::Gpack::open(&a).unwrap();
    let gb = gpack_format::Gpack::open(&b).unwrap();
    let shas_a: std::collections::BTreeSet<_> =
        ga.layout().sections.iter().map(|s| s.sha256).collect();
    let shared = gb
        .layout()
        .sections
        .iter()
        .filter(|s| shas_a.contains(&s.sha256))
        .count();
    assert!(shared >= 2, "the variants share only {shared} sections");
    let new = gb.layout().sections.len() - shared;
    let rep_b = push_sections(&cache, &b, &rb);
    let st = layer_status(&rep_b);
    assert_eq!(st.iter().filter(|(_, s)| s == "mounted").count(), shared);
    // The new sections and the new config.
    assert_eq!(
        reg.requests("PUT", "/v2/models/tiny-int8/blobs/uploads/"),
        new + 1
    );
    assert_eq!(rep_b["uploaded_blobs"].as_u64().unwrap() as usize, new + 1);
    // Pushing it again sends nothing.
    let again = push_sections(&cache, &b, &rb);
    assert!(layer_status(&again).iter().all(|(_, s)| s == "exists"));
    assert_eq!(
        reg.requests("PUT", "/v2/models/tiny-int8/blobs/uploads/"),
        new + 1
    );
    // Pulling b into the store that holds a downloads only its new layers.
    let outb = work.path().join("b.gpack");
    let pb = pull(&work.path().join("cache2"), &rb, &outb);
    assert_eq!(sha256(&outb), sha256(&b));
    let st = layer_status(&pb);
    assert_eq!(st.iter().filter(|(_, s)| s == "cached").count(), shared);
    assert_eq!(st.iter().filter(|(_, s)| s == "downloaded").count(), new);
    // Pulling onto an existing file is refused without --force.
    let o = gp(&cache, &["pull", &ra, "-o", outb.to_str().unwrap()])
        .args(AUTH)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("already exists"));
    assert_eq!(sha256(&outb), sha256(&b));
}

#[test]
fn a_pull_killed_midway_resumes_without_refetching_finished_layers() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let a = tiny_gpack(work.path(), "keep");
    let r = format!("{}/models/resume:v1", reg.host);
    push_sections(&cache, &a, &r);
    let store = work.path().join("store");
    let out = work.path().join("m.gpack");
    let size = std::fs::metadata(&a).unwrap().len();
    // About 6 s at this rate: killed (SIGKILL, no handler runs) once a layer
    // is complete and another is partly written.
    let mut child = gp(
        &store,
        &[
            "pull",
            &r,
            "-o",
            out.to_str().unwrap(),
            "--limit-rate",
            &(size / 6).to_string(),
        ],
    )
    .args(AUTH)
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let files = |d: &str| -> Vec<(String, u64)> {
        std::fs::read_dir(store.join("blobs").join(d))
            .map(|rd| {
                rd.flatten()
                    .map(|e| {
                        (
                            format!("sha256:{}", e.file_name().to_string_lossy()),
                            e.metadata().unwrap().len(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let start = Instant::now();
    loop {
        let partial_started = files("partial").iter().any(|(_, n)| *n > 0);
        if !files("sha256").is_empty() && partial_started {
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the pull ended before it was killed"
        );
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no progress in 30 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!out.exists(), "a killed pull left its output");
    let done = files("sha256");
    let partial: Vec<_> = files("partial")
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .collect();
    assert!(!done.is_empty() && !partial.is_empty());
    let gets_before: Vec<usize> = done
        .iter()
        .map(|(d, _)| reg.requests("GET", &format!("/v2/models/resume/blobs/{d}")))
        .collect();

    let rep = pull(&store, &r, &out);
    assert_eq!(sha256(&out), sha256(&a));
    let layers = rep["layers"].as_array().unwrap();
    for (d, _) in &done {
        let l = layers.iter().find(|l| l["digest"] == d.as_str()).unwrap();
        assert_eq!(l["status"], "cached", "{l}");
        assert_eq!(l["downloaded"], 0);
    }
    for (d, n) in &partial {
        let l = layers.iter().find(|l| l["digest"] == d.as_str()).unwrap();
        assert_eq!(l["status"], "resumed", "{l}");
        assert_eq!(l["resumed_from"].as_u64().unwrap(), *n);
        assert_eq!(
            l["downloaded"].as_u64().unwrap(),
            l["size"].as_u64().unwrap() - n
        );
    }
    // The registry saw no second GET of a finished layer.
    for ((d, _), before) in done.iter().zip(gets_before) {
        assert_eq!(
            reg.requests("GET", &format!("/v2/models/resume/blobs/{d}")),
            before,
            "{d} fetched again"
        );
    }
    assert!(files("partial").is_empty());
}

#[test]
fn a_blob_corrupted_in_the_registry_fails_the_pull_naming_the_section() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let a = tiny_gpack(work.path(), "keep");
    let r = format!("{}/models/bad:v1", reg.host);
    push_sections(&cache, &a, &r);
    let g = gpack_format::Gpack::open(&a).unwrap();
    let s = g
        .layout()
        .sections
        .iter()
        .max_by_key(|s| s.size)
        .unwrap()
        .clone();
    let data = reg.blob_data(&format!("sha256:{}", hex::encode(s.sha256)));
    let mut bytes = std::fs::read(&data).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&data, bytes).unwrap();
    let out = work.path().join("m.gpack");
    let o = gp(
        &work.path().join("store"),
        &["pull", &r, "-o", out.to_str().unwrap()],
    )
    .args(AUTH)
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("section {}", s.name)) && err.contains("hash to"),
        "{err}"
    );
    assert!(!out.exists());
    assert!(gpack_format::temp_files_of(&out).is_empty());
    // Nothing damaged is kept in the store either.
    let d = format!("sha256:{}", hex::encode(s.sha256));
    let h = d.trim_start_matches("sha256:");
    assert!(!work.path().join("store/blobs/sha256").join(h).exists());
    assert!(!work.path().join("store/blobs/partial").join(h).exists());
}

#[test]
fn wrong_credentials_give_a_clear_401() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let a = tiny_gpack(work.path(), "keep");
    let r = format!("{}/models/x:v1", reg.host);
    for (args, needle) in [
        (
            vec!["--insecure", "--username", USER, "--password", "wrong"],
            "user alice from the flags",
        ),
        (vec!["--insecure"], "none (anonymous)"),
    ] {
        let o = gp(work.path(), &["push", a.to_str().unwrap(), &r])
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("401 Unauthorized") && err.contains(needle),
            "{err}"
        );
        let o = gp(work.path(), &["pull", &r, "-o", "/nonexistent/x.gpack"])
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("401 Unauthorized"), "{err}");
    }
    // Credentials from the environment and from a docker config file work.
    let o = gp(
        work.path(),
        &["push", a.to_str().unwrap(), &r, "--insecure"],
    )
    .env("GPACK_REGISTRY_USERNAME", USER)
    .env("GPACK_REGISTRY_PASSWORD", PASSWORD)
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dc = work.path().join("docker");
    std::fs::create_dir_all(&dc).unwrap();
    let auth = base64_encode(format!("{USER}:{PASSWORD}").as_bytes());
    std::fs::write(
        dc.join("config.json"),
        format!(r#"{{"auths":{{"{}":{{"auth":"{auth}"}}}}}}"#, reg.host),
    )
    .unwrap();
    let out = work.path().join("m.gpack");
    let o = gp(
        work.path(),
        &["pull", &r, "-o", out.to_str().unwrap(), "--insecure"],
    )
    .env("DOCKER_CONFIG", &dc)
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(sha256(&out), sha256(&a));
}

pub(crate) fn base64_encode(b: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(b)
}

#[test]
fn insecure_is_refused_for_a_remote_registry() {
    let work = tempfile::tempdir().unwrap();
    let o = gp(
        work.path(),
        &[
            "pull",
            "registry.example.com/m:v1",
            "-o",
            "x.gpack",
            "--insecure",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("refused for registry.example.com"), "{err}");
}

#[test]
fn a_docker_gguf_artifact_is_converted_on_pull_and_runs() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let r = format!("{}/ai/tiny:q8_0", reg.host);
    let rep = push(&cache, &tiny_gguf(), &r);
    assert_eq!(rep["kind"], "gguf");
    assert_eq!(rep["digest"], format!("sha256:{}", sha256(&tiny_gguf())));
    // The manifest as the registry serves it: Docker's media types.
    let m = manifest(&reg, "ai/tiny", "q8_0");
    assert_eq!(
        m["config"]["mediaType"],
        "application/vnd.docker.ai.model.config.v0.1+json"
    );
    assert_eq!(
        m["layers"][0]["mediaType"],
        "application/vnd.docker.ai.gguf.v3"
    );
    let out = work.path().join("pulled.gpack");
    let p = pull(&work.path().join("store"), &r, &out);
    assert_eq!(p["kind"], "gguf");
    let v = gpack().arg("verify").arg(&out).output().unwrap();
    assert!(v.status.success());
    // It runs, and says what a direct conversion of the GGUF says.
    let direct = tiny_gpack(work.path(), "keep");
    let run = |m: &Path| {
        let o = gpack()
            .arg("run")
            .arg(m)
            .args(["-p", "Once upon a time", "-n", "12"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let text = run(&out);
    assert!(!text.trim().is_empty());
    assert_eq!(text, run(&direct));
}

/// The manifest of `repo:tag`, fetched with curl-like raw HTTP.
pub(crate) fn manifest(reg: &Registry, repo: &str, tag: &str) -> Value {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(&reg.host).unwrap();
    let auth = base64_encode(format!("{USER}:{PASSWORD}").as_bytes());
    write!(
        s,
        "GET /v2/{repo}/manifests/{tag} HTTP/1.0\r\nHost: {}\r\nAuthorization: Basic {auth}\r\nAccept: application/vnd.oci.image.manifest.v1+json\r\n\r\n",
        reg.host
    )
    .unwrap();
    let mut b = String::new();
    s.read_to_string(&mut b).unwrap();
    let body = b.split_once("\r\n\r\n").unwrap().1;
    serde_json::from_str(body).unwrap()
}

#[test]
fn run_accepts_a_reference_and_ls_rm_manage_the_store() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let a = tiny_gpack(work.path(), "keep");
    let b = tiny_gpack(work.path(), "int8");
    let ra = format!("{}/models/tiny:keep", reg.host);
    let rb = format!("{}/models/tiny:int8", reg.host);
    let rep = push_sections(&cache, &a, &ra);
    push_sections(&cache, &b, &rb);
    // The annotations name the model, as a registry browser shows them.
    let m = manifest(&reg, "models/tiny", "keep");
    assert_eq!(m["artifactType"], "application/vnd.gpack.model.v1");
    assert_eq!(m["annotations"]["dev.gpack.digest"], rep["digest"]);
    assert_eq!(m["annotations"]["dev.gpack.model.quant"], "keep");
    assert_eq!(m["annotations"]["dev.gpack.model.architecture"], "llama");
    assert!(m["layers"]
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l["mediaType"] == "application/vnd.gpack.section.native_dense.v1"));

    let store = work.path().join("store");
    let run = |m: &str| {
        let o = gp(&store, &["run", m, "-p", "Once upon a time", "-n", "12"])
            .args(AUTH)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    assert_eq!(run(&ra), run(a.to_str().unwrap()));
    run(&rb);
    let ls = ok(gp(&store, &["ls", "--json"]).output().unwrap());
    let models = ls["models"].as_array().unwrap();
    assert_eq!(models.len(), 2);
    assert!(models
        .iter()
        .any(|e| e["reference"] == ra.as_str() && e["digest"] == rep["digest"]));
    // A second run opens the store's copy without the registry.
    drop(reg);
    run(&ra);
    let rm = ok(gp(&store, &["rm", &rb, "--json"]).output().unwrap());
    let freed = rm["removed"][0]["freed"].as_u64().unwrap();
    // b's own file and its unshared blobs go; the shared ones stay for a.
    let shared: u64 = {
        let ga = gpack_format::Gpack::open(&a).unwrap();
        let gb = gpack_format::Gpack::open(&b).unwrap();
        let sa: std::collections::BTreeSet<_> =
            ga.layout().sections.iter().map(|s| s.sha256).collect();
        gb.layout()
            .sections
            .iter()
            .filter(|s| sa.contains(&s.sha256))
            .map(|s| s.size)
            .sum()
    };
    let bsize = std::fs::metadata(&b).unwrap().len();
    let bsections: u64 = gpack_format::Gpack::open(&b)
        .unwrap()
        .layout()
        .sections
        .iter()
        .map(|s| s.size)
        .sum();
    assert!(freed >= bsize + bsections - shared, "freed {freed}");
    let ls = ok(gp(&store, &["ls", "--json"]).output().unwrap());
    assert_eq!(ls["models"].as_array().unwrap().len(), 1);
    run(&ra);
    let o = gp(&store, &["rm", &rb]).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("not in the local store"));
}

// See: issue 15 (the resumable `<blob>.partial` was opened following a
// symlink planted at its name: the download went into the link's target).
#[cfg(unix)]
#[test]
fn a_symlink_planted_at_a_partial_blob_is_refused_not_followed() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let a = tiny_gpack(work.path(), "keep");
    let r = format!("{}/models/link:v1", reg.host);
    push_sections(&work.path().join("cache"), &a, &r);
    let g = gpack_format::Gpack::open(&a).unwrap();
    let s = g.layout().sections.iter().max_by_key(|s| s.size).unwrap();
    let store = work.path().join("store");
    let partial_dir = store.join("blobs/partial");
    std::fs::create_dir_all(&partial_dir).unwrap();
    let victim = work.path().join("victim");
    std::fs::write(&victim, b"keep me").unwrap();
    let link = partial_dir.join(hex::encode(s.sha256));
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let out = work.path().join("m.gpack");
    let o = gp(&store, &["pull", &r, "-o", out.to_str().unwrap()])
        .args(AUTH)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("is a symbolic link") && err.contains(&*link.to_string_lossy()),
        "{err}"
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(!out.exists());
}

#[test]
fn the_registry_token_flow_pushes_and_pulls_and_refuses_wrong_credentials() {
    let tokens = TokenServer::start(USER, PASSWORD);
    let reg = Registry::start_with_tokens(&tokens);
    let work = tempfile::tempdir().unwrap();
    let a = tiny_gpack(work.path(), "keep");
    let r = format!("{}/models/tok:v1", reg.host);
    let file = a.to_str().unwrap();

    // Wrong password: the token server refuses it, and gpack says so.
    let o = gp(work.path(), &["push", file, &r])
        .args(["--insecure", "--username", USER, "--password", "wrong"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("401") && err.contains("user alice from the flags"),
        "{err}"
    );
    assert!(tokens.requests().iter().all(|q| !q.granted));

    // The right one: the client is sent to the token server, gets a JWT
    // for the repository and pushes with it (this registry accepts nothing
    // else); a pull from an empty store gives the same bytes.
    push(&work.path().join("c1"), &a, &r);
    let granted: Vec<Vec<String>> = tokens
        .requests()
        .into_iter()
        .filter(|q| q.granted)
        .map(|q| q.scopes)
        .collect();
    assert!(
        granted
            .iter()
            .flatten()
            .any(|s| s == "repository:models/tok:pull,push"),
        "{granted:?}"
    );
    let out = work.path().join("pulled.gpack");
    pull(&work.path().join("c2"), &r, &out);
    assert_eq!(sha256(&out), sha256(&a));

    // A bearer token handed over as is (GPACK_REGISTRY_TOKEN): one for this
    // repository pulls; one for another repository is refused by the
    // registry, naming where the credentials came from, leaving no file.
    let pull_with = |token: String, cache: &str, out: &Path| {
        gp(
            &work.path().join(cache),
            &["pull", &r, "-o", out.to_str().unwrap(), "--insecure"],
        )
        .env("GPACK_REGISTRY_TOKEN", token)
        .output()
        .unwrap()
    };
    let out2 = work.path().join("by-token.gpack");
    let o = pull_with(
        tokens.mint(USER, &["repository:models/tok:pull".into()]),
        "c3",
        &out2,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(sha256(&out2), sha256(&a));
    let out3 = work.path().join("other-scope.gpack");
    let o = pull_with(
        tokens.mint(USER, &["repository:models/other:pull".into()]),
        "c4",
        &out3,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("401") && err.contains("GPACK_REGISTRY_TOKEN"),
        "{err}"
    );
    assert!(!out3.exists());
}

/// Writes an executable `docker-credential-NAME` into `dir` running `body`
/// (sh; the registry host arrives on stdin, as docker passes it).
fn credential_helper(dir: &Path, name: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(format!("docker-credential-{name}"));
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn docker_credential_helpers_are_run_as_docker_runs_them() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let a = tiny_gpack(work.path(), "keep");
    let r = format!("{}/models/helper:v1", reg.host);
    let bin = work.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    // A helper that knows this registry only (and checks it was asked about
    // it, with `get`), one that knows nothing, one that breaks, one that
    // holds an identity token.
    credential_helper(
        &bin,
        "good",
        &format!(
            "[ \"$1\" = get ] || exit 3\nread host\n[ \"$host\" = \"{}\" ] || \
             {{ echo 'credentials not found in native keychain'; exit 1; }}\n\
             printf '{{\"ServerURL\":\"%s\",\"Username\":\"{USER}\",\"Secret\":\"{PASSWORD}\"}}' \"$host\"",
            reg.host
        ),
    );
    credential_helper(
        &bin,
        "empty",
        "echo 'credentials not found in native keychain'; exit 1",
    );
    credential_helper(&bin, "broken", "echo 'keychain locked' >&2; exit 2");
    credential_helper(
        &bin,
        "idtoken",
        r#"printf '{"ServerURL":"x","Username":"<token>","Secret":"abc"}'"#,
    );
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let dc = work.path().join("docker");
    std::fs::create_dir_all(&dc).unwrap();
    let run = |config: String, args: &[&str]| {
        std::fs::write(dc.join("config.json"), config).unwrap();
        gp(work.path(), args)
            .arg("--insecure")
            .env("DOCKER_CONFIG", &dc)
            .env("PATH", &path)
            .output()
            .unwrap()
    };
    let f = a.to_str().unwrap();
    let host = &reg.host;
    // credHelpers for this host, and credsStore: the helper's credentials.
    for config in [
        format!(r#"{{"credHelpers":{{"{host}":"good"}},"auths":{{"{host}":{{}}}}}}"#),
        r#"{"credsStore":"good"}"#.to_string(),
    ] {
        let o = run(config, &["push", f, &r]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    // A helper without credentials for it: the inline entry is used next.
    let inline = base64_encode(format!("{USER}:{PASSWORD}").as_bytes());
    let out = work.path().join("pulled.gpack");
    let o = run(
        format!(r#"{{"credsStore":"empty","auths":{{"{host}":{{"auth":"{inline}"}}}}}}"#),
        &["pull", &r, "-o", out.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(sha256(&out), sha256(&a));
    // Only an empty helper: anonymous, and the registry says 401.
    let o = run(r#"{"credsStore":"empty"}"#.into(), &["push", f, &r]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("401") && err.contains("anonymous"), "{err}");
    // Helpers that fail, or that are missing, are errors naming them.
    for (helper, needle) in [
        ("broken", "exited with exit status: 2: keychain locked"),
        ("idtoken", "identity token"),
        ("absent", "could not be run"),
    ] {
        let o = run(format!(r#"{{"credsStore":"{helper}"}}"#), &["push", f, &r]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!("docker-credential-{helper}"))
                && err.contains(needle)
                && err.contains("config.json"),
            "{err}"
        );
    }
}
