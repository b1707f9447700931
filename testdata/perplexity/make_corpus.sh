#!/usr/bin/env bash
# The text `gpack perplexity`'s tests run on: the GNU GPL version 3 as Debian's
# `base-files` package ships it (/usr/share/common-licenses/GPL-3; 35,149 bytes,
# 7,638 SmolLM2 tokens with BOS), copied verbatim (the licence allows verbatim copies).
# Usage: testdata/perplexity/make_corpus.sh   (writes corpus.txt beside it; checks the hash)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=/usr/share/common-licenses/GPL-3
[ -f "$SRC" ] || { echo "no $SRC: apt-get install base-files" >&2; exit 1; }
cp "$SRC" "$HERE/corpus.txt"
echo "3972dc9744f6499f0f9b2dbf76696f2ae7ad8af9b23dde66d6af86c9dfb36986  $HERE/corpus.txt" | sha256sum -c --quiet
