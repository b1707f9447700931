//! The ModelPack layout (`gpack push`'s default) against the real registry
//! (oci.rs's), read back by an independent client (the `oras` Python
//! package, in the venv of scripts/setup-python.sh), pulled by ranges,
//! resumed after a kill, and refused when the registry's bytes or manifests
//! are bad, leaving no file at the destination.

use crate::gpack;
use crate::oci::{
    base64_encode, gp, manifest, ok, pull, push, sha256, tiny_gguf, tiny_gpack, Registry, AUTH,
    PASSWORD, USER,
};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The artifact `repo:tag` as oras reads it (manifest, config, the files
/// oras pulls into `outdir`).
fn oras_read(reg: &Registry, reference: &str, outdir: &Path) -> Value {
    let py = gpack_testkit::script("setup-python.sh");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oras_read.py");
    let o = Command::new(&py)
        .arg(script)
        .args([&reg.host, reference, USER, PASSWORD])
        .arg(outdir)
        .env("DOCKER_CONFIG", outdir.join("no-docker-config"))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "oras_read.py failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Files in `dir` other than `keep` (partial files, journals, temps).
fn leftovers(dir: &Path, keep: &[&str]) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !keep.contains(&n.as_str()))
        .collect()
}

#[test]
fn the_default_push_is_a_modelpack_artifact_that_oras_reads_and_a_ranged_pull_rebuilds() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let a = tiny_gpack(work.path(), "keep");
    let r = format!("{}/models/mp:keep", reg.host);
    let rep = push(&work.path().join("cache"), &a, &r);
    assert_eq!(rep["layout"], "modelpack");
    let file_sha = format!("sha256:{}", sha256(&a));
    let g = gpack_format::Gpack::open(&a).unwrap();
    let footer = format!("sha256:{}", hex::encode(g.layout().digest()));
    assert_eq!(rep["digest"], footer.as_str());

    let oras_dir = work.path().join("oras");
    std::fs::create_dir_all(&oras_dir).unwrap();
    let v = oras_read(&reg, "models/mp:keep", &oras_dir);
    let m = &v["manifest"];
    assert_eq!(
        m["artifactType"],
        "application/vnd.cncf.model.manifest.v1+json"
    );
    assert_eq!(
        m["config"]["mediaType"],
        "application/vnd.cncf.model.config.v1+json"
    );
    let layers = m["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{m}");
    let l = &layers[0];
    assert_eq!(l["mediaType"], "application/vnd.cncf.model.weight.v1.raw");
    assert_eq!(l["digest"], file_sha.as_str());
    assert_eq!(
        l["size"].as_u64().unwrap(),
        std::fs::metadata(&a).unwrap().len()
    );
    assert_eq!(
        l["annotations"]["org.opencontainers.image.title"],
        "model.gpack"
    );
    assert_eq!(l["annotations"]["org.cncf.model.filepath"], "model.gpack");
    assert_eq!(l["annotations"]["dev.gpack.digest"], footer.as_str());
    let c = &v["config"];
    assert_eq!(c["config"]["format"], "gpack");
    assert_eq!(c["config"]["architecture"], "llama");
    assert_eq!(c["config"]["quantization"], "keep");
    assert!(
        !c["config"]["paramSize"].as_str().unwrap().is_empty(),
        "{c}"
    );
    assert_eq!(c["descriptor"]["name"], g.manifest().name.as_str());
    assert_eq!(c["modelfs"]["type"], "layers");
    // diffIds: the plain SHA-256 of the (uncompressed) layer.
    assert_eq!(c["modelfs"]["diffIds"], serde_json::json!([file_sha]));
    // oras pulled the layer as one file named by its title: the .gpack.
    assert_eq!(
        v["files"],
        serde_json::json!({"model.gpack": file_sha.trim_start_matches("sha256:")})
    );

    // A ranged pull (small ranges, so there are many, four at a time).
    let out_dir = work.path().join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join("m.gpack");
    let size = std::fs::metadata(&a).unwrap().len();
    let range = 16 * 1024u64;
    let blob_gets = || reg.requests("GET", &format!("/v2/models/mp/blobs/{file_sha}"));
    let before = blob_gets();
    let p = ok(gp(
        &work.path().join("store"),
        &[
            "pull",
            &r,
            "-o",
            out.to_str().unwrap(),
            "--json",
            "--range-size",
            &range.to_string(),
        ],
    )
    .args(AUTH)
    .output()
    .unwrap());
    assert_eq!(sha256(&out), sha256(&a));
    assert_eq!(p["digest"], footer.as_str());
    assert_eq!(p["layers"][0]["status"], "downloaded");
    assert_eq!(p["layers"][0]["downloaded"].as_u64().unwrap(), size);
    // (oras's own GETs of the layer came before.)
    let gets = blob_gets() - before;
    let ranges = size.div_ceil(range) as usize;
    // Every range, plus the header, table and footer fetched first.
    assert_eq!(gets, ranges + 3, "{gets} GETs for {ranges} ranges");
    assert_eq!(leftovers(&out_dir, &["m.gpack"]), Vec::<String>::new());
    assert!(gpack().arg("verify").arg(&out).status().unwrap().success());
    // The store path (no -o) runs it.
    let o = gp(
        &work.path().join("store"),
        &["run", &r, "-p", "Once upon a time", "-n", "8"],
    )
    .args(AUTH)
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn bytes_damaged_in_the_registry_are_refused_naming_the_section_or_the_layer() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let a = tiny_gpack(work.path(), "keep");
    let r = format!("{}/models/mpbad:v1", reg.host);
    push(&work.path().join("cache"), &a, &r);
    let data = reg.blob_data(&format!("sha256:{}", sha256(&a)));
    let orig = std::fs::read(&data).unwrap();
    let g = gpack_format::Gpack::open(&a).unwrap();
    let secs = g.layout().sections.clone();
    let big = secs.iter().max_by_key(|s| s.size).unwrap();
    // A padding byte: between two sections, covered by no section hash.
    let gap = secs
        .windows(2)
        .map(|w| (w[0].offset + w[0].size, w[1].offset))
        .find(|(e, o)| o > e)
        .expect("a gap between two sections")
        .0;
    let out_dir = work.path().join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join("m.gpack");
    for (at, needle) in [
        (
            (big.offset + big.size / 2) as usize,
            format!("section {} (bytes {}..", big.name, big.offset),
        ),
        (gap as usize, "not the layer digest".to_string()),
    ] {
        let mut b = orig.clone();
        b[at] ^= 0x40;
        std::fs::write(&data, &b).unwrap();
        let o = gp(
            &work.path().join("store"),
            &[
                "pull",
                &r,
                "-o",
                out.to_str().unwrap(),
                "--range-size",
                "16K",
            ],
        )
        .args(AUTH)
        .output()
        .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(err.contains(&needle), "expected {needle:?} in: {err}");
        assert!(!out.exists());
        assert_eq!(leftovers(&out_dir, &[]), Vec::<String>::new());
    }
}

