#!/usr/bin/env python3
"""bench/mpi_bench.py — the pipeline over MPI against one process, the ratios from runs made in the same hold
of the bench lock (under the same load on this shared machine):

  prefill  PP tokens (default 2048) of b5: one process with one thread pinned to core 0 (its default batch),
           against 2 ranks pinned one core each, and in another hold against 3 ranks on the 2 cores
           (--oversubscribe); micro-batches of UB tokens, the layers halved / thirded by bytes (--split);
  decode   SLOTS sessions (default 4) decoding TG steps each: one process, 2 ranks, 3 ranks, the default
           (balanced) split, in one hold;
  memory   the resident memory of each rank on b4 against one process (weights made resident first), and
           build/dist_bench: one hop's own cost (a 16 KiB ping-pong through src/dist/, shared memory and TCP).

Per group the tokens/s of each configuration and its ratio to the one-process run of the same hold (ROUNDS
rounds per group, default 1: the median, min and max); each rank's compute, bubble and bytes per token from
`bench --mpi`. Writes a markdown report to stdout and the raw rows as JSON to OUT (default
bench/mpi_bench.json).

  bench/mpi_bench.py [MODELS_DIR]      (MODELS_DIR default ~/bench-models; BIN default build/deltallm)

On a shared machine, LOCK=FILE takes an flock on FILE for each group (and for the memory runs) and lets it
go in between, so no hold lasts longer than a group:
  LOCK=/work/notes/bench.lock nice -n -20 bench/mpi_bench.py /work/bench-models
"""
import fcntl
import json
import os
import statistics
import subprocess
import sys

BIN = os.environ.get("BIN", "build/deltallm")
DIR = sys.argv[1] if len(sys.argv) > 1 else os.path.expanduser("~/bench-models")
ROUNDS = int(os.environ.get("ROUNDS", "1"))
PP = int(os.environ.get("PP", "2048"))
UB = int(os.environ.get("UB", "256"))
TG = int(os.environ.get("TG", "16"))
SLOTS = int(os.environ.get("SLOTS", "4"))
OUT = os.environ.get("OUT", "bench/mpi_bench.json")
LOCK = os.environ.get("LOCK")
B5 = os.path.join(DIR, "b5-qwen35-9b-L8-mixed.gguf")
B4 = os.path.join(DIR, "b4-qwen35moe-35b-L4-mixed.gguf")
ROOT = ["--allow-run-as-root"] if os.geteuid() == 0 else []


def mpirun(n, pinned):
    bind = ["--bind-to", "core", "--map-by", "core"] if pinned else ["--oversubscribe", "--bind-to", "none"]
    return ["mpirun"] + ROOT + bind + ["-np", str(n)]


# runs a command in a fresh python whose only child it is, and prints that child's peak RSS (KiB) to stderr
PEAK = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]).returncode; "
        "print('peak_rss_kib', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(r)")


def bench(launch, args, mpi):
    # --mlock: the weights locked in memory, so that other jobs' memory cannot page them out mid-run (bench
    # refuses a run with major faults)
    cmd = launch + [BIN, "bench", "--json", "--mlock", "-r", "1", "-t", "1"] + args + (["--mpi"] if mpi else [])
    for attempt in range(2):
        p = subprocess.run([sys.executable, "-c", PEAK] + cmd, capture_output=True, text=True)
        if p.returncode == 0:
            break
        print(f"failed ({p.returncode}), attempt {attempt + 1}: {' '.join(cmd)}\n{p.stderr[-2000:]}", file=sys.stderr, flush=True)
    if p.returncode != 0:
        sys.exit(1)
    rows = json.loads(p.stdout)
    peak = [int(l.split()[1]) for l in p.stderr.splitlines() if l.startswith("peak_rss_kib")]
    for r in rows:
        r["cmd"] = " ".join(cmd)
        r["max_rss_children_kib"] = peak[-1] if peak else None
    return rows


ONE = ["taskset", "-c", "0"]
PP1 = ("1 process", ONE, ["-m", B5, "-p", str(PP), "-n", "0"], False)  # its default batch (512)
TG1 = ("1 process", ONE, ["-m", B5, "-p", "0", "-n", str(TG), "--slots", str(SLOTS)], False)

# The runs, in groups: each group runs in one hold of LOCK, its first entry the baseline of its ratios. On this
# machine a 2,048-token prefill on one core takes ~5 minutes, so each pipeline's prefill has a hold of its own
# with its own one-process run (no hold longer than ~8 minutes); the decode runs are short and share one.
GROUPS = [
    ("pp", [PP1, ("2 ranks", mpirun(2, True), ["-m", B5, "-p", str(PP), "-n", "0", "-b", str(UB), "--split", "1,1"], True)]),
    ("pp", [PP1, ("3 ranks", mpirun(3, False), ["-m", B5, "-p", str(PP), "-n", "0", "-b", str(UB), "--split", "1,1,1"], True)]),
    ("tg", [TG1, ("2 ranks", mpirun(2, True), TG1[2], True), ("3 ranks", mpirun(3, False), TG1[2], True)]),
]


