#!/usr/bin/env bash
# Regenerates the GIW compatibility fixtures from the tiny llama GGUF with the
# project's own older writer modes (weights format 12 = --target cpu, 13 =
# --target metal without f16 scales). They are committed so that a newer
# reader is tested against files an older writer made; regenerate them only
# when that is the point (a format change must keep reading the old ones).
# Usage: testdata/giw/make.sh [path/to/gpack]
set -euo pipefail
cd "$(dirname "$0")/../.."
G=${1:-target/debug/gpack}
SRC=testdata/tiny/llama/llama-q8_0.gguf
"$G" prequant "$SRC" -o testdata/giw/llama-int4.cpu.v12.giw --quant int4 --target cpu --force
"$G" prequant "$SRC" -o testdata/giw/llama-int4.metal.v13.giw --quant int4 --target metal --weights-format 13 --force
sha256sum testdata/giw/*.giw > testdata/giw/SHA256SUMS
