#!/bin/sh
# bench/vulkan_h200.sh — the GPU measurement of the Vulkan backend (issue 10), prepared here and run on a
# machine with an NVIDIA GPU (the device tool's H200: NVIDIA's Vulkan driver, no Vulkan loader, no glslc,
# no network). It measures, on the same two synthetic files made there with `deltallm synth`
#   b1: qwen3.5-0.8b shape, 24 layers, Q8_0        b5: qwen3.5-9b shape, 8 layers, Q4_K
# deltallm --device vulkan against llama.cpp v0.4.0's prebuilt Vulkan build (npm
# @node-llama-cpp/linux-x64-vulkan@3.21.1, through bench/llamacpp_vk_harness.c): pp512 and tg128 (t/s,
# llama-bench's manner), decode's weight bandwidth as a share of the device's copy probe, and the delta
# rule's recurrent / chunked times per length (the choice table of docs/VULKAN.md). Before measuring it runs
# the correctness groups on the device (backend_ops, vulkan): the cooperative-matrix GEMM and the NVIDIA
# driver are only ever tested there.
#
# The device tool carries at most 64 MiB, tracked files included, and tests/data alone is ~73 MB: check out
# without the parity references first (they are not needed there), which leaves ~25 MB:
#   git sparse-checkout set --no-cone '/*' '!/tests/data/ref/' '!/tests/data/dumps/' '!/tests/data/formats/'
# (`git sparse-checkout disable` restores them). prepare prints the size each call would carry. The work is
# one call, or two on one warm machine (it stays warm 30 s after a call: make the second call at once) when
# the tree is too big to carry everything at once:
#
#   bench/vulkan_h200.sh prepare        here (needs apt-get, npm, glslc): writes .gpu/one and .gpu/two
#   bench/vulkan_h200.sh all            there, carry .gpu (about 7 min): one, then two, in one call
#   bench/vulkan_h200.sh one            there, carry .gpu/one (about 5 min): loader, build, models, tests,
#                                       deltallm's numbers; keeps the models and half of llama.cpp in /tmp
#   bench/vulkan_h200.sh two            there, carry .gpu/two (about 2 min): llama.cpp's numbers and the
#                                       report ($OUT/RESULTS.md and $OUT/results.json)
#
# As device-tool commands:  run(command="sh bench/vulkan_h200.sh all", carry=[".gpu"], timeout_s=580)
#   or                      run(command="sh bench/vulkan_h200.sh one", carry=[".gpu/one"], timeout_s=540)
#                           run(command="sh bench/vulkan_h200.sh two", carry=[".gpu/two"], timeout_s=400)
# Results go to $OUT (the device tool's folder that comes back; default ./bench-out).
set -eu
cd "$(dirname "$0")/.."
ROOT=$(pwd)
G=.gpu
WORK=/tmp/dl-vkbench
OUT=${OUT:-$ROOT/bench-out}
NPM_PKG=@node-llama-cpp/linux-x64-vulkan@3.21.1
LL_LIBS="libllama.vulkan.v0.4.0.so libggml.vulkan.v0.4.0.so libggml-base.so libggml-vulkan.so libggml-cpu-x64.so"
LIMIT=67108864 # the device tool's 64 MiB

say() { echo "== $*"; }
die() { echo "vulkan_h200.sh: $*" >&2; exit 1; }

# ---- here ------------------------------------------------------------------------------------------------------

