#!/usr/bin/env bash
# build-mtmd.sh — build llama.cpp v0.4.0's multimodal library (libmtmd) from the source bundle that
# ../shared/tools/build-llref.sh fetch-prebuilt unpacks, against that release's prebuilt libllama/libggml
# (npm @node-llama-cpp/linux-x64), and link our oracle harness tools/mtmd_ref.c to it. Nothing of llama.cpp
# is copied into this project: the sources are compiled where the bundle was unpacked and the outputs land in
# $MTMD_OUT (default $HOME/.cache/mtmd).
#
#   tools/build-mtmd.sh            # libmtmd.so + mtmd_ref  (about 6 min on 2 cores, -j2, nice)
#   tools/build-mtmd.sh harness    # relink only mtmd_ref
# Environment: NLC_DIR (default $HOME/.cache/llref), MTMD_OUT, JOBS (default 2), CXX, CC.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NLC_DIR="${NLC_DIR:-$HOME/.cache/llref}"
SRC="$NLC_DIR/llama-src"
LIB="$NLC_DIR/x/package/bins/linux-x64"
OUT="${MTMD_OUT:-$HOME/.cache/mtmd}"
JOBS="${JOBS:-2}"
CXX="${CXX:-g++}"
CC="${CC:-cc}"
[ -f "$LIB/libllama.v0.4.0.so" ] && [ -d "$SRC/tools/mtmd" ] || {
    echo "build-mtmd: no prebuilt llama.cpp in $NLC_DIR (run ../shared/tools/build-llref.sh fetch-prebuilt)"; exit 1; }
mkdir -p "$OUT/obj"
INC=(-I"$SRC/tools/mtmd" -I"$SRC/include" -I"$SRC/ggml/include" -I"$SRC/vendor" -I"$SRC/vendor/hash")
LIBS=(-L"$LIB" -l:libllama.v0.4.0.so -l:libggml.v0.4.0.so -l:libggml-base.so -Wl,-rpath,"$LIB")

if [ "${1:-}" != harness ]; then
    # the library's sources, as tools/mtmd/CMakeLists.txt lists them (video support off), plus vendor/hash
    SRCS=$(sed -n '/^add_library(mtmd/,/^ *)/p' "$SRC/tools/mtmd/CMakeLists.txt" | grep -o '[A-Za-z0-9_./-]*\.cpp')
    : > "$OUT/jobs.txt"
    for s in $SRCS; do echo "$CXX -std=c++17 -O2 -fPIC -DLLAMA_SHARED -DLLAMA_BUILD -w ${INC[*]} -c $SRC/tools/mtmd/$s -o $OUT/obj/$(echo "$s" | tr / _).o" >> "$OUT/jobs.txt"; done
    for s in hash.cpp sha1/sha1.c; do echo "$CXX -x c++ -std=c++17 -O2 -fPIC -w ${INC[*]} -c $SRC/vendor/hash/$s -o $OUT/obj/vh_$(basename "$s").o" >> "$OUT/jobs.txt"; done
    for s in xxhash/xxhash.c sha256/sha256.c; do echo "$CC -O2 -fPIC -w -I$SRC/vendor/hash -c $SRC/vendor/hash/$s -o $OUT/obj/vh_$(basename "$s").o" >> "$OUT/jobs.txt"; done
    # compile only what is missing or older than its source
    while read -r line; do
        o=$(echo "$line" | awk '{print $NF}'); s=$(echo "$line" | awk '{for(i=1;i<=NF;i++) if($i=="-c") print $(i+1)}')
        [ -f "$o" ] && [ "$o" -nt "$s" ] || echo "$line"
    done < "$OUT/jobs.txt" | nice -n 10 xargs -P "$JOBS" -I{} sh -c 'echo "  CXX $(echo "{}" | sed "s/.* -c \([^ ]*\).*/\1/" | xargs basename)"; {}'
    nice -n 10 "$CXX" -shared -o "$OUT/libmtmd.so" "$OUT"/obj/*.o "${LIBS[@]}" -lpthread
    echo "built $OUT/libmtmd.so"
fi
"$CC" -O2 -g -std=c11 -Wall -Wextra -Wno-unused-parameter "${INC[@]}" -DMTMD_REF_BACKEND_DIR="\"$LIB\"" \
    "$HERE/mtmd_ref.c" -o "$OUT/mtmd_ref" -L"$OUT" -lmtmd -Wl,-rpath,"$OUT" "${LIBS[@]}" -lm
echo "built $OUT/mtmd_ref"
