#!/usr/bin/env python3
"""Two or more ways to run the same job, side by side on the emulated WAN
(deploy/wan/testbed.sh): the same 2-stage job (bench.py's model and recipe) at a fixed m, each
variant an update and a schedule, alternating the variants REPS times on each link so that
the machine's drift falls on all of them. Prints Markdown: each variant's mean step time (and
each run's), its throughput against the first, the planner's predicted step, and the
validation loss.

Usage (root, after deploy/build.sh):
  python3 deploy/wan/side_by_side.py STEPS BATCH M [REPS] [LINKS] [VARIANTS]
  LINKS: space-separated rate:delay (Mbit/s:ms, inf for unshaped), default "inf:0 1000:20 100:20".
  VARIANTS: space-separated update:schedule, default "sync:1f1b-delay sync:zb-h1".
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
STEPS, BATCH, M = sys.argv[1], sys.argv[2], int(sys.argv[3])
REPS = int(sys.argv[4]) if len(sys.argv) > 4 else 2
LINKS = (sys.argv[5] if len(sys.argv) > 5 else "inf:0 1000:20 100:20").split()
VARIANTS = [tuple(v.split(":")) for v in (sys.argv[6] if len(sys.argv) > 6 else "sync:1f1b-delay sync:zb-h1").split()]
sys.argv = [sys.argv[0], STEPS, BATCH]
import bench  # noqa: E402  (reads STEPS and BATCH from sys.argv)


def label(link):
    rate, delay = link.split(":")
    return "unshaped" if rate == "inf" else f"{rate} Mbit/s, {delay} ms"


def main():
    names = [f"{update} {schedule}" for update, schedule in VARIANTS]
    print(f"batch {BATCH}, m = {M} fixed, none/none, {STEPS} steps a run, {REPS} runs of each\n")
    print("| link | variant | s/step, mean (runs) | throughput vs first | predicted s/step | validation |")
    print("|---|---|---|---:|---:|---:|")
    for link in LINKS:
        runs = {name: [] for name in names}

        def measure():
            for _ in range(REPS):
                for name, (update, schedule) in zip(names, VARIANTS):
                    runs[name].append(bench.run_job(2, micro_batches=M, schedule=schedule, update=update))
        bench.with_testbed(link, measure)
        first = statistics.mean(r["step_s"] for r in runs[names[0]])
        for name in names:
            mean = statistics.mean(r["step_s"] for r in runs[name])
            each = ", ".join(f"{r['step_s']:.4f}" for r in runs[name])
            print(f"| {label(link)} | {name} | {mean:.4f} ({each}) | {first / mean:.2f} | "
                  f"{runs[name][0]['plan']['step_s']:.4f} | {runs[name][0]['validation']:.4f} |", flush=True)


if __name__ == "__main__":
    main()
