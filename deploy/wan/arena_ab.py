#!/usr/bin/env python3
"""skytraind with one allocator arena (daemon/ops/allocator.h) against glibc's default arenas,
side by side on the unshaped testbed: the testbed is brought up alternately as built and
with an LD_PRELOAD shim that turns skytraind's mallopt(M_ARENA_MAX, 1) into a no-op (gcc
builds it here). Each time it runs the synchronous zb-h1 job at m = 8 and the delayed job at
m = 2 (bench.py's 2-stage model).

Usage (root, after deploy/build.sh): python3 deploy/wan/arena_ab.py [STEPS [BATCH [REPS]]]
"""
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
STEPS = sys.argv[1] if len(sys.argv) > 1 else "30"
BATCH = sys.argv[2] if len(sys.argv) > 2 else "256"
REPS = int(sys.argv[3]) if len(sys.argv) > 3 else 2
sys.argv = [sys.argv[0], STEPS, BATCH]
import bench  # noqa: E402  (reads STEPS and BATCH from sys.argv)

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
int mallopt(int param, int value) {
  static int (*real)(int, int);
  if (!real) real = (int (*)(int, int))dlsym(RTLD_NEXT, "mallopt");
  return param == M_ARENA_MAX ? 1 : real(param, value);
}
"""


def main():
    work = tempfile.mkdtemp()
    source, shim = os.path.join(work, "shim.c"), os.path.join(work, "noarena.so")
    with open(source, "w") as f:
        f.write(SHIM)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", shim, source, "-ldl"], check=True)
    runs = {"one arena": [], "default arenas": []}
    for _ in range(REPS):
        for name in runs:
            if name == "default arenas":
                os.environ["LD_PRELOAD"] = shim
            else:
                os.environ.pop("LD_PRELOAD", None)
            runs[name].append(bench.with_testbed("inf:0", lambda: (
                bench.run_job(2, micro_batches=8, schedule="zb-h1")["step_s"],
                bench.run_job(2, micro_batches=2, schedule="1f1b-delay", update="delayed")["step_s"])))
    os.environ.pop("LD_PRELOAD", None)
    print(f"batch {BATCH}, {STEPS} steps a job, unshaped testbed, {REPS} repetitions\n")
    print("| job | one arena (s/step) | default arenas (s/step) | speed-up |\n|---|---|---|---:|")
    for k, job in enumerate(("synchronous, zb-h1, m = 8", "delayed, 1f1b-delay, m = 2")):
        one = [r[k] for r in runs["one arena"]]
        default = [r[k] for r in runs["default arenas"]]
        print(f"| {job} | {', '.join(f'{x:.4f}' for x in one)} | {', '.join(f'{x:.4f}' for x in default)} | "
              f"{statistics.mean(default) / statistics.mean(one):.2f}x |")


if __name__ == "__main__":
    main()