#[test]
fn a_killed_ranged_pull_resumes_from_its_journal() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let a = tiny_gpack(work.path(), "keep");
    let r = format!("{}/models/mpresume:v1", reg.host);
    push(&work.path().join("cache"), &a, &r);
    let size = std::fs::metadata(&a).unwrap().len();
    let out_dir = work.path().join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join("m.gpack");
    let store = work.path().join("store");
    let args = |rate: Option<String>| {
        let mut v = vec![
            "pull".to_string(),
            r.clone(),
            "-o".into(),
            out.to_str().unwrap().into(),
            "--json".into(),
            "--range-size".into(),
            "16K".into(),
            "--jobs".into(),
            "2".into(),
        ];
        if let Some(rate) = rate {
            v.extend(["--limit-rate".into(), rate]);
        }
        v
    };
    let a1 = args(Some((size / 6).to_string()));
    let a1: Vec<&str> = a1.iter().map(|s| s.as_str()).collect();
    let mut child = gp(&store, &a1)
        .args(AUTH)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Killed (SIGKILL) once the journal records a few written ranges.
    let journal = || {
        std::fs::read_dir(&out_dir)
            .unwrap()
            .flatten()
            .find(|e| e.file_name().to_string_lossy().ends_with(".partial.ranges"))
            .map(|e| std::fs::read(e.path()).unwrap())
    };
    let start = Instant::now();
    loop {
        let written = journal().map_or(0, |j| j.iter().skip(8).filter(|&&b| b == 1).count());
        if written >= 3 {
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
    let a2 = args(None);
    let a2: Vec<&str> = a2.iter().map(|s| s.as_str()).collect();
    let rep = ok(gp(&store, &a2).args(AUTH).output().unwrap());
    assert_eq!(sha256(&out), sha256(&a));
    let l = &rep["layers"][0];
    assert_eq!(l["status"], "resumed", "{l}");
    let from = l["resumed_from"].as_u64().unwrap();
    assert!(from >= 3 * 16 * 1024, "{l}");
    assert_eq!(l["downloaded"].as_u64().unwrap(), size - from, "{l}");
    assert_eq!(leftovers(&out_dir, &["m.gpack"]), Vec::<String>::new());
}

/// `PUT`s raw bytes to the registry (Basic auth): `path` under `/v2/`.
fn put(reg: &Registry, path: &str, content_type: &str, body: &[u8]) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(&reg.host).unwrap();
    let auth = base64_encode(format!("{USER}:{PASSWORD}").as_bytes());
    write!(
        s,
        "PUT /v2/{path} HTTP/1.0\r\nHost: {}\r\nAuthorization: Basic {auth}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        reg.host,
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut b = String::new();
    s.read_to_string(&mut b).unwrap();
    b
}

#[test]
fn hostile_manifests_are_refused_before_anything_is_written() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let a = tiny_gpack(work.path(), "keep");
    push(
        &work.path().join("cache"),
        &a,
        &format!("{}/models/mpx:good", reg.host),
    );
    let good = manifest(&reg, "models/mpx", "good");
    let size = good["layers"][0]["size"].as_u64().unwrap();
    let cases: Vec<(&str, Value, String)> = vec![
        (
            "two",
            {
                let mut m = good.clone();
                let l = m["layers"][0].clone();
                m["layers"].as_array_mut().unwrap().push(l);
                m
            },
            "2 weight layers".into(),
        ),
        (
            "size",
            {
                let mut m = good.clone();
                m["layers"][0]["size"] = (size - 1).into();
                m["annotations"]["dev.gpack.size"] = (size - 1).to_string().into();
                m
            },
            format!(
                "the file's header says {size} bytes, the layer descriptor {}",
                size - 1
            ),
        ),
        (
            "dotdot",
            {
                let mut m = good.clone();
                m["layers"][0]["annotations"]["org.cncf.model.filepath"] = "../model.gpack".into();
                m
            },
            "\"../model.gpack\" is not a plain file name".into(),
        ),
        (
            "slash",
            {
                let mut m = good.clone();
                m["layers"][0]["annotations"]["org.cncf.model.filepath"] =
                    "models/model.gpack".into();
                m
            },
            "is not a plain file name".into(),
        ),
    ];
    let out_dir = work.path().join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join("m.gpack");
    for (tag, m, needle) in cases {
        let resp = put(
            &reg,
            &format!("models/mpx/manifests/{tag}"),
            "application/vnd.oci.image.manifest.v1+json",
            m.to_string().as_bytes(),
        );
        assert!(resp.contains(" 201 "), "the registry refused {tag}: {resp}");
        let o = gp(
            &work.path().join("store"),
            &[
                "pull",
                &format!("{}/models/mpx:{tag}", reg.host),
                "-o",
                out.to_str().unwrap(),
            ],
        )
        .args(AUTH)
        .output()
        .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{tag}: {err}");
        assert!(
            err.contains(&needle),
            "{tag}: expected {needle:?} in: {err}"
        );
        assert_eq!(leftovers(&out_dir, &[]), Vec::<String>::new(), "{tag}");
    }
}

