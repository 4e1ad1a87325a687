#!/usr/bin/env bash
# Build one libFuzzer harness with clang (outside meson) and run it.
#
#   tests/fuzz/run-fuzzer.sh [jobspec|wire|snapshot|http|safetensors] [SECONDS] [extra libFuzzer flags...]
#
# http compiles the daemon's sources but main.c (instrumented), with the two
# files meson generates (build/: meson compile -C build first).
#
# The seed corpus tests/fuzz/corpus/NAME/ is only read: new inputs go to
# build-fuzz/corpus-NAME/, crashes to build-fuzz/. To keep an interesting
# input, minimize it (-minimize_crash=1 or -merge=1) and copy it into the
# seed corpus, which `meson test --suite fuzz` replays.
set -euo pipefail
cd "$(dirname "$0")/../.."

name=${1:-jobspec}
seconds=${2:-60}
shift 2 || shift $# || true
out=build-fuzz
mkdir -p "$out/corpus-$name"

case $name in
  jobspec) srcs=(tests/fuzz/fuzz_jobspec.c api/jobspec.c api/jobspec_model.c); libs="jansson"; dict=(-dict=tests/fuzz/jobspec.dict) ;;
  wire) srcs=(tests/fuzz/fuzz_wire.c api/wire.c); libs="jansson libzmq"; dict=(-dict=tests/fuzz/wire.dict) ;;
  snapshot) srcs=(tests/fuzz/fuzz_snapshot.c api/snapshot.c); libs="jansson libxxhash"; dict=() ;;
  safetensors) srcs=(tests/fuzz/fuzz_safetensors.c worker/stinit.c worker/data/beneath.c worker/engine/llama_layout.c
                      worker/engine/initrand.c api/fsutil.c -Iworker -Iworker/engine -Iworker/data); libs="jansson"; dict=() ;;
  http)
    gen=(build/coordinatord/webui_assets.c build/schema/store_migrations.c)
    for f in "${gen[@]}"; do
      [ -f "$f" ] || { echo "run-fuzzer: $f is missing: meson compile -C build first" >&2; exit 2; }
    done
    mapfile -t daemon < <(ls coordinatord/*.c | grep -v '^coordinatord/main\.c$')
    srcs=(tests/fuzz/fuzz_http.c "${daemon[@]}" "${gen[@]}" api/*.c -Icoordinatord -Ischema -DRINGMASTER_VERSION='"fuzz"')
    libs="jansson libmicrohttpd libzmq libsodium sqlite3 inih libsystemd libxxhash gnutls"
    dict=(-dict=tests/fuzz/http.dict) ;;
  *) echo "run-fuzzer: unknown harness '$name' (jobspec, wire, snapshot, safetensors or http)" >&2; exit 2 ;;
esac

clang -g -O1 -std=gnu11 -D_GNU_SOURCE -pthread \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Iapi "${srcs[@]}" \
  $(pkg-config --cflags --libs $libs) -lm \
  -o "$out/fuzz-$name"

"$out/fuzz-$name" \
  -max_total_time="$seconds" \
  "${dict[@]}" \
  -max_len=4096 \
  -timeout=10 \
  -rss_limit_mb=2048 \
  -artifact_prefix="$out/" \
  -print_final_stats=1 \
  "$@" \
  "$out/corpus-$name" "tests/fuzz/corpus/$name"
