#!/usr/bin/env python3
"""Each stage's compute as its profile predicts it against what it reports, for fixed m on
the emulated WAN: bench.py's 2-stage job with the 1f1b-delay schedule, under the
one-step-delayed update (UPDATE "delayed", the default) or the synchronous one ("sync").
The planner's prediction of a stage's compute a step is m * (t_f(b) + t_b(b)), b = BATCH / m,
from the fits the plan carries; the stage reports `compute_s` (forward, backward, update).

Usage (root, after deploy/build.sh): python3 deploy/wan/compute_probe.py STEPS BATCH "M M ..." [LINK [UPDATE]]
  LINK: rate:delay (Mbit/s:ms), default 1000:20. E.g. python3 deploy/wan/compute_probe.py 30 256 "2 4 8"
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
STEPS, BATCH, MS = sys.argv[1], sys.argv[2], [int(m) for m in sys.argv[3].split()]
LINK = sys.argv[4] if len(sys.argv) > 4 else "1000:20"
UPDATE = sys.argv[5] if len(sys.argv) > 5 else "delayed"
sys.argv = [sys.argv[0], STEPS, BATCH]
import bench  # noqa: E402  (reads STEPS and BATCH from sys.argv)


def at(fit, b):
    return fit["a"] + fit["k"] * b


def main():
    print(f"batch {BATCH}, {STEPS} steps a job, 1f1b-delay, {UPDATE} update, link {LINK}\n")
    print("| m | predicted step (s) | measured step (s) | " +
          " | ".join(f"stage {s} compute, profile → measured" for s in range(2)) + " |")
    print("|---|---:|---:|---|---|")

    def probe():
        for m in MS:
            r = bench.run_job(2, micro_batches=m, schedule="1f1b-delay", update=UPDATE)
            b = int(BATCH) / m
            cells = []
            for s, stage in enumerate(r["plan"]["stages"]):
                predicted = m * (at(stage["forward_s"], b) + at(stage["backward_s"], b))
                measured = r["compute_s"][s] if s < len(r["compute_s"]) else float("nan")
                cells.append(f"{predicted:.3f} → {measured:.3f} ({measured / predicted - 1:+.0%})")
            print(f"| {m} | {r['plan']['step_s']:.3f} | {r['step_s']:.3f} | " + " | ".join(cells) + " |", flush=True)

    bench.with_testbed(LINK, probe)


if __name__ == "__main__":
    main()
