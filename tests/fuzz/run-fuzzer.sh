#!/usr/bin/env bash
# Build the job spec libFuzzer binary with clang (outside meson) and run it.
#
#   tests/fuzz/run-fuzzer.sh [SECONDS] [extra libFuzzer flags...]
#
# The seed corpus tests/fuzz/corpus/jobspec/ is only read: new inputs go to
# build-fuzz/corpus-jobspec/, crashes to build-fuzz/. To keep an interesting
# input, minimize it (-minimize_crash=1 or -merge=1) and copy it into the
# seed corpus, which `meson test --suite fuzz` replays.
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=${1:-60}
shift || true
out=build-fuzz
mkdir -p "$out/corpus-jobspec"

clang -g -O1 -std=gnu11 -D_GNU_SOURCE \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Iapi tests/fuzz/fuzz_jobspec.c api/jobspec.c \
  $(pkg-config --cflags --libs jansson) -lm \
  -o "$out/fuzz-jobspec"

"$out/fuzz-jobspec" \
  -max_total_time="$seconds" \
  -dict=tests/fuzz/jobspec.dict \
  -max_len=4096 \
  -timeout=10 \
  -rss_limit_mb=2048 \
  -artifact_prefix="$out/" \
  -print_final_stats=1 \
  "$@" \
  "$out/corpus-jobspec" tests/fuzz/corpus/jobspec