class held:
    """An flock on LOCK (when set) for the duration of a with-block."""

    def __enter__(self):
        self.f = open(LOCK, "a") if LOCK else None
        if self.f:
            fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        if self.f:
            self.f.close()  # closing the file lets the lock go


def main():
    raw = []
    rows_out = []  # (kind, group, name, [tps per round], [ratio per round])
    stages = {}
    for gi, (kind, confs) in enumerate(GROUPS):
        tps = {name: [] for name, *_ in confs}
        for rnd in range(ROUNDS):
            with held():
                for name, launch, args, mpi in confs:
                    r = bench(launch, args, mpi)[-1]
                    tps[name].append(r["tps_mean"])
                    stages[(kind, name)] = r.get("stages", [])
                    raw.append({"group": gi, "round": rnd, "kind": kind, "config": name, **r})
                    print(f"group {gi + 1} round {rnd + 1}/{ROUNDS} {kind} {name}: {r['tps_mean']:.2f} t/s",
                          file=sys.stderr, flush=True)
        base = tps[confs[0][0]]
        for name, *_ in confs:
            ratios = [v / b for v, b in zip(tps[name], base)] if name != confs[0][0] else []
            rows_out.append((kind, gi + 1, name, tps[name], ratios))
    # memory on b4: one process (peak RSS of the child) and each rank (VmRSS after the run)
    with held():
        one = bench(ONE, ["-m", B4, "-p", "64", "-n", "0"], False)[-1]
        two = bench(mpirun(2, True), ["-m", B4, "-p", "64", "-n", "0"], True)[-1]
        three = bench(mpirun(3, False), ["-m", B4, "-p", "64", "-n", "0"], True)[-1]
        hops = []
        for btl in ([], ["--mca", "btl", "self,tcp"]):
            cmd = mpirun(2, True) + btl + [os.path.join(os.path.dirname(BIN), "dist_bench"), "16384", "2000"]
            p = subprocess.run(cmd, capture_output=True, text=True)
            hops.append((("tcp" if btl else "shared memory"), p.stdout.strip() or p.stderr.strip()[-300:]))
    raw += [{"kind": "mem", "config": c, **r} for c, r in (("1 process", one), ("2 ranks", two), ("3 ranks", three))]
    with open(OUT, "w") as f:
        json.dump(raw, f, indent=1)

    print(f"### b5: prefill {PP} tokens (pipeline micro-batches of {UB}); decode {SLOTS} sessions x {TG} steps; "
          f"{ROUNDS} round(s) per group\n")
    print("| test | hold | config | t/s per round | ratio to the 1-process run of the same hold: median (min-max) |")
    print("|---|---:|---|---:|---:|")
    for kind, g, name, vals, ratios in rows_out:
        rs = f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})" if ratios else ""
        print(f"| {kind} | {g} | {name} | " + " / ".join(f"{v:.2f}" for v in vals) + f" | {rs} |")
    print("\nPer stage, last round (compute and bubble in seconds over the run; bytes sent per token passing through):\n")
    print("| test | config | rank | layers | compute s | bubble s | busy | KiB/token |")
    print("|---|---|---:|---|---:|---:|---:|---:|")
    for (kind, name), st in stages.items():
        for s in st:
            bubble = max(0.0, s["wall_s"] - s["compute_s"])
            busy = 100 * s["compute_s"] / s["wall_s"] if s["wall_s"] > 0 else 0
            kib = s["bytes_sent"] / s["tokens"] / 1024 if s["tokens"] else 0
            print(f"| {kind} | {name} | {s['rank']} | [{s['l0']}, {s['l1']}) | {s['compute_s']:.2f} | {bubble:.2f} | {busy:.0f}% | {kib:.1f} |")
    print("\nMemory on b4 (GiB; one process: its peak RSS; ranks: RSS after the run, weights resident):\n")
    print("| config | rank | layers | weights bound | RSS | peak RSS |")
    print("|---|---:|---|---:|---:|---:|")
    g = 1 << 30
    if one.get("max_rss_children_kib"):
        print(f"| 1 process | 0 | all | {one['file_bytes'] / g:.2f} (file) | | {one['max_rss_children_kib'] * 1024 / g:.2f} |")
    for c, r in (("2 ranks", two), ("3 ranks", three)):
        for s in r.get("stages", []):
            print(f"| {c} | {s['rank']} | [{s['l0']}, {s['l1']}) | {s['weight_bytes'] / g:.2f} | {s['rss_bytes'] / g:.2f} | "
                  f"{s['rss_peak_bytes'] / g:.2f} |")


    print("\nOne hop's own cost (build/dist_bench, 2 ranks pinned):\n")
    for name, line in hops:
        print(f"- {name}: {line}")


main()
