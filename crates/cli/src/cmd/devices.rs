//! The GPU adapters the installed drivers offer and what `--device auto`
//! takes, for `gpack inspect` (text and `--json`).

use serde_json::json;

/// `{"adapters": [{index, name, backend, kind}], "auto": "..."}`. wgpu
/// reports no device memory size, so none is listed (`memory: null`); the
/// memory a model takes on the device is in `--verbose` and `/metrics`.
pub fn json() -> serde_json::Value {
    let list = gpack_runtime::adapters();
    let auto = gpack_runtime::auto_adapter(&list).map_or_else(
        || "cpu (no hardware GPU; a software adapter is taken only by --device gpu)".to_string(),
        |a| format!("gpu:{} ({})", a.index, a.name),
    );
    json!({
        "adapters": list.iter().map(|a| json!({
            "index": a.index,
            "name": a.name,
            "backend": a.backend,
            "kind": if a.software { "software" } else { "hardware" },
            "memory": null,
        })).collect::<Vec<_>>(),
        "auto": auto,
    })
}

/// The text lines of [`json`].
pub fn lines(v: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    match v["adapters"].as_array() {
        Some(a) if !a.is_empty() => {
            for d in a {
                out.push(format!(
                    "gpu:{} {} ({}, {})",
                    d["index"],
                    d["name"].as_str().unwrap_or("?"),
                    d["backend"].as_str().unwrap_or("?"),
                    d["kind"].as_str().unwrap_or("?"),
                ));
            }
        }
        _ => out.push("no GPU adapter (no Vulkan, Metal or DX12 driver found)".into()),
    }
    out.push(format!(
        "--device auto: {}",
        v["auto"].as_str().unwrap_or("?")
    ));
    out
}
