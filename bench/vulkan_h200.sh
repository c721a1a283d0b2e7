#!/bin/sh
# bench/vulkan_h200.sh — the GPU measurement of the Vulkan backend (issues 10 and 28), prepared here and run on
# a machine with an NVIDIA GPU (the device tool's H100 / H200: NVIDIA's driver, no Vulkan loader, no glslc, no
# network). On the same three synthetic files, made there with `deltallm synth`,
#   b1: qwen3.5-0.8b shape, 24 layers, Q8_0     b5: qwen3.5-9b shape, 8 layers, Q4_K
#   b4: qwen3.5-35b-a3b shape (MoE, 256 experts, 8 used), 4 layers, Q4_K
# it measures deltallm --device vulkan against two anchors of llama.cpp v0.4.0, every layer on the GPU:
#   - its Vulkan build: npm @node-llama-cpp/linux-x64-vulkan@3.21.1, prebuilt, carried;
#   - its CUDA build: the same release's source (node-llama-cpp@3.21.1's gitRelease.bundle) built THERE with
#     the device's nvcc for sm_90a only. The npm CUDA prebuilt (@node-llama-cpp/linux-x64-cuda@3.21.1) cannot
#     run on an H100/H200 with its CUDA 13.0 driver: its libggml-cuda.so holds machine code for sm_86/89/120a/121a
#     only and PTX (compute_75/80/90) of PTX ISA 9.1 (CUDA 13.1), which a 13.0 driver cannot JIT (docs/VULKAN.md);
#     building here takes hours on the shared 2 cores, there a few minutes on 16, overlapped with the tests.
# pp512 and tg128 (t/s, llama-bench's manner: bench/llamacpp_vk_harness.c), decode's weight bandwidth as a
# share of the device's copy probe, deltallm's dispatches / barriers per layer and host µs per token, and the
# delta rule's recurrent / chunked times per length. Before measuring it runs the conformance groups on the
# device (backend_ops, device, vk_stream): the cooperative-matrix GEMM and the NVIDIA driver are only tested
# there.
#
# The device tool carries at most 64 MiB, tracked files included, and tests/data alone is ~73 MB: check out
# without the parity references first (they are not needed there), which leaves ~25 MB:
#   git sparse-checkout set --no-cone '/*' '!/tests/data/ref/' '!/tests/data/dumps/' '!/tests/data/formats/'
# (`git sparse-checkout disable` restores them). prepare prints the size each call would carry.
#
#   bench/vulkan_h200.sh prepare     here (needs apt-get, npm, glslc): writes .gpu/one and .gpu/two
#   bench/vulkan_h200.sh all         there, carry .gpu: one, then two, in one call (budget DL_BUDGET_S=450 s)
#   bench/vulkan_h200.sh one         there, carry .gpu/one: loader, builds (deltallm; llama.cpp CUDA in the
#                                    background), models, conformance, deltallm's numbers; keeps all in /tmp
#   bench/vulkan_h200.sh two         there, carry .gpu/two, at once on the same warm machine: llama.cpp's
#                                    numbers (Vulkan, CUDA) and the report ($OUT/RESULTS.md, results.json)
#   bench/vulkan_h200.sh dry-run     here, end to end on lavapipe: prepare, then all with the test models
#                                    (m3, m7, m4 for b1, b5, b4), pp32 / tg8, one rep; the CUDA build only
#                                    configured (CMake, nvcc for sm_90a), not built nor run (no GPU);
#                                    results in /tmp/dl-vkbench-dry/out
#
# As device-tool commands:  run(command="sh bench/vulkan_h200.sh all", carry=[".gpu"], timeout_s=540)
#   or                      run(command="sh bench/vulkan_h200.sh one", carry=[".gpu/one"], timeout_s=480)
#                           run(command="sh bench/vulkan_h200.sh two", carry=[".gpu/two"], timeout_s=300)
# Results go to $OUT (the device tool's folder that comes back; default ./bench-out), at most 8 files: the
# report, the JSON, the test and build logs, and llama-cuda-sm90a.tar.xz (the CUDA build, so that a later
# session can carry it: `LLAMA_CUDA_TAR=that/file bench/vulkan_h200.sh prepare` skips the build there).
set -eu
cd "$(dirname "$0")/.."
ROOT=$(pwd)
G=.gpu
DRY=${DL_DRY:-0}
WORK=${DL_WORK:-/tmp/dl-vkbench}
OUT=${OUT:-$ROOT/bench-out}
PP=${DL_PP:-512}
TG=${DL_TG:-128}
REPS=${DL_REPS:-3}
MODELS="b1 b5 b4"
TEST_GROUPS=${DL_TESTS:-backend_ops device vk_stream}
BUDGET=${DL_BUDGET_S:-450} # seconds for one/two/all, so the report lands inside the device tool's call
T0=$(date +%s)
NPM_VK=@node-llama-cpp/linux-x64-vulkan@3.21.1
NPM_SRC=node-llama-cpp@3.21.1
LL_VK_LIBS="libllama.vulkan.v0.4.0.so libggml.vulkan.v0.4.0.so libggml-base.so libggml-vulkan.so libggml-cpu-x64.so"
LIMIT=67108864 # the device tool's 64 MiB

