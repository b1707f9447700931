//! The `GPACK_*` environment variables that say how a model is loaded,
//! read in this one place ([`LoadOptions::from_env`]): `gpack run`,
//! `gpack serve`, `gpack bench`, the Python package and the runtime's
//! examples start from it; nothing else reads them, and nothing sets them.

use crate::experts::{parse_size, ExpertMode};
use crate::model::{LoadOptions, Threads};
use crate::ple::PleIo;
use std::ffi::OsString;
use std::num::NonZeroUsize;

impl LoadOptions {
    /// [`LoadOptions::default`] with what the environment overrides:
    ///
    /// * `GPACK_THREADS=N`: the model's pool has N threads (a whole number,
    ///   at least 1; default [`crate::model::default_threads`]: one per
    ///   logical CPU the process may use);
    /// * `GPACK_EXPERT_MMAP=1`: MoE models read routed experts in place
    ///   ([`ExpertMode::Mmap`]); `0` is the default;
    /// * `GPACK_EXPERT_CACHE_BYTES=SIZE`: MoE models keep routed experts
    ///   in a resident cache of at most SIZE bytes (`512M`, `8G`, …:
    ///   [`parse_size`]), not with `GPACK_EXPERT_MMAP=1`;
    /// * `GPACK_PLE_MMAP=1`: a per-layer embedding table (Gemma 3n) is read
    ///   through a mapping ([`PleIo::Mmap`]) instead of direct I/O with a
    ///   row cache; `0` is the default.
    ///
    /// An empty variable counts as unset. Any other value is an error
    /// naming the variable, its value and what it takes (e.g.
    /// `GPACK_THREADS=abc: expected a whole number of threads ≥ 1`), never
    /// silently ignored. (`GPACK_ISA` and `GPACK_SPIN_US`, read by the
    /// kernels, and the `GPACK_TEST_*` hooks of the tests are not load
    /// options.)
    pub fn from_env() -> Result<LoadOptions, String> {
        from_vars(|name| std::env::var_os(name))
    }
}

/// [`LoadOptions::from_env`] with `var` as the environment.
fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> Result<LoadOptions, String> {
    let get = |name: &str| -> Result<Option<String>, String> {
        match var(name) {
            None => Ok(None),
            Some(v) if v.is_empty() => Ok(None),
            Some(v) => v
                .into_string()
                .map(Some)
                .map_err(|v| format!("{name}={}: not valid UTF-8", v.to_string_lossy())),
        }
    };
    let flag = |name: &str| -> Result<bool, String> {
        match get(name)?.as_deref().map(str::trim) {
            None | Some("0") => Ok(false),
            Some("1") => Ok(true),
            Some(v) => Err(format!("{name}={v}: expected 1 (on) or 0 (off)")),
        }
    };
    let mut opts = LoadOptions::default();
    if let Some(v) = get("GPACK_THREADS")? {
        let n = v
            .trim()
            .parse::<usize>()
            .ok()
            .and_then(NonZeroUsize::new)
            .ok_or_else(|| format!("GPACK_THREADS={v}: expected a whole number of threads ≥ 1"))?;
        opts.threads = Threads::Count(n);
    }
    let cache = match get("GPACK_EXPERT_CACHE_BYTES")? {
        Some(v) => Some(parse_size(&v).ok_or_else(|| {
            format!(
                "GPACK_EXPERT_CACHE_BYTES={v}: expected a size in bytes (a number with an optional K, M, G or T suffix)"
            )
        })?),
        None => None,
    };
    opts.experts = match (flag("GPACK_EXPERT_MMAP")?, cache) {
        (true, Some(_)) => {
            return Err(
                "GPACK_EXPERT_MMAP=1 and GPACK_EXPERT_CACHE_BYTES are both set: experts are read in place or cached, set one"
                    .into(),
            )
        }
        (true, None) => ExpertMode::Mmap,
        (false, Some(cache_bytes)) => ExpertMode::Resident { cache_bytes },
        (false, None) => ExpertMode::Auto,
    };
    if flag("GPACK_PLE_MMAP")? {
        opts.ple = PleIo::Mmap;
    }
    if let Some(v) = get("GPACK_TEST_GPU_LOST_AT_STEP")? {
        let n = v
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                format!("GPACK_TEST_GPU_LOST_AT_STEP={v}: expected a step number ≥ 1")
            })?;
        opts.gpu_lost_at_step = Some(n);
    }
    Ok(opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Result<LoadOptions, String> {
        let vars: Vec<(String, OsString)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        from_vars(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn nothing_set_is_the_default() {
        assert_eq!(env(&[]), Ok(LoadOptions::default()));
        assert_eq!(env(&[("GPACK_THREADS", "")]), Ok(LoadOptions::default()));
    }

    #[test]
    fn each_variable_sets_its_option() {
        let o = env(&[("GPACK_THREADS", "3")]).unwrap();
        assert_eq!(o.threads, Threads::Count(NonZeroUsize::new(3).unwrap()));
        let o = env(&[("GPACK_EXPERT_MMAP", "1"), ("GPACK_PLE_MMAP", "1")]).unwrap();
        assert_eq!((o.experts, o.ple), (ExpertMode::Mmap, PleIo::Mmap));
        let o = env(&[
            ("GPACK_EXPERT_CACHE_BYTES", "512M"),
            ("GPACK_PLE_MMAP", "0"),
        ])
        .unwrap();
        assert_eq!(
            o.experts,
            ExpertMode::Resident {
                cache_bytes: 512 << 20
            }
        );
        assert_eq!(o.ple, LoadOptions::default().ple);
    }

    #[test]
    fn a_bad_value_is_an_error_naming_it() {
        for (k, v, want) in [
            (
                "GPACK_THREADS",
                "abc",
                "GPACK_THREADS=abc: expected a whole number of threads ≥ 1",
            ),
            (
                "GPACK_THREADS",
                "0",
                "GPACK_THREADS=0: expected a whole number of threads ≥ 1",
            ),
            (
                "GPACK_THREADS",
                "-2",
                "GPACK_THREADS=-2: expected a whole number of threads ≥ 1",
            ),
            (
                "GPACK_PLE_MMAP",
                "yes",
                "GPACK_PLE_MMAP=yes: expected 1 (on) or 0 (off)",
            ),
            (
                "GPACK_EXPERT_MMAP",
                "true",
                "GPACK_EXPERT_MMAP=true: expected 1 (on) or 0 (off)",
            ),
        ] {
            assert_eq!(env(&[(k, v)]), Err(want.to_string()), "{k}={v}");
        }
        let e = env(&[("GPACK_EXPERT_CACHE_BYTES", "lots")]).unwrap_err();
        assert!(
            e.starts_with("GPACK_EXPERT_CACHE_BYTES=lots: expected a size"),
            "{e}"
        );
        let e = env(&[
            ("GPACK_EXPERT_MMAP", "1"),
            ("GPACK_EXPERT_CACHE_BYTES", "1G"),
        ])
        .unwrap_err();
        assert!(e.contains("both set"), "{e}");
    }
}