prepare() {
    command -v glslc >/dev/null || die "prepare needs glslc (apt-get install glslc)"
    command -v npm >/dev/null || die "prepare needs npm"
    rm -rf "$G" && mkdir -p "$G/one" "$G/two" "$G/tmp"
    ex=$(git rev-parse --git-path info/exclude)
    grep -qx '/.gpu/' "$ex" 2>/dev/null || echo '/.gpu/' >>"$ex"
    say "SPIR-V"
    make -j2 spv >/dev/null
    tar cf - -C build spv | xz -9 >"$G/one/spv.tar.xz"
    say "Debian packages: the Vulkan loader and headers, cJSON"
    (cd "$G/one" && apt-get download libvulkan1 libvulkan-dev libcjson1 libcjson-dev >/dev/null 2>&1) ||
        die "apt-get download failed (apt-get update first)"
    say "llama.cpp's Vulkan build ($NPM_PKG)"
    (cd "$G/tmp" && npm pack --silent "$NPM_PKG" >/dev/null) || die "npm pack $NPM_PKG failed"
    tar xzf "$G"/tmp/node-llama-cpp-linux-x64-vulkan-*.tgz -C "$G/tmp"
    (cd "$G/tmp/package/bins/linux-x64-vulkan" && tar cf - $LL_LIBS) | xz -T1 --x86 --lzma2=preset=9e,dict=128MiB >"$G/tmp/ll.tar.xz"
    half=$(( $(wc -c <"$G/tmp/ll.tar.xz") / 2 + 1 ))
    split -b "$half" "$G/tmp/ll.tar.xz" "$G/tmp/ll.part."
    mv "$G/tmp/ll.part.aa" "$G/one/llama.part1"
    mv "$G/tmp/ll.part.ab" "$G/two/llama.part2"
    say "llama.h and the ggml headers (the same release's source)"
    src=${LLAMA_SRC:-$HOME/.cache/llref/llama-src}
    if [ ! -f "$src/include/llama.h" ]; then
        (cd "$G/tmp" && npm pack --silent node-llama-cpp@3.21.1 >/dev/null && tar xzf node-llama-cpp-3.21.1.tgz &&
            git clone -q package/llama/gitRelease.bundle llama-src) || die "cannot get llama.cpp's headers"
        src="$G/tmp/llama-src"
    fi
    tar cf - -C "$src" include ggml/include | xz -9 >"$G/two/llama-headers.tar.xz"
    rm -rf "$G/tmp"
    # what travels: the tracked files present in the working tree (a sparse checkout leaves some out) and
    # the untracked ones git does not ignore, plus the carried folder
    tree=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | xargs -0 stat -c %s 2>/dev/null |
        awk '{s += $1} END {print s + 0}')
    fits=""
    for c in one two all; do
        d="$G/$c"
        [ "$c" = all ] && d="$G"
        n=$(( tree + $(du -cb "$d" | tail -1 | cut -f1) ))
        echo "call $c: $n bytes of $LIMIT"
        [ "$n" -le "$LIMIT" ] && fits="$fits $c"
    done
    case "$fits" in
    *all*) echo 'ready: run(command="sh bench/vulkan_h200.sh all", carry=[".gpu"], timeout_s=580)' ;;
    *one*two*)
        echo 'ready: two calls on one warm machine, the second right after the first:'
        echo '  run(command="sh bench/vulkan_h200.sh one", carry=[".gpu/one"], timeout_s=540)'
        echo '  run(command="sh bench/vulkan_h200.sh two", carry=[".gpu/two"], timeout_s=400)'
        ;;
    *) echo "too big for the device tool: check out without tests/data/ref, dumps and formats (see the top of $0)" ;;
    esac
}

# ---- there -----------------------------------------------------------------------------------------------------

loader() { # the Vulkan loader into /, as the device notes say; the NVIDIA ICD if the loader finds none
    for f in "$G"/one/libvulkan1_*.deb; do [ -f "$f" ] && dpkg -x "$f" /; done
    ldconfig 2>/dev/null || true
    ldconfig -p 2>/dev/null | grep -q libvulkan.so.1 || [ -f /usr/lib/x86_64-linux-gnu/libvulkan.so.1 ] ||
        [ -f "$WORK/libvulkan.so.1" ] || die "no Vulkan loader (carry .gpu/one)"
}