say() { echo "== $* (+$(( $(date +%s) - T0 )) s)"; }
die() { echo "vulkan_h200.sh: $*" >&2; exit 1; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }

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
    say "llama.cpp's Vulkan build ($NPM_VK)"
    (cd "$G/tmp" && npm pack --silent "$NPM_VK" >/dev/null) || die "npm pack $NPM_VK failed"
    tar xzf "$G"/tmp/node-llama-cpp-linux-x64-vulkan-*.tgz -C "$G/tmp"
    mkdir -p "$G/tmp/ll/vulkan"
    (cd "$G/tmp/package/bins/linux-x64-vulkan" && cp $LL_VK_LIBS "$ROOT/$G/tmp/ll/vulkan/")
    say "llama.cpp's source, the same release (headers; the CUDA build's sources)"
    src=${LLAMA_SRC:-$HOME/.cache/llref/llama-src}
    if [ ! -f "$src/include/llama.h" ]; then
        (cd "$G/tmp" && npm pack --silent "$NPM_SRC" >/dev/null && tar xzf node-llama-cpp-3.21.1.tgz &&
            git clone -q package/llama/gitRelease.bundle llama-src) || die "cannot get llama.cpp's source"
        src="$G/tmp/llama-src"
    fi
    # what ggml + llama need to build with CUDA (the other backends' folders left out): ~18 MB, ~2 MB in xz
    # shellcheck disable=SC2046
    tar cf - -C "$src" --exclude=.git $(for b in vulkan metal sycl opencl cann hexagon webgpu openvino zdnn zendnn \
        virtgpu et rpc blas; do echo "--exclude=ggml/src/ggml-$b"; done) --exclude=vendor/cpp-httplib CMakeLists.txt \
        cmake include src vendor ggml/CMakeLists.txt ggml/cmake ggml/include ggml/src LICENSE | xz -9 >"$G/one/llama-src.tar.xz"
    if [ -n "${LLAMA_CUDA_TAR:-}" ]; then # a CUDA build brought back by an earlier run
        xz -dc "$LLAMA_CUDA_TAR" | tar xf - -C "$G/tmp/ll" || die "cannot read $LLAMA_CUDA_TAR"
        [ -f "$G/tmp/ll/cuda/libggml-cuda.so" ] || die "$LLAMA_CUDA_TAR has no cuda/libggml-cuda.so"
        say "llama.cpp's CUDA build from $LLAMA_CUDA_TAR (no build there)"
    fi
    # the libraries in one archive, halved: the first half travels with one, the second with two
    (cd "$G/tmp/ll" && tar cf - *) | xz -T1 --x86 --lzma2=preset=9e,dict=128MiB >"$G/tmp/ll.tar.xz"
    half=$(( $(wc -c <"$G/tmp/ll.tar.xz") / 2 + 1 ))
    split -b "$half" "$G/tmp/ll.tar.xz" "$G/tmp/ll.part."
    mv "$G/tmp/ll.part.aa" "$G/one/llama.part1"
    mv "$G/tmp/ll.part.ab" "$G/two/llama.part2"
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
    *all*) echo 'ready: run(command="sh bench/vulkan_h200.sh all", carry=[".gpu"], timeout_s=540)' ;;
    *one*two*)
        echo 'ready: two calls on one warm machine, the second right after the first:'
        echo '  run(command="sh bench/vulkan_h200.sh one", carry=[".gpu/one"], timeout_s=480)'
        echo '  run(command="sh bench/vulkan_h200.sh two", carry=[".gpu/two"], timeout_s=300)'
        ;;
    *) echo "too big for the device tool: check out without tests/data/ref, dumps and formats (see the top of $0)" ;;
    esac
}

