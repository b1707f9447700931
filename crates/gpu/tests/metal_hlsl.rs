//! Every WGSL shader of the crate translates to Metal (MSL) and HLSL with
//! naga, so a shader that could not run on Metal or DX12 fails here, on Linux.
//! That includes the sources Rust assembles from pieces (the matmul of each
//! layout and batch tile, its packed-int8 twin, the activation quantizer).
//! The `ops_*.wgsl` files are fragments that `gpack_gpu::ops` assembles per
//! device variant (f16, subgroups): every assembled source is translated.

use std::path::Path;

fn shaders() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("ops_") {
            continue;
        }
        if p.extension().is_some_and(|x| x == "wgsl") {
            out.push((
                p.display().to_string(),
                std::fs::read_to_string(&p).unwrap(),
            ));
        }
    }
    out.sort();
    assert!(!out.is_empty(), "no shaders found in {}", dir.display());
    for l in gpack_gpu::matvec::supported_layouts() {
        for nb in [1, 4, 8] {
            out.push((
                format!("matmul {l} nb{nb}"),
                gpack_gpu::matvec::matmul_source(l, nb).unwrap(),
            ));
            if let Some(src) = gpack_gpu::matvec::matmul_i8_source(l, nb) {
                out.push((format!("matmul_i8 {l} nb{nb}"), src));
            }
        }
    }
    out.push((
        "matvec/quant_x.wgsl".into(),
        gpack_gpu::matvec::quant_x_source().into(),
    ));
    out.extend(gpack_gpu::ops::sources());
    out
}

/// Every `ops_*.wgsl` kernel file is part of what `ops::sources` assembles
/// (the prelude is in all of them), so none escapes the translation tests.
#[test]
fn every_ops_fragment_is_assembled() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
    let covered: Vec<&str> = gpack_gpu::ops::Shader::ALL
        .iter()
        .map(|s| s.file())
        .collect();
    for e in std::fs::read_dir(&dir).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if name.starts_with("ops_") && name != "ops_prelude.wgsl" {
            assert!(
                covered.contains(&name.as_str()),
                "{name} is not assembled by ops::source"
            );
        }
    }
}

fn module(name: &str, src: &str) -> (naga::Module, naga::valid::ModuleInfo) {
    let m = naga::front::wgsl::parse_str(src)
        .unwrap_or_else(|e| panic!("{name}: {}", e.emit_to_string(src)));
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&m)
    .unwrap_or_else(|e| panic!("{name}: {e:?}"));
    (m, info)
}

#[test]
fn every_shader_translates_to_msl() {
    for (name, src) in shaders() {
        let (m, info) = module(&name, &src);
        let opts = naga::back::msl::Options {
            lang_version: (2, 4),
            ..Default::default()
        };
        let pipe = naga::back::msl::PipelineOptions::default();
        naga::back::msl::write_string(&m, &info, &opts, &pipe)
            .unwrap_or_else(|e| panic!("{name} to MSL: {e:?}"));
    }
}

#[test]
fn every_shader_translates_to_hlsl() {
    for (name, src) in shaders() {
        let (m, info) = module(&name, &src);
        let opts = naga::back::hlsl::Options {
            shader_model: naga::back::hlsl::ShaderModel::V6_2,
            ..Default::default()
        };
        let mut s = String::new();
        naga::back::hlsl::Writer::new(&mut s, &opts, &Default::default())
            .write(&m, &info, None)
            .unwrap_or_else(|e| panic!("{name} to HLSL: {e:?}"));
    }
}