find_icd() { # $1: a deltallm binary
    if ! "$1" devices | grep -q '^vulkan:0.*discrete'; then
        for j in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json \
            /etc/vulkan/icd.d/nvidia_icd.json; do
            [ -f "$j" ] && export VK_DRIVER_FILES="$j" VK_ICD_FILENAMES="$j" && break
        done
    fi
    "$1" devices --probe | tee "$OUT/devices.txt"
    grep -q '^vulkan:0' "$OUT/devices.txt" || die "no Vulkan device (see $OUT/devices.txt)"
}

one() {
    mkdir -p "$OUT" "$WORK/dev"
    command -v cc >/dev/null && command -v make >/dev/null || die "this machine has no cc or make"
    say "loader and packages"
    loader
    for f in "$G"/one/libvulkan-dev_*.deb "$G"/one/libcjson*.deb; do dpkg -x "$f" "$WORK/dev"; done
    xz -dc "$G/one/spv.tar.xz" | tar xf - -C "$WORK"
    cp "$G/one/llama.part1" "$WORK/"
    say "build (the engine, the CLI without the server, the tests without the server group, the benches)"
    lib="$WORK/dev/usr/lib/x86_64-linux-gnu"
    export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    B=build/h200
    CFLAGS="-I$WORK/dev/usr/include" make -j"$(nproc)" BUILD=$B VULKAN=1 GLSLC=true SPV_DIR="$WORK/spv" \
        VK_INC="$WORK/dev/usr/include" APPLIBS="-L$lib -lcjson" \
        APP_SRC="$(ls src/chat/*.c src/cli/*.c | grep -v cmd_serve.c | tr '\n' ' ')" \
        TEST_SRC="$(ls tests/*.c | grep -v test_server.c | tr '\n' ' ')" \
        $B/deltallm $B/tests $B/deltanet_device_bench >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; die "build failed"; }
    find_icd $B/deltallm
    say "models (deltallm synth, in the background)"
    ($B/deltallm synth --preset qwen3.5-0.8b --type q8_0 --if-missing "$WORK/b1.gguf" >"$WORK/synth-b1.log" 2>&1 &&
        echo ok >"$WORK/b1.done") &
    ($B/deltallm synth --preset qwen3.5-9b --layers 8 --type q4_K --if-missing "$WORK/b5.gguf" >"$WORK/synth-b5.log" 2>&1 &&
        echo ok >"$WORK/b5.done") &
    say "correctness on the device (backend_ops, vulkan)"
    DELTALLM_BIN=$B/deltallm $B/tests backend_ops device >"$OUT/tests.txt" 2>&1 && echo "tests: all passed" ||
        { grep -E 'FAIL|passed' "$OUT/tests.txt" | tail -20; echo "tests FAILED: the numbers below are not trustworthy"; }
    grep -E 'worst NMSE|max\|d\|/std|greedy|-ngl|passed' "$OUT/tests.txt" | tail -45
    say "the delta rule's two forms per length (qwen3.5 shapes)"
    $B/deltanet_device_bench --device vulkan | tee "$OUT/deltanet.md"
    wait
    [ -f "$WORK/b1.done" ] && [ -f "$WORK/b5.done" ] || { cat "$WORK"/synth-*.log; die "synth failed"; }
    say "deltallm pp512 / tg128 on the device"
    $B/deltallm bench -m "$WORK/b1.gguf" -m "$WORK/b5.gguf" -p 512 -n 128 -r 3 --device vulkan --json \
        >"$WORK/deltallm.json" 2>"$OUT/bench.err" || { cat "$OUT/bench.err"; die "deltallm bench failed"; }
    cp "$WORK/deltallm.json" "$OUT/"
    cat "$WORK/deltallm.json"
    say "prefill without tensor cores, and where the time goes (profile of b5)"
    DELTALLM_VK_TUNE=coop=0 $B/deltallm bench -m "$WORK/b1.gguf" -m "$WORK/b5.gguf" -p 512 -n 0 -r 2 --device vulkan --json \
        >"$OUT/deltallm-nocoop.json" 2>/dev/null || true
    $B/deltallm bench -m "$WORK/b5.gguf" -p 512 -n 128 -r 1 --device vulkan --profile >/dev/null 2>"$OUT/profile.txt" || true
    echo "one: done; now run 'two' on this machine at once"
}