# ---- there -----------------------------------------------------------------------------------------------------

loader() { # the Vulkan loader into /, as the device notes say (not in a dry run: this machine has its own)
    if [ "$DRY" != 1 ]; then
        for f in "$G"/one/libvulkan1_*.deb; do [ -f "$f" ] && dpkg -x "$f" /; done
        ldconfig 2>/dev/null || true
    fi
    ldconfig -p 2>/dev/null | grep -q libvulkan.so.1 || [ -f /usr/lib/x86_64-linux-gnu/libvulkan.so.1 ] ||
        die "no Vulkan loader (carry .gpu/one)"
}

nvidia_icd() { # NVIDIA's ICD where the loader finds no discrete device by itself
    [ -n "${VK_DRIVER_FILES:-}" ] && return 0
    for j in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json \
        /etc/vulkan/icd.d/nvidia_icd.json; do
        [ -f "$j" ] && export VK_DRIVER_FILES="$j" VK_ICD_FILENAMES="$j" && return 0
    done
    return 0
}

find_icd() { # $1: a deltallm binary
    "$1" devices | grep -q '^vulkan:0.*discrete' || nvidia_icd
    "$1" devices --probe | tee "$LOG/devices.txt"
    grep -q '^vulkan:0' "$LOG/devices.txt" || die "no Vulkan device (see devices.txt)"
}

cuda_env() { # the CUDA 13 runtime and cuBLAS: the toolkit's, else the Python wheels' (nvidia-*), and the driver
    for n in libcudart.so.13 libcublas.so.13 libcublasLt.so.13; do
        for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
            $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__
for s in os.listdir(p)))' 2>/dev/null); do
            [ -e "$d/$n" ] && LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" && break
        done
    done
    [ -d /usr/local/nvidia/lib64 ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:/usr/local/nvidia/lib64"
    export LD_LIBRARY_PATH
}

unpack_llama() { # both halves of the libraries' archive into $WORK/llama (vulkan/, and cuda/ if carried)
    [ -f "$WORK/llama/.done" ] && return 0
    p2="$G/two/llama.part2"
    [ -f "$p2" ] || p2="$WORK/llama.part2"
    [ -f "$WORK/llama.part1" ] && [ -f "$p2" ] || return 1
    mkdir -p "$WORK/llama"
    cat "$WORK/llama.part1" "$p2" | xz -dc | tar xf - -C "$WORK/llama" && : >"$WORK/llama/.done"
}

cuda_build() { # llama.cpp's CUDA backend for sm_90a from the carried source, in $WORK/llama/cuda; ~3000 CPU-s
    L="$WORK/llama"   # (one mmq instance took 63 CPU-s here, 22 of 143 files), so about 4 min on 14 cores
    if [ -f "$L/cuda/libggml-cuda.so" ]; then echo "carried"; return 0; fi
    mkdir -p "$L/src"
    xz -dc "$WORK/llama-src.tar.xz" | tar xf - -C "$L/src" || return 1
    nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
    cmk=$(command -v cmake || true)
    [ -n "$nvcc" ] && [ -n "$cmk" ] || { echo "no nvcc or cmake here: no CUDA build"; return 1; }
    gen=""
    command -v ninja >/dev/null && gen="-G Ninja"
    # shellcheck disable=SC2086
    "$cmk" -S "$L/src" -B "$L/cb" $gen -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
        -DCMAKE_CUDA_ARCHITECTURES=90a-real -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DBUILD_SHARED_LIBS=ON \
        -DGGML_CUDA_NCCL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF || return 1
    # no GPU here, and building ggml (a dependency of llama) builds every backend, CUDA's 143 files: hours on the
    # shared 2 cores. The dry run checks the carried source, the options, CMake and nvcc's sm_90a; the rest of the
    # path (harness, --require, the report) is the Vulkan anchor's.
    if [ "$DRY" = 1 ]; then echo "dry run: configured for sm_90a, not built"; : >"$WORK/cuda.configured"; return 1; fi
    targets="llama ggml-cpu ggml-cuda"
    j=$(( $(nproc) > 4 ? $(nproc) - 2 : $(nproc) )) # two cores left to the timed runs
    # shellcheck disable=SC2086
    "$cmk" --build "$L/cb" -j "$j" --target $targets || return 1
    mkdir -p "$L/cuda"
    cp -P "$L"/cb/bin/lib*.so* "$L/cuda/"
    [ -f "$L/cuda/libllama.so" ] && [ -f "$L/cuda/libggml-cuda.so" ] || return 1
    (cd "$L" && tar cf - cuda) | xz -T0 -9 >"$WORK/llama-cuda-sm90a.tar.xz" # for a later session to carry
}