/// A ModelPack artifact another tool made: the `oras` Python client pushes
/// the tiny llama GGUF as one `weight.v1.raw` layer with a config saying
/// `format: gguf` (oras_push_modelpack.py); `gpack pull` fetches it,
/// checks the layer against its digest, converts it, and the .gpack runs
/// with the text a direct conversion of the GGUF gives.
#[test]
fn a_modelpack_gguf_pushed_by_oras_is_pulled_and_converted() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let py = gpack_testkit::script("setup-python.sh");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oras_push_modelpack.py");
    let o = Command::new(&py)
        .arg(script)
        .args([&reg.host, "others/tiny:gguf", USER, PASSWORD])
        .arg(tiny_gguf())
        .arg(work.path())
        .env("DOCKER_CONFIG", work.path().join("no-docker-config"))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "oras_push_modelpack.py failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    // What the registry serves is what oras pushed.
    let m = manifest(&reg, "others/tiny", "gguf");
    assert_eq!(
        m["artifactType"],
        "application/vnd.cncf.model.manifest.v1+json"
    );
    assert_eq!(
        m["layers"][0]["mediaType"],
        "application/vnd.cncf.model.weight.v1.raw"
    );
    assert_eq!(
        m["layers"][0]["digest"],
        format!("sha256:{}", sha256(&tiny_gguf())).as_str()
    );
    let out_dir = work.path().join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join("m.gpack");
    let p = pull(
        &work.path().join("store"),
        &format!("{}/others/tiny:gguf", reg.host),
        &out,
    );
    assert_eq!(p["kind"], "gguf", "{p}");
    assert_eq!(leftovers(&out_dir, &["m.gpack"]), Vec::<String>::new());
    assert!(gpack().arg("verify").arg(&out).status().unwrap().success());
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