two() {
    mkdir -p "$OUT" "$WORK/llama" "$WORK/inc"
    loader
    [ -f "$WORK/llama.part1" ] && [ -f "$WORK/deltallm.json" ] || die "run 'one' first on this same machine (it went back?)"
    say "llama.cpp's Vulkan build and the harness"
    cat "$WORK/llama.part1" "$G/two/llama.part2" | xz -dc | tar xf - -C "$WORK/llama"
    xz -dc "$G/two/llama-headers.tar.xz" | tar xf - -C "$WORK/inc"
    L="$WORK/llama"
    cc -O2 -std=c11 -D_GNU_SOURCE -I"$WORK/inc/include" -I"$WORK/inc/ggml/include" bench/llamacpp_vk_harness.c \
        -o "$WORK/llamacpp_vk_harness" -L"$L" -l:libllama.vulkan.v0.4.0.so -l:libggml.vulkan.v0.4.0.so -l:libggml-base.so \
        -Wl,-rpath,"$L" -lm
    for j in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json; do
        [ -f "$j" ] && [ -z "${VK_DRIVER_FILES:-}" ] && export VK_DRIVER_FILES="$j" VK_ICD_FILENAMES="$j"
    done
    say "llama.cpp pp512 / tg128, every layer on the GPU"
    : >"$WORK/llama.json"
    for m in b1 b5; do
        "$WORK/llamacpp_vk_harness" -m "$WORK/$m.gguf" -p 512 -n 128 -r 3 --backend-dir "$L" >>"$WORK/llama.json" 2>>"$OUT/llama.err" ||
            { tail -20 "$OUT/llama.err"; die "llama.cpp harness failed on $m"; }
    done
    cp "$WORK/llama.json" "$OUT/"
    grep -i 'device' "$OUT/llama.err" | head -5 || true
    say "report"
    python3 - "$WORK/deltallm.json" "$WORK/llama.json" "$OUT" <<'PY'
import json, sys, os
dl = json.load(open(sys.argv[1]))
ll = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
out = sys.argv[3]
rows = []
for r in dl:
    name = os.path.basename(r["model"])
    other = [x for x in ll if os.path.basename(x["model"]) == name and x["test"] == r["test"]]
    lt = other[0]["tps_mean"] if other else None
    share = r["weights_gbs"] / r["probe_gbs"] if r.get("probe_gbs") and r["test"].startswith("tg") else None
    rows.append(dict(model=name, test=r["test"], deltallm=r["tps_mean"], deltallm_sd=r["tps_sd"], llama=lt,
                     ratio=(r["tps_mean"] / lt) if lt else None, weights_gbs=r.get("weights_gbs"),
                     probe_gbs=r.get("probe_gbs"), share=share))
with open(os.path.join(out, "results.json"), "w") as f:
    json.dump(rows, f, indent=1)
lines = ["| model | test | deltallm t/s | llama.cpp Vulkan t/s | deltallm / llama.cpp | decode GB/s | copy probe GB/s | share |",
         "|---|---|---:|---:|---:|---:|---:|---:|"]
for r in rows:
    f = lambda v, p=2: ("%.*f" % (p, v)) if v is not None else ""
    lines.append("| %s | %s | %s ± %s | %s | %s | %s | %s | %s |" % (r["model"], r["test"], f(r["deltallm"]), f(r["deltallm_sd"]),
                 f(r["llama"]), f(r["ratio"]), f(r["weights_gbs"], 1) if r["test"].startswith("tg") else "",
                 f(r["probe_gbs"], 1) if r["test"].startswith("tg") else "", f(r["share"]) if r["share"] else ""))
open(os.path.join(out, "RESULTS.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
}

case "${1:-}" in
prepare) prepare ;;
one) one ;;
two) two ;;
all) one && two ;;
*) sed -n '2,25p' "$0"; exit 2 ;;
esac