start_cuda_build() { # in the background, low priority; $WORK/cuda.done says ok or failed
    [ -f "$WORK/cuda.started" ] && return 0
    : >"$WORK/cuda.started"
    (nice -n 10 sh "$ROOT/bench/vulkan_h200.sh" cuda-build >"$LOG/llama-cuda-build.log" 2>&1 &&
        echo ok >"$WORK/cuda.done" || echo failed >"$WORK/cuda.done") &
}

collect() { # what comes back (the device tool returns at most 8 files from $OUT): logs in one file
    mkdir -p "$OUT"
    for f in deltallm.json llama.json RESULTS.md results.json tests.txt; do [ -f "$WORK/$f" ] && cp "$WORK/$f" "$OUT/"; done
    : >"$OUT/logs.txt"
    for f in "$LOG"/*; do [ -f "$f" ] && { echo "==== $(basename "$f")"; tail -c 60000 "$f"; } >>"$OUT/logs.txt"; done
    if [ -f "$WORK/llama-cuda-sm90a.tar.xz" ]; then
        if [ "$(wc -c <"$WORK/llama-cuda-sm90a.tar.xz")" -le 16000000 ]; then cp "$WORK/llama-cuda-sm90a.tar.xz" "$OUT/"
        else split -b 15000000 "$WORK/llama-cuda-sm90a.tar.xz" "$OUT/llama-cuda-sm90a.tar.xz."; fi
    fi
    return 0
}

one() {
    mkdir -p "$OUT" "$WORK/dev" "$LOG"
    command -v cc >/dev/null && command -v make >/dev/null || die "this machine has no cc or make"
    say "loader and packages"
    loader
    for f in "$G"/one/libvulkan-dev_*.deb "$G"/one/libcjson*.deb; do dpkg -x "$f" "$WORK/dev"; done
    xz -dc "$G/one/spv.tar.xz" | tar xmf - -C "$WORK" # m: fresh times, so a kept build dir embeds them again
    cp "$G/one/llama.part1" "$G/one/llama-src.tar.xz" "$WORK/"
    [ -f "$G/two/llama.part2" ] && cp "$G/two/llama.part2" "$WORK/"
    unpack_llama || true # (a carried CUDA build is in the second half: with one alone it is built again)
    say "llama.cpp's CUDA build (background, low priority, two cores left; log in llama-cuda-build.log)"
    start_cuda_build
    say "build (the engine, the CLI without the HTTP server, the test groups run here, the benches)"
    lib="$WORK/dev/usr/lib/x86_64-linux-gnu"
    export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    B=build/h200
    [ "$DRY" = 1 ] && B=build/h200-dry
    CFLAGS="-I$WORK/dev/usr/include" make -j"$(nproc)" BUILD=$B VULKAN=1 GLSLC=true SPV_DIR="$WORK/spv" \
        VK_INC="$WORK/dev/usr/include" APPLIBS="-L$lib -lcjson" \
        PNG=0 JPEG=0 APP_SRC="$(ls src/chat/*.c src/cli/*.c src/convert/*.c src/quantize/*.c src/image/*.c |
            grep -v cmd_serve.c | tr '\n' ' ') $(for f in constrain constrain_schema grammar util; do echo src/server/$f.c; done)" \
        TEST_SRC="$(for f in runner test_rand cli_proc alloc_guard test_mpi test_backend_ops test_device test_vk_stream; do
            echo tests/$f.c; done)" \
        $B/deltallm $B/tests $B/deltanet_device_bench $B/attention_device_bench >"$LOG/build.log" 2>&1 ||
        { tail -30 "$LOG/build.log"; die "build failed"; }
    echo "$B" >"$WORK/bindir"
    find_icd $B/deltallm
    say "models (in the background)"
    if [ "$DRY" = 1 ]; then # the test models stand in for the three shapes
        cp tests/data/models/m3-qwen35-dense-bf16.gguf "$WORK/b1.gguf"
        cp tests/data/models/m7-qwen35-wide-q8_0.gguf "$WORK/b5.gguf"
        cp tests/data/models/m4-qwen35moe-q8_0.gguf "$WORK/b4.gguf"
        for m in $MODELS; do echo ok >"$WORK/$m.done"; done
    else
        synth b1 --preset qwen3.5-0.8b --type q8_0 --seed 11
        synth b5 --preset qwen3.5-9b --layers 8 --type q4_K --seed 15
        synth b4 --preset qwen3.5-35b-a3b --layers 4 --type q4_K --seed 14
    fi
    say "conformance on the device ($TEST_GROUPS)"
    # shellcheck disable=SC2086
    if DELTALLM_BIN=$B/deltallm $B/tests $TEST_GROUPS >"$WORK/tests.txt" 2>&1; then echo "tests: all passed"; else
        grep -E 'FAIL|passed' "$WORK/tests.txt" | tail -20; echo "tests FAILED: the numbers below are not trustworthy"; fi
    grep -E 'worst NMSE|max\|d\|/std|greedy|-ngl|passed|skip' "$WORK/tests.txt" | tail -45
    if [ "$(left)" -gt 330 ]; then
        say "the delta rule's two forms per length (qwen3.5 shapes)"
        if [ "$DRY" = 1 ]; then $B/deltanet_device_bench --device vulkan --hk 2 --hv 4 --reps 1 | tee "$LOG/deltanet.md"
        else $B/deltanet_device_bench --device vulkan | tee "$LOG/deltanet.md"; fi
    else say "skipped the delta rule's table ($(left) s left)"; fi
    if [ "$(left)" -gt 300 ]; then
        say "decode's attention per context: one workgroup per head against the split over the keys"
        if [ "$DRY" = 1 ]; then $B/attention_device_bench --h 4 --hkv 2 --d 64 --ctx 512,2048 --reps 1 | tee "$LOG/attention.md"
        else $B/attention_device_bench | tee "$LOG/attention.md"; fi
    else say "skipped the attention table ($(left) s left)"; fi
    for m in $MODELS; do # the synths (CPU) must end before the timed runs start
        while [ ! -f "$WORK/$m.done" ] && [ "$(left)" -gt 60 ]; do sleep 2; done
    done
    files=""
    for m in $MODELS; do
        if [ "$(cat "$WORK/$m.done" 2>/dev/null)" = ok ]; then files="$files -m $WORK/$m.gguf"
        else tail -3 "$LOG/synth-$m.log"; echo "synth $m failed or not done in time"; fi
    done
    [ -n "$files" ] || die "no model was made"
    say "deltallm pp$PP / tg$TG on the device (llama.cpp's CUDA build: $(cat "$WORK/cuda.done" 2>/dev/null || echo still building))"
    # shellcheck disable=SC2086
    $B/deltallm bench $files -p "$PP" -n "$TG" -r "$REPS" --device vulkan --json \
        >"$WORK/deltallm.json" 2>"$LOG/bench.err" || { cat "$LOG/bench.err"; die "deltallm bench failed"; }
    cat "$WORK/deltallm.json"
    if [ "$(left)" -gt 200 ]; then
        say "prefill without tensor cores, and where the time goes (profile of b5)"
        # shellcheck disable=SC2086
        DELTALLM_VK_TUNE=coop=0 $B/deltallm bench $files -p "$PP" -n 0 -r 1 --device vulkan --json \
            >"$WORK/deltallm-nocoop.json" 2>/dev/null || true
        $B/deltallm bench -m "$WORK/b5.gguf" -p "$PP" -n "$TG" -r 1 --device vulkan --profile >/dev/null 2>"$LOG/profile.txt" || true
        say "decode with dn_prep and the recurrence as two dispatches (prepscan=0), against the merged default"
        # shellcheck disable=SC2086
        DELTALLM_VK_TUNE=prepscan=0 $B/deltallm bench $files -p 0 -n "$TG" -r 1 --device vulkan --json \
            >"$WORK/deltallm-noprepscan.json" 2>/dev/null || true
        cat "$WORK/deltallm-noprepscan.json" 2>/dev/null || true
        if [ -f "$WORK/b4.gguf" ]; then
            say "MoE decode with the down + combine and the shared expert's down + gate + residual unmerged (moefuse=0), b4"
            DELTALLM_VK_TUNE=moefuse=0 $B/deltallm bench -m "$WORK/b4.gguf" -p 0 -n "$TG" -r 1 --device vulkan --json \
                >"$WORK/deltallm-nomoefuse.json" 2>/dev/null || true
            cat "$WORK/deltallm-nomoefuse.json" 2>/dev/null || true
        fi
    else say "skipped the tensor-core-off prefill and the profile ($(left) s left)"; fi
    echo "one: done; now run 'two' on this machine at once"
}

harness() { # $1: vulkan or cuda; builds $WORK/harness-$1 against that build's libraries
    L="$WORK/llama"
    inc="-I$L/src/include -I$L/src/ggml/include"
    if [ "$1" = vulkan ]; then
        cc -O2 -std=c11 -D_GNU_SOURCE $inc bench/llamacpp_vk_harness.c -o "$WORK/harness-vulkan" -L"$L/vulkan" \
            -l:libllama.vulkan.v0.4.0.so -l:libggml.vulkan.v0.4.0.so -l:libggml-base.so -Wl,-rpath,"$L/vulkan" -lm
    else
        cc -O2 -std=c11 -D_GNU_SOURCE $inc bench/llamacpp_vk_harness.c -o "$WORK/harness-cuda" -L"$L/cuda" \
            -l:libllama.so -l:libggml.so -l:libggml-base.so -Wl,-rpath,"$L/cuda" -lm
    fi
}

llama_runs() { # $1: vulkan or cuda; appends JSON lines to $WORK/llama.json; a failure is reported, not fatal
    kind=$1
    [ "$kind" = vulkan ] && req=Vulkan label="llama.cpp v0.4.0 Vulkan (npm prebuilt)"
    [ "$kind" = cuda ] && req=CUDA label="llama.cpp v0.4.0 CUDA (built for sm_90a)"
    [ "$DRY" = 1 ] && [ "$kind" = vulkan ] && export GGML_VK_VISIBLE_DEVICES=0 # lavapipe, a CPU-type device it skips
    harness "$kind" 2>>"$LOG/llama.err" || { echo "llama.cpp $kind: the harness did not build"; return 0; }
    for m in $MODELS; do
        [ -f "$WORK/$m.gguf" ] || continue
        [ "$(left)" -gt 20 ] || { echo "llama.cpp $kind: out of time before $m"; return 0; }
        echo "llama.cpp $kind $m" >>"$LOG/llama.err"
        if ! timeout "$(left)" "$WORK/harness-$kind" -m "$WORK/$m.gguf" -p "$PP" -n "$TG" -r "$REPS" \
            --backend-dir "$WORK/llama/$kind" --require "$req" --engine "$label" >>"$WORK/llama.json" 2>>"$LOG/llama.err"; then
            tail -3 "$LOG/llama.err"
            echo "llama.cpp $kind: not measured on $m (above)"
            return 0
        fi
    done
    grep "llama.cpp device" "$LOG/llama.err" | sort -u | head -4 || true
}

two() {
    mkdir -p "$OUT" "$WORK/llama" "$LOG"
    loader
    [ -f "$WORK/deltallm.json" ] || die "run 'one' first on this same machine (it went back?)"
    unpack_llama || die "the llama.cpp archive is not whole (carry .gpu/one to one and .gpu/two to two)"
    start_cuda_build # (started by one unless this is another machine)
    nvidia_icd
    : >"$WORK/llama.json"
    say "llama.cpp's Vulkan build, pp$PP / tg$TG, every layer on the GPU"
    llama_runs vulkan
    say "llama.cpp's CUDA build (waits for its build: $(cat "$WORK/cuda.done" 2>/dev/null || echo running))"
    while [ ! -f "$WORK/cuda.done" ] && [ "$(left)" -gt 60 ]; do sleep 2; done
    tail -3 "$LOG/llama-cuda-build.log" 2>/dev/null || true
    if [ "$(cat "$WORK/cuda.done" 2>/dev/null)" = ok ]; then
        cuda_env
        ldd "$WORK/llama/cuda/libggml-cuda.so" 2>/dev/null | grep 'not found' || true
        llama_runs cuda
    else
        echo "llama.cpp CUDA: no build ($(cat "$WORK/cuda.done" 2>/dev/null || echo 'not done in time'); see llama-cuda-build.log)"
        [ -f "$WORK/cuda.configured" ] && echo "  (dry run: llama.cpp's CUDA build configured for sm_90a with this machine's nvcc; built on the GPU machine)"
    fi
    say "report"
    [ -f "$LOG/profile.txt" ] && grep -E 'device commands|dispatches' "$LOG/profile.txt" | head -3
    python3 - "$WORK/deltallm.json" "$WORK/llama.json" "$WORK" "$WORK/deltallm-nocoop.json" <<'PY'
import json, sys, os
dl = json.load(open(sys.argv[1]))
ll = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
out = sys.argv[3]
try:
    nocoop = json.load(open(sys.argv[4]))
except Exception:
    nocoop = []
def other(name, test, word):
    x = [r for r in ll if os.path.basename(r["model"]) == name and r["test"] == test and word in r["engine"]]
    return x[0]["tps_mean"] if x else None
rows = []
for r in dl:
    name, test = os.path.basename(r["model"]), r["test"]
    vk, cu = other(name, test, "Vulkan"), other(name, test, "CUDA")
    nc = [x["tps_mean"] for x in nocoop if os.path.basename(x["model"]) == name and x["test"] == test]
    tg = test.startswith("tg")
    share = r["weights_gbs"] / r["probe_gbs"] if tg and r.get("probe_gbs") else None
    rows.append(dict(model=name, test=test, deltallm=r["tps_mean"], deltallm_sd=r["tps_sd"], llama_vulkan=vk,
                     llama_cuda=cu, vs_vulkan=r["tps_mean"] / vk if vk else None, vs_cuda=r["tps_mean"] / cu if cu else None,
                     deltallm_nocoop=nc[0] if nc else None, weights_gbs=r.get("weights_gbs") if tg else None,
                     probe_gbs=r.get("probe_gbs") if tg else None, share=share,
                     dispatches_per_layer=r.get("dispatches_per_layer") if tg else None,
                     barriers_per_layer=r.get("barriers_per_layer") if tg else None,
                     host_us_per_token=r.get("host_us_per_token") if tg else None))
with open(os.path.join(out, "results.json"), "w") as f:
    json.dump(rows, f, indent=1)
f = lambda v, p=2: ("%.*f" % (p, v)) if v is not None else ""
lines = ["| model | test | deltallm t/s | llama.cpp Vulkan | llama.cpp CUDA | / Vulkan | / CUDA | no coop t/s | decode GB/s"
         " | probe GB/s | share | disp./layer | barr./layer | host µs/tok |",
         "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
for r in rows:
    lines.append("| %s | %s | %s ± %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        r["model"], r["test"], f(r["deltallm"]), f(r["deltallm_sd"]), f(r["llama_vulkan"]), f(r["llama_cuda"]),
        f(r["vs_vulkan"]), f(r["vs_cuda"]), f(r["deltallm_nocoop"]), f(r["weights_gbs"], 1), f(r["probe_gbs"], 1),
        f(r["share"]), f(r["dispatches_per_layer"]), f(r["barriers_per_layer"]), f(r["host_us_per_token"], 1)))
open(os.path.join(out, "RESULTS.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
    say "done"
}

synth() { # $1: b1, b5 or b4, then synth's options; in the background, $WORK/$1.done says ok or failed
    m=$1
    shift
    ("$(cat "$WORK/bindir")/deltallm" synth "$@" --if-missing "$WORK/$m.gguf" >"$LOG/synth-$m.log" 2>&1 &&
        echo ok >"$WORK/$m.done" || echo failed >"$WORK/$m.done") &
}

LOG=$WORK/log
case "${1:-}" in
prepare) prepare ;;
one) trap collect EXIT; one ;;
two) trap collect EXIT; two ;;
all) trap collect EXIT; one && two ;;
cuda-build) # the background part of one; by itself: run(command="sh bench/vulkan_h200.sh cuda-build", carry=[".gpu/one"])
    mkdir -p "$WORK" "$LOG"
    [ -f "$WORK/llama-src.tar.xz" ] || cp "$G/one/llama-src.tar.xz" "$WORK/"
    cuda_build ;;
dry-run)
    export DL_DRY=1 DL_WORK=${DL_WORK:-/tmp/dl-vkbench-dry} DL_PP=${DL_PP:-32} DL_TG=${DL_TG:-8} DL_REPS=${DL_REPS:-1}
    export DL_BUDGET_S=${DL_BUDGET_S:-7200} OUT=${OUT:-$DL_WORK/out}
    rm -rf "$DL_WORK" "$OUT"
    sh "$0" prepare && sh "$0" all
    ;;
*) sed -n '2,40p' "$0"; exit 2 ;;
esac
