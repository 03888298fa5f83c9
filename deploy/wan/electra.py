#!/usr/bin/env python3
"""The source article's cross-cloud ELECTRA experiment (its section 2.1) on our data, on the
emulated WAN (deploy/wan/testbed.sh). Prints Markdown and writes the loss plot.

    sudo python3 deploy/wan/electra.py [STEPS (300)] [BATCH (16)] [PARTS (abc)]
        SEEDS=n (default 3), STALENESS=s (default 1)

Three clouds in a chain: cloud 0 runs generator 1 on the English Bible (World English
Bible), cloud 2 generator 2 on the Spanish Bible (Reina-Valera 1909), cloud 1 between them
the discriminator; both links 100 Mbit/s with 20 ms one way. The same jobs run again on the
same daemons with the links unshaped (the single-cloud baseline). Every generator and the
discriminator share one SentencePiece vocabulary trained on both languages
(deploy/bilingual-corpus.sh). Measures:
  a. bytes per step on each link, against what crossing activations at a cut would cost;
  b. throughput cross-cloud / single-cloud;
  c. the discriminator's loss curves, single-cloud and cross-cloud, on one plot
     (docs/electra-loss.svg);
  d. what the second language buys (the article's Table 1 in miniature): discriminators
     pretrained with both generators, with the English generator only, and none, each
     fine-tuned as a classifier of which group of books a verse comes from on English
     verses only, then tested on the same held-out verses in English and in Spanish
     (zero-shot cross-lingual transfer).
"""
import os
import random
import shutil
import statistics
import subprocess
import sys

from experiment import ROOT, STATE, plot, smooth, spread, submit, testbed

DATA = os.path.join(ROOT, "build", "data", "bilingual")
STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 300
BATCH = int(sys.argv[2]) if len(sys.argv) > 2 else 16
SEEDS = int(os.environ.get("SEEDS", "3"))
STALENESS = int(os.environ.get("STALENESS", "1"))
PARTS = sys.argv[3] if len(sys.argv) > 3 else "abc"
FINE_TUNE_STEPS = int(os.environ.get("FINE_TUNE_STEPS", "200"))
# The labelled task: the group of books a verse comes from (books present in both Bibles).
GROUPS = [("history", "Genesis", "Esther"), ("wisdom", "Job", "Song of Solomon"), ("prophets", "Isaiah", "Malachi"),
          ("gospels", "Matthew", "Acts"), ("letters", "Romans", "Revelation of John")]
PLOT = os.path.join(ROOT, "docs", "electra-loss.svg")
VOCAB = 8000
DISCRIMINATOR = {"d_model": 128, "heads": 4, "layers": 4, "d_ff": 512, "seq_len": 64}
GENERATOR = {"d_model": 64, "heads": 2, "layers": 2, "d_ff": 256}
SHAPED = "100:20,100:20"
UNSHAPED = "inf:0,inf:0"


