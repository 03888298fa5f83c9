#!/usr/bin/env python3
"""The headline benchmarks on the emulated WAN (deploy/wan/testbed.sh). Prints Markdown.

  a. throughput of a 2- and a 3-stage pipeline over 100 Mbit/s and 1 Gbit/s links with 20 ms
     one-way delay, as a ratio to the same pipeline over unshaped links (the single cloud);
  b. step time of each compression strategy relative to none at 100 Mbit/s, with the
     validation loss after the same number of steps;
  c. the planner's m against the best m of a sweep on the 100 Mbit/s link.

Every run is a real job through real daemons; figures are steady state: the mean step time
after the last plan took effect (the first step under a plan, and profiling, are left out).
Usage (root, after deploy/build.sh): python3 deploy/wan/bench.py [steps] [batch] [tables]
  tables: any of "abc" (default all); SEEDS=n (default 3) runs table b over seeds 1..n and
  reports each strategy's mean step time and its validation loss as mean (min-max);
  STRATEGIES="F/B,F/B" replaces table b's rows (forward/backward codec specs).
  Table a: A_STAGES="2 3" and A_RATES="inf 100 1000" (Mbit/s; inf is the single cloud, and
  must stay) choose its rows; A_STRATEGIES (default all, comma-separated) the strategies of
  each: none (none/none), article (fp16+svd:0.6 / int8), auto (auto/auto: the planner
  chooses the codecs from the default lossless-quality list), pred (q13+pred / q13+rot: 8x
  fewer bytes both ways, 2 stages only), q13 (q13 / q13+rot, any cut), subspace (a subspace
  model, model.subspace rank SUBSPACE_RANK, default 2 of d_model 64: 32x fewer numbers at
  every cut, uncompressed) and subspace-q13 (the same with q13 on its coefficients), cut and
  cut-q13 (the same rank as a learned code at each cut: model.subspace.method "cut"), cut-bf16
  (twice that rank in bf16 both ways with sender_loss 1.0: the same bytes), and the
  same under the one-step-delayed update: none-delayed, auto-delayed. A_SWEEP="2 4 8" also runs the single
  cloud (synchronous, none) at each of these m and takes the fastest as the baseline of the
  ratio column.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TESTBED = os.path.join(HERE, "testbed.sh")
CORPUS = os.path.join(ROOT, "build", "data", "web.txt")
STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 60
BATCH = int(sys.argv[2]) if len(sys.argv) > 2 else 32
TABLES = sys.argv[3] if len(sys.argv) > 3 else "abc"
SEEDS = int(os.environ.get("SEEDS", "3"))
# Sized so that an uncompressed micro-batch's transfer at 100 Mbit/s takes longer than its
# compute here (16 kB a sample each way: ~1.2 ms, against ~0.4 ms of forward and backward).
MODEL = {"d_model": 64, "heads": 2, "d_ff": 128, "seq_len": 64}
ARTICLE_FWD = "fp16+svd:0.6"


def testbed(*args, capture=False):
    return subprocess.run([TESTBED, *args], check=True, text=True,
                          stdout=subprocess.PIPE if capture else subprocess.DEVNULL).stdout


def relay_cpu_seconds():
    """CPU time (user + system) used so far by the testbed's delay relays: the testbed's own
    load on the cores the daemons share."""
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() != "delay_relay":
                    continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except OSError:
            continue
    return total / os.sysconf("SC_CLK_TCK")


def run_job(stages, forward="none", backward="none", micro_batches="auto", schedule="auto", seed=7, update="sync",
            model=None):
    """Runs one job on the testbed that is up (`model`: fields over MODEL's); returns its status."""
    spec = {
        "name": "bench", "seed": seed, "steps": STEPS, "batch_size": BATCH,
        "micro_batches": micro_batches, "schedule": schedule, "update": update,
        "model": dict(MODEL, layers=stages, **(model or {})),
        "data": {"files": [CORPUS]}, "eval": {"samples": 64},
        # The default recipe (README "Training recipe"): warm-up, cosine decay, clipping.
        "optimizer": {"lr": 0.002, "schedule": "cosine", "warmup_steps": max(1, STEPS // 10),
                      "min_lr": 0.0002, "clip_norm": 1.0},
        "compression": {"forward": forward, "backward": backward},
        "stages": [{"daemon": testbed("control", str(k), capture=True).strip(), "layers": [k, k + 1]}
                   for k in range(stages)],
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    relay_before = relay_cpu_seconds()
    out = testbed("client", "submit", f.name, capture=True)
    job = next(line.split()[2] for line in out.splitlines() if line.startswith("submitted job"))
    status = json.loads(testbed("client", "status", "--json", job, capture=True))
    relay_per_step = (relay_cpu_seconds() - relay_before) / STEPS
    os.unlink(f.name)
    if status["state"] != "succeeded":
        sys.exit(f"benchmark job failed: {status['error']}")
    plan = status["plans"][-1]
    # A re-plan in the last step leaves nothing after it: then every step but the first counts.
    # The delayed update runs the learning rate's warm-up synchronously: its steady state
    # starts after it.
    start = max(plan["from_step"], spec["optimizer"]["warmup_steps"] if update == "delayed" else 0)  # 1-based
    steady = [s for s in status["steps"] if s["step"] > start] or status["steps"][1:]
    step_s = sum(s["step_s"] for s in steady) / len(steady)
    return {
        "step_s": step_s, "samples_per_s": BATCH / step_s, "m": plan["micro_batches"],
        "schedule": plan["schedule"] + (f" {plan['forward_codecs'][0]}/{plan['backward_codecs'][0]}"
                                    if plan.get("forward_codecs") else ""), "replans": len(status["plans"]) - 1,
        "validation": status["summary"].get("validation_loss"),
        "bytes": status["summary"]["bytes_sent_per_step"], "plan": plan, "relay_cpu_s": relay_per_step,
        # Each stage's mean compute seconds a step (forward, backward, update) in the steady state.
        "compute_s": [sum(s["compute_s"][k] for s in steady) / len(steady) for k in range(len(steady[0]["compute_s"]))]
        if steady and "compute_s" in steady[0] else [],
    }


def one_f_one_b_bound(compute_s, stages, delay_s, delayed=False):
    """The step a 1F1B-kind synchronous schedule cannot beat when the last stage is the
    slowest (as in this model, whose last stage has the head and the loss): the single
    cloud's step plus the 2(p-1) one-way delays its last stage waits each step, for the
    first activation to arrive and for the last gradient to reach stage 0 before the update.
    ZB-H1 can beat it: its last stage runs deferred weight-gradient passes in that wait. The
    delayed update overlaps steps, so the compute alone bounds it."""
    return compute_s + (0 if delayed else 2 * (stages - 1) * delay_s)


def with_testbed(links, fn):
    testbed("up", links)
    try:
        return fn()
    finally:
        testbed("down")


def link_limit(r, stages, rate_mbit, delay_s, delayed=False):
    """The link's bound on the step time: the busiest link's bytes in one direction over its
    rate (links are full duplex and each carries 1/(p-1) of the bytes; the two directions are
    taken as equal, which is exact for none/none and generous to compressed backward), plus,
    under the synchronous update, the round trip the pipeline's fill and drain cannot hide:
    2(p-1) one-way delays. The delayed update overlaps steps, so only the bytes remain."""
    per_direction = r["bytes"] / (stages - 1) / 2
    return per_direction / (rate_mbit * 1e6 / 8) + (0 if delayed else 2 * (stages - 1) * delay_s)


SUBSPACE = {"subspace": {"rank": int(os.environ.get("SUBSPACE_RANK", "2"))}}
CUT = {"subspace": {"rank": SUBSPACE["subspace"]["rank"], "method": "cut"}}
# The recipe docs/models.md recommends at the same bytes: twice the numbers in bf16, with the
# sender's own loss.
CUT_BF16 = {"subspace": {"rank": 2 * CUT["subspace"]["rank"], "method": "cut", "sender_loss": 1.0}}
STRATEGIES_A = {  # name: (label, forward, backward, update, model fields)
    "none": ("none", "none", "none", "sync", None),
    "article": (f"{ARTICLE_FWD} / int8", ARTICLE_FWD, "int8", "sync", None),
    "auto": ("auto / auto", "auto", "auto", "sync", None),
    "pred": ("q13+pred / q13+rot", "q13+pred", "q13+rot", "sync", None),
    "q13": ("q13 / q13+rot", "q13", "q13+rot", "sync", None),
    "subspace": (f"subspace k = {SUBSPACE['subspace']['rank']}, none / none", "none", "none", "sync", SUBSPACE),
    "subspace-q13": (f"subspace k = {SUBSPACE['subspace']['rank']}, q13 / q13", "q13", "q13", "sync", SUBSPACE),
    "cut": (f"learned code at each cut k = {CUT['subspace']['rank']}, none / none", "none", "none", "sync", CUT),
    "cut-q13": (f"learned code at each cut k = {CUT['subspace']['rank']}, q13 / q13", "q13", "q13", "sync", CUT),
    "cut-bf16": (f"learned code at each cut k = {CUT_BF16['subspace']['rank']}, bf16 / bf16, sender_loss 1.0",
                 "bf16", "bf16", "sync", CUT_BF16),
    "none-delayed": ("none, delayed update", "none", "none", "delayed", None),
    "auto-delayed": ("auto / auto, delayed update", "auto", "auto", "delayed", None),
}


def throughput_tables():
    print(f"### a. Throughput against the single cloud ({STEPS} steps a run)\n")
    print("| stages | links | strategy | m, schedule | samples/s | ratio to unshaped | step s | link limit s | "
          "compute limit s | larger limit / step | 1F1B bound s (compute + round trips) | that / step | "
          "planner's predicted s | predicted ratio to unshaped | validation loss | relay CPU s/step |")
    print("|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    results = {}
    for stages in (int(x) for x in os.environ.get("A_STAGES", "2 3").split()):
        for rate in os.environ.get("A_RATES", "inf 100 1000").split():
            links = ",".join([f"{rate}:{0 if rate == 'inf' else 20}"] * (stages - 1))
            chosen = os.environ.get("A_STRATEGIES", ",".join(STRATEGIES_A)).split(",")
            chosen = [n for n in chosen if n != "pred" or stages == 2]  # +pred: a 2-stage job's forward link

            def measure():
                out = {STRATEGIES_A[n][0]: run_job(stages, *STRATEGIES_A[n][1:3], update=STRATEGIES_A[n][3],
                                                   model=STRATEGIES_A[n][4])
                       for n in chosen}
                if rate == "inf" and os.environ.get("A_SWEEP"):
                    # The single cloud at its best: synchronous, uncompressed, the fastest m of a
                    # sweep (the planner's pick on the unshaped links can miss it).
                    sweep = [run_job(stages, micro_batches=m) for m in map(int, os.environ["A_SWEEP"].split())]
                    out["none, best m of a sweep"] = min(sweep, key=lambda r: r["step_s"])
                return out
            runs = with_testbed(links, measure)
            for strategy, r in runs.items():
                results[(stages, rate, strategy)] = r
                # The baseline: the single cloud's synchronous uncompressed run, at the best m
                # of the sweep when there is one.
                best = results.get((stages, "inf", "none, best m of a sweep"), results.get((stages, "inf", "none")))
                base = (best or results[(stages, "inf", strategy)])["samples_per_s"]
                label = "unshaped (single cloud)" if rate == "inf" else f"{rate} Mbit/s, 20 ms"
                single = results.get((stages, "inf", strategy), r)  # the same strategy unshaped
                compute = single["step_s"]
                link = 0.0 if rate == "inf" else link_limit(r, stages, float(rate), 0.020, "delayed" in strategy)
                bound = one_f_one_b_bound(compute, stages, 0.0 if rate == "inf" else 0.020, "delayed" in strategy)
                # The planner's own model of the plan it ran, and of the same strategy's single
                # cloud: what its simulator says the schedule can reach on this link.
                predicted = r["plan"]["step_s"]
                predicted_base = single["plan"]["step_s"]
                print(f"| {stages} | {label} | `{strategy}` | {r['m']}, {r['schedule']} | "
                      f"{r['samples_per_s']:.1f} | {r['samples_per_s'] / base:.2f} | {r['step_s']:.4f} | "
                      f"{link:.4f} | {compute:.4f} | {max(link, compute) / r['step_s']:.2f} | "
                      f"{bound:.4f} | {bound / r['step_s']:.2f} | {predicted:.4f} | {predicted_base / predicted:.2f} | "
                      f"{r['validation'] if r['validation'] is None else format(r['validation'], '.4f')} | "
                      f"{r['relay_cpu_s']:.4f} |")
    print()


def compression_table():
    print(f"### b. Compression at 100 Mbit/s, 20 ms (2 stages, planner on, {STEPS} steps a run, "
          f"seeds 1..{SEEDS})\n")
    print("| forward / backward | step time (s, mean) | relative to none | bytes/step | validation loss, mean (min-max) | m |")
    print("|---|---:|---:|---:|---|---|")
    strategies = [("none", "none"), ("fp16", "fp16"), ("int8", "int8"), ("fp16+svd:0.6", "int8"),
                  ("fp16+svd:0.2", "int8"), ("topk:0.1", "topk:0.1"), ("q13", "q13"), ("q13+rot", "q13+rot"),
                  ("q13+pred", "q13+rot"),
                  ("auto", "auto")]
    if os.environ.get("STRATEGIES"):  # "F/B,F/B": these rows instead
        strategies = [tuple(pair.split("/", 1)) for pair in os.environ["STRATEGIES"].split(",")]
    runs = with_testbed("100:20", lambda: [(f, b, [run_job(2, f, b, seed=k) for k in range(1, SEEDS + 1)])
                                           for f, b in strategies])
    base = sum(r["step_s"] for r in runs[0][2]) / SEEDS
    for f, b, rs in runs:
        step_s = sum(r["step_s"] for r in rs) / len(rs)
        vals = [r["validation"] for r in rs]
        print(f"| `{f}` / `{b}` | {step_s:.4f} | {step_s / base:.2f} | {rs[0]['bytes'] / 1e3:.0f} kB | "
              f"{sum(vals) / len(vals):.4f} ({min(vals):.4f}-{max(vals):.4f}) | {', '.join(str(r['m']) for r in rs)} |")
    print()


def planner_table():
    print(f"### c. The planner's m against a sweep at 100 Mbit/s, 20 ms (2 stages, none, {STEPS} steps)\n")

    def sweep():
        auto = run_job(2)
        fixed = {m: run_job(2, micro_batches=m, schedule=auto["schedule"])
                 for m in range(1, BATCH + 1) if BATCH % m == 0}
        return auto, fixed
    auto, fixed = with_testbed("100:20", sweep)
    predicted = {row["micro_batches"]: row["step_s"] for row in auto["plan"]["table"]
                 if row["schedule"] == auto["schedule"]}
    print(f"schedule: {auto['schedule']} (the planner's)\n")
    print("| m | measured s/step | predicted s/step (auto run's final plan) |")
    print("|---:|---:|---:|")
    for m, r in fixed.items():
        print(f"| {m} | {r['step_s']:.4f} | {predicted.get(m, float('nan')):.4f} |")
    best = min(fixed, key=lambda m: fixed[m]["step_s"])
    print(f"\nplanner (auto run, {auto['replans']} re-plans): m = {auto['m']}, measured {auto['step_s']:.4f} s/step, "
          f"predicted {auto['plan']['step_s']:.4f}; best of the sweep: m = {best}, {fixed[best]['step_s']:.4f} s/step; "
          f"the planner's run is {100 * (auto['step_s'] / fixed[best]['step_s'] - 1):+.1f}% from the best\n")


def main():
    if os.geteuid() != 0:
        sys.exit("bench.py: needs root (network namespaces)")
    subprocess.run([os.path.join(ROOT, "deploy", "get-corpus.sh"), CORPUS], check=True, stdout=subprocess.DEVNULL)
    print(f"## Emulated WAN benchmarks\n\nmachine: {os.cpu_count()} cores; model GPT d_model {MODEL['d_model']}, "
          f"{MODEL['heads']} heads, d_ff {MODEL['d_ff']}, seq {MODEL['seq_len']}, one block a stage; batch {BATCH}\n")
    if "a" in TABLES:
        throughput_tables()
    if "b" in TABLES:
        compression_table()
    if "c" in TABLES:
        planner_table()


if __name__ == "__main__":
    main()