/// `push --image`: beside the ModelPack artifact, a runnable image for
/// containerd, read back by the `oras` client and Python's `tarfile`
/// (oras_read_image.py): an index over linux/amd64 and linux/arm64 image
/// manifests, each with an image config whose `rootfs.diff_ids` is the
/// plain SHA-256 of the one uncompressed tar layer, whose single member
/// `model.gpack` is the pushed file byte for byte.
#[test]
fn push_image_adds_a_runnable_image_whose_one_tar_member_is_the_file() {
    let reg = Registry::start();
    let work = tempfile::tempdir().unwrap();
    let a = tiny_gpack(work.path(), "keep");
    let r = format!("{}/models/img:v1", reg.host);
    let rep = ok(gp(
        &work.path().join("cache"),
        &["push", a.to_str().unwrap(), &r, "--image", "--json"],
    )
    .args(AUTH)
    .output()
    .unwrap());
    assert_eq!(rep["layout"], "modelpack");
    let img = &rep["image"];
    assert_eq!(
        img["reference"],
        format!("{}/models/img:v1-image", reg.host)
    );
    let layer = img["layer_digest"].as_str().unwrap().to_string();
    let size = std::fs::metadata(&a).unwrap().len();
    // One 512-byte header, the file padded to 512, two zero blocks.
    assert_eq!(
        img["layer_size"].as_u64().unwrap(),
        512 + size.div_ceil(512) * 512 + 1024
    );

    let py = gpack_testkit::script("setup-python.sh");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oras_read_image.py");
    let o = Command::new(&py)
        .arg(script)
        .args([&reg.host, "models/img:v1-image", USER, PASSWORD])
        .arg(work.path())
        .env("DOCKER_CONFIG", work.path().join("no-docker-config"))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "oras_read_image.py failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let index = &v["index"];
    assert_eq!(
        index["mediaType"],
        "application/vnd.oci.image.index.v1+json"
    );
    assert_eq!(index["manifests"].as_array().unwrap().len(), 2, "{index}");
    let images = v["images"].as_array().unwrap();
    assert_eq!(images.len(), 2);
    let file_sha = sha256(&a);
    let mut platforms = Vec::new();
    for (entry, image) in index["manifests"].as_array().unwrap().iter().zip(images) {
        let m = &image["manifest"];
        assert_eq!(
            entry["mediaType"],
            "application/vnd.oci.image.manifest.v1+json"
        );
        assert_eq!(m["mediaType"], "application/vnd.oci.image.manifest.v1+json");
        assert_eq!(
            m["config"]["mediaType"],
            "application/vnd.oci.image.config.v1+json"
        );
        let layers = m["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 1, "{m}");
        assert_eq!(
            layers[0]["mediaType"],
            "application/vnd.oci.image.layer.v1.tar"
        );
        assert_eq!(layers[0]["digest"], layer.as_str());
        let c = &image["config"];
        // The platform the index names is the config's.
        assert_eq!(c["os"], entry["platform"]["os"]);
        assert_eq!(c["architecture"], entry["platform"]["architecture"]);
        platforms.push(format!(
            "{}/{}",
            c["os"].as_str().unwrap(),
            c["architecture"].as_str().unwrap()
        ));
        // diff_ids: the plain SHA-256 of the uncompressed tar, as Python
        // computed it over the blob oras downloaded.
        let tar = &image["layers"][0];
        assert_eq!(
            c["rootfs"],
            serde_json::json!({"type": "layers", "diff_ids": [format!("sha256:{}", tar["sha256"].as_str().unwrap())]})
        );
        assert_eq!(format!("sha256:{}", tar["sha256"].as_str().unwrap()), layer);
        // One member: the file, byte for byte.
        assert_eq!(
            tar["members"],
            serde_json::json!([{"name": "model.gpack", "type": "file", "size": size, "mode": 0o644, "sha256": file_sha}])
        );
    }
    platforms.sort();
    assert_eq!(platforms, ["linux/amd64", "linux/arm64"]);
    // The ModelPack artifact is unchanged by --image.
    let m = manifest(&reg, "models/img", "v1");
    assert_eq!(
        m["artifactType"],
        "application/vnd.cncf.model.manifest.v1+json"
    );
    assert_eq!(
        m["layers"][0]["digest"],
        format!("sha256:{file_sha}").as_str()
    );
    // A GGUF has no image variant: refused before anything is sent.
    let o = gp(
        &work.path().join("cache"),
        &[
            "push",
            crate::oci::tiny_gguf().to_str().unwrap(),
            &format!("{}/models/img:gguf", reg.host),
            "--image",
        ],
    )
    .args(AUTH)
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--image pushes a runnable image"), "{err}");
}