def run_job(seed, languages=("en", "es"), keep=None):
    """An ELECTRA job: a generator per language (clouds 0 and 2), the discriminator in cloud 1.
    keep: a path to copy the discriminator's final checkpoint to."""
    control = [testbed("control", str(k), capture=True).strip() for k in range(3)]
    clouds = {"en": 0, "es": 2}
    spec = {
        "name": "electra-en-es", "seed": seed, "steps": STEPS, "batch_size": BATCH, "micro_batches": "auto",
        "max_staleness": STALENESS,
        "model": dict(DISCRIMINATOR, kind="electra", vocab_size=VOCAB + 1, generator=GENERATOR),
        "data": {"files": [os.path.join(DATA, "en.txt")],
                 "sentencepiece_model": os.path.join(DATA, "spm-en-es.model")},
        "optimizer": {"lr": 0.001, "schedule": "cosine", "warmup_steps": max(1, STEPS // 10),
                      "min_lr": 0.0001, "clip_norm": 1.0},
        "eval": {"samples": 64},
        "stages": [{"daemon": control[clouds[lang]], "data_files": [os.path.join(DATA, lang + ".txt")]}
                   for lang in languages] + [{"daemon": control[1]}],
    }
    job, status = submit(spec)
    if keep:
        checkpoint = os.path.join(STATE, "cloud1", "jobs", job, "checkpoints", f"step-{STEPS - 1:08d}",
                                  f"stage-{len(languages)}.safetensors")
        shutil.copyfile(checkpoint, keep)
    steady = [s for s in status["steps"] if s["step"] > 5]
    step_s = sum(s["step_s"] for s in steady) / len(steady)
    return {
        "step_s": step_s, "samples_per_s": 2 * BATCH / step_s, "m": status["plans"][-1]["micro_batches"],
        "bytes": sum(s["bytes_sent"] for s in steady) / len(steady),
        "disc": [s["stage_losses"][-1] for s in status["steps"]],
        "gen_en": [s["stage_losses"][0] for s in status["steps"]],
        "gen_es": [s["stage_losses"][1] for s in status["steps"]] if len(languages) > 1 else [],
        "lead": max(s["lead"] for s in status["steps"]),
        "validation": status["summary"].get("validation_loss"),
        "plan": status["plans"][-1],
    }


def runs(links):
    testbed("up", links)
    try:
        return [run_job(seed) for seed in range(1, SEEDS + 1)]
    finally:
        testbed("down")


def labelled_sets():
    """en-train.tsv (English verses, labelled), and the held-out test verses in English and
    in Spanish (en-test.tsv, es-test.tsv: the same references)."""
    def read(lang):
        with open(os.path.join(DATA, lang + ".tsv")) as f:
            return dict(line.rstrip("\n").split("\t", 1) for line in f if "\t" in line)
    en, es = read("en"), read("es")
    order = []
    for ref in es:  # canonical order of the books both Bibles have
        book = ref.rsplit(" ", 1)[0]
        if book not in order:
            order.append(book)
    def group(ref):
        i = order.index(ref.rsplit(" ", 1)[0])
        for name, first, last in GROUPS:
            if order.index(first) <= i <= order.index(last):
                return name
        raise ValueError(ref)
    refs = [r for r in es if r in en]
    random.Random(2026).shuffle(refs)
    test, train = refs[:2000], refs[2000:]
    def write(name, lang, chosen):
        path = os.path.join(DATA, name)
        with open(path, "w") as f:
            for r in chosen:
                f.write(f"{group(r)}\t{(en if lang == 'en' else es)[r]}\n")
        return path
    counts = {g[0]: sum(1 for r in test if group(r) == g[0]) for g in GROUPS}
    return write("en-train.tsv", "en", train), write("en-test.tsv", "en", test), write("es-test.tsv", "es", test), counts


def fine_tune(seed, init, train, test):
    control = testbed("control", "1", capture=True).strip()
    model = dict(DISCRIMINATOR, kind="classifier", vocab_size=VOCAB + 1, classes=[g[0] for g in GROUPS])
    if init:
        model["init_from"] = init
    spec = {
        "name": "bible-groups", "seed": seed, "steps": FINE_TUNE_STEPS, "batch_size": 32, "micro_batches": 1,
        "schedule": "gpipe", "model": model,
        "data": {"files": [train], "eval_files": [test], "sentencepiece_model": os.path.join(DATA, "spm-en-es.model")},
        "optimizer": {"lr": 0.0005, "schedule": "cosine", "warmup_steps": FINE_TUNE_STEPS // 10, "min_lr": 0.00005,
                      "clip_norm": 1.0},
        "eval": {"samples": 2000},
        "stages": [{"daemon": control, "layers": [0, DISCRIMINATOR["layers"]]}],
    }
    _, status = submit(spec)
    return status["summary"]["validation_accuracy"]


def transfer_table():
    train, en_test, es_test, counts = labelled_sets()
    testbed("up", UNSHAPED)  # pretraining quality does not depend on the links (part c)
    try:
        pretrained = {"both generators (English + Spanish)": ("en", "es"), "English generator only": ("en",)}
        checkpoints = {}
        for label, languages in pretrained.items():
            checkpoints[label] = []
            for seed in range(1, SEEDS + 1):
                path = os.path.join(DATA, f"disc-{'-'.join(languages)}-{seed}.safetensors")
                run_job(seed, languages, keep=path)
                checkpoints[label].append(path)
        checkpoints["none (from scratch)"] = [None] * SEEDS
        rows = {}
        for label, paths in checkpoints.items():
            rows[label] = [(fine_tune(seed, path, train, en_test), fine_tune(seed, path, train, es_test))
                           for seed, path in enumerate(paths, 1)]
    finally:
        testbed("down")
    majority = max(counts.values()) / sum(counts.values())
    print("### d. What the second language buys: English-only fine-tuning, English and Spanish tests\n")
    print(f"Task: which of {len(GROUPS)} groups of books a verse comes from ({', '.join(g[0] for g in GROUPS)}); "
          f"fine-tuned {FINE_TUNE_STEPS} steps (batch 32) on English verses only; tested on the same 2,000 held-out "
          f"verses in English and in Spanish (zero-shot). Majority class: {majority:.3f}.\n")
    print("| discriminator pretrained with | English accuracy, mean (min–max) | Spanish accuracy (zero-shot), mean (min–max) |")
    print("|---|---|---|")
    for label, results in rows.items():
        print(f"| {label} | {spread([r[0] for r in results])} | {spread([r[1] for r in results])} |")
    print()


def main():
    if os.geteuid() != 0:
        sys.exit("electra.py: needs root (network namespaces)")
    subprocess.run([os.path.join(ROOT, "deploy", "bilingual-corpus.sh"), DATA, str(VOCAB)], check=True,
                   stdout=subprocess.DEVNULL)
    if "d" in PARTS:
        transfer_table()
    if not set("abc") & set(PARTS):
        return
    single = runs(UNSHAPED)
    cross = runs(SHAPED)
    b = BATCH // cross[0]["m"]
    t = DISCRIMINATOR["seq_len"]
    frame = 48 + 8 * 3 + len("tokens") + 1 + b * t * 2 + (b * t + 7) // 8  # header, width byte, u16 IDs, flags
    activations = 2 * b * t * GENERATOR["d_model"] * 4  # forward and backward at the generator's output, float32
    print(f"## Cross-cloud ELECTRA (`sudo SEEDS={SEEDS} STALENESS={STALENESS} python3 deploy/wan/electra.py {STEPS} {BATCH}`)\n")
    print(f"machine: {os.cpu_count()} cores; discriminator {DISCRIMINATOR}, generators {GENERATOR}, "
          f"SentencePiece vocabulary {VOCAB} (+[MASK]); batch {BATCH} per generator; seeds 1..{SEEDS}\n")
    print("### a. Bytes per step on each link\n")
    print("| | bytes a micro-batch | micro-batches a step | bytes a step, each link |")
    print("|---|---:|---:|---:|")
    m = cross[0]["m"]
    print(f"| token IDs + replaced flags (`tokens` codec), formula | {frame:,} | {m} | {frame * m:,} |")
    print(f"| measured (all links and acknowledgements, mean of steady steps) / 2 | | | "
          f"{statistics.mean(r['bytes'] for r in cross) / 2:,.0f} |")
    print(f"| activations of the generator's last layer, both ways, float32 | {activations:,} | {m} | {activations * m:,} |\n")
    print("### b. Throughput, cross-cloud against single-cloud (same daemons, links unshaped)\n")
    print("| links | samples/s (both generators), mean (min–max) | step (s) | m | max lead |")
    print("|---|---|---:|---|---:|")
    for label, rs in (("unshaped (single cloud)", single), ("100 Mbit/s, 20 ms each", cross)):
        print(f"| {label} | {spread([r['samples_per_s'] for r in rs])} | {statistics.mean(r['step_s'] for r in rs):.4f} | "
              f"{', '.join(str(r['m']) for r in rs)} | {max(r['lead'] for r in rs)} |")
    ratio = statistics.mean(r["samples_per_s"] for r in cross) / statistics.mean(r["samples_per_s"] for r in single)
    print(f"\ncross-cloud / single-cloud throughput: **{ratio:.3f}**\n")
    print("### c. Discriminator loss, single-cloud against cross-cloud\n")
    print("| links | final discriminator loss (mean of the last 10 steps) | validation loss | generator EN | generator ES |")
    print("|---|---|---|---|---|")
    last = lambda xs: statistics.mean(xs[-10:])
    for label, rs in (("unshaped (single cloud)", single), ("100 Mbit/s, 20 ms each", cross)):
        print(f"| {label} | {spread([last(r['disc']) for r in rs])} | {spread([r['validation'] for r in rs])} | "
              f"{spread([last(r['gen_en']) for r in rs])} | {spread([last(r['gen_es']) for r in rs])} |")
    mean_curve = lambda rs: smooth([statistics.mean(c) for c in zip(*(r["disc"] for r in rs))])
    plot({"single cloud": ("#1f77b4", mean_curve(single)), "cross-cloud, 100 Mbit/s, 20 ms": ("#d62728", mean_curve(cross))},
         PLOT, "discriminator loss (mean of seeds, 10-step average)")
    gap = max(abs(a - b) for a, b in zip(mean_curve(single), mean_curve(cross)))
    print(f"\nlargest gap between the two mean curves (10-step averages): {gap:.4f}; plot: `docs/electra-loss.svg`\n")


if __name__ == "__main__":
    main()
