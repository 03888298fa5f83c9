#!/usr/bin/env python3
"""The one-step-delayed update against the synchronous one, side by side on the emulated WAN
(deploy/wan/testbed.sh): the same 2-stage job (bench.py's model and recipe) at a fixed m and
schedule, so the planner's choices do not differ between the two, alternating sync and
delayed REPS times on each link. Prints Markdown: the mean step time of each, their ratio,
and the validation loss of each.

Usage (root, after deploy/build.sh): python3 deploy/wan/delayed_bench.py STEPS BATCH M [REPS] [LINKS]
  LINKS: space-separated rate:delay (Mbit/s:ms, inf for unshaped), default "inf:0 1000:20 100:20".
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
STEPS, BATCH, M = sys.argv[1], sys.argv[2], int(sys.argv[3])
REPS = int(sys.argv[4]) if len(sys.argv) > 4 else 2
LINKS = (sys.argv[5] if len(sys.argv) > 5 else "inf:0 1000:20 100:20").split()
sys.argv = [sys.argv[0], STEPS, BATCH]
import bench  # noqa: E402  (reads STEPS and BATCH from sys.argv)


def main():
    print(f"batch {BATCH}, m = {M} fixed, 1f1b-delay, none/none, {STEPS} steps a run, {REPS} runs of each\n")
    print("| link | sync s/step (runs) | delayed s/step (runs) | delayed / sync throughput | "
          "validation sync | validation delayed |")
    print("|---|---|---|---:|---:|---:|")
    for link in LINKS:
        runs = {"sync": [], "delayed": []}

        def measure():
            for _ in range(REPS):
                for update in ("sync", "delayed"):
                    runs[update].append(bench.run_job(2, micro_batches=M, schedule="1f1b-delay", update=update))
        bench.with_testbed(link, measure)
        mean = {u: statistics.mean(r["step_s"] for r in rs) for u, rs in runs.items()}
        each = {u: ", ".join(f"{r['step_s']:.4f}" for r in rs) for u, rs in runs.items()}
        label = "unshaped" if link.startswith("inf") else f"{link.split(':')[0]} Mbit/s, {link.split(':')[1]} ms"
        print(f"| {label} | {mean['sync']:.4f} ({each['sync']}) | {mean['delayed']:.4f} ({each['delayed']}) | "
              f"{mean['sync'] / mean['delayed']:.2f} | {runs['sync'][0]['validation']:.4f} | "
              f"{runs['delayed'][0]['validation']:.4f} |", flush=True)


if __name__ == "__main__":
    main()
