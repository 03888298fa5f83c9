#!/usr/bin/env python3
"""The source article's cross-cloud fine-tuning (its section 2.2) on our data, on the emulated
WAN (deploy/wan/testbed.sh). Prints Markdown and writes the plots.

    sudo python3 deploy/wan/finetune.py [PARTS (ptc)]
        SEEDS=n (default 3), STEPS (translation, default 400), CLS_STEPS (default 200),
        PRETRAIN_STEPS (default 1500)

p. Pretrained trunks, made by skytrain: an English decoder (causal LM on the World English
   Bible) and a Spanish encoder (masked LM on the Reina-Valera 1909), each by its job in
   deploy/jobs/ (pretrain-en-decoder.json, pretrain-es-encoder.json) with the books held out
   for validation and test left out; the final checkpoints are the safetensors files the
   other parts load (build/data/bilingual/{en-decoder,es-encoder}.safetensors).
t. The article's Table 2 on our data: the Spanish encoder in cloud 0, the English decoder with
   cross-attention in cloud 1, 100 Mbit/s and 20 ms one way between them; the trunks frozen,
   adapters and cross-attention trained (deploy/jobs/translate-es-en.json); per codec pair the
   step time against none/none and the test BLEU (greedy decoding, 900 verses of Mark, Joel
   and Galatians); baselines: the same model from scratch (nothing frozen), and the adapters
   trained with the link unshaped (one cloud) without compression. Every row runs the same
   number of steps.
c. Split-point fine-tuning: the Spanish encoder plus a classifier head (which group of books
   a verse comes from), cut into two stages at an SVD split point of block k's MLP (rank r,
   the MLP's residual not sent): accuracy against k at r = 8 (the article's Fig. 9), and
   r = 8, 16, 32 at the highest block a cut can follow (Table 3), with the uncut model.
"""
import concurrent.futures
import json
import os
import random
import shutil
import statistics
import subprocess
import sys

from experiment import ROOT, STATE, plot, spread, submit, testbed

DATA = os.path.join(ROOT, "build", "data", "bilingual")
JOBS = os.path.join(ROOT, "deploy", "jobs")
PARTS = sys.argv[1] if len(sys.argv) > 1 else "ptc"
SEEDS = int(os.environ.get("SEEDS", "3"))
STEPS = int(os.environ.get("STEPS", "400"))
CLS_STEPS = int(os.environ.get("CLS_STEPS", "200"))
PRETRAIN_STEPS = int(os.environ.get("PRETRAIN_STEPS", "1500"))
SHAPED, UNSHAPED = "100:20", "inf:0"
DECODER = os.path.join(DATA, "en-decoder.safetensors")
ENCODER = os.path.join(DATA, "es-encoder.safetensors")
GROUPS = [("history", "Genesis", "Esther"), ("wisdom", "Job", "Song of Solomon"), ("prophets", "Isaiah", "Malachi"),
          ("gospels", "Matthew", "Acts"), ("letters", "Romans", "Revelation of John")]
ROWS = [  # label, forward, backward, pretrained, link
    ("adapters, none / none", "none", "none", True, SHAPED),
    ("adapters, fp16 / fp16", "fp16", "fp16", True, SHAPED),
    ("adapters, fp16+svd:0.6 / int8", "fp16+svd:0.6", "int8", True, SHAPED),
    ("adapters, fp16+svd:0.2 / int8", "fp16+svd:0.2", "int8", True, SHAPED),
    ("adapters, int8 / int8 (ours)", "int8", "int8", True, SHAPED),
    ("baseline: from scratch, none / none", "none", "none", False, SHAPED),
    ("baseline: adapters in one cloud, none / none", "none", "none", True, UNSHAPED),
]


def job(name):
    """A job of deploy/jobs/ with its data paths under build/data."""
    with open(os.path.join(JOBS, name + ".json")) as f:
        text = f.read().replace("/var/lib/skytrain/data/bilingual/", DATA + "/")
    return json.loads(text)


def final_checkpoint(job_id, cloud, steps, stage=0):
    return os.path.join(STATE, f"cloud{cloud}", "jobs", job_id, "checkpoints", f"step-{steps - 1:08d}",
                        f"stage-{stage}.safetensors")


def pretrain():
    """Both trunks at once, each in its own cloud (a daemon of the testbed uses one core)."""
    testbed("up", UNSHAPED)
    try:
        def run(name, cloud, keep):
            spec = job(name)
            spec["steps"] = PRETRAIN_STEPS
            spec["stages"][0]["daemon"] = testbed("control", str(cloud), capture=True).strip()
            job_id, status = submit(spec)
            shutil.copyfile(final_checkpoint(job_id, cloud, PRETRAIN_STEPS), keep)
            return name, status["summary"]["validation_loss"], status["summary"]["train_seconds"]
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            rows = list(pool.map(run, ("pretrain-en-decoder", "pretrain-es-encoder"), (0, 1), (DECODER, ENCODER)))
    finally:
        testbed("down")
    print("### p. Pretrained trunks\n")
    print(f"| job | steps | validation loss | train seconds |\n|---|---:|---:|---:|")
    for name, loss, seconds in rows:
        print(f"| `deploy/jobs/{name}.json` | {PRETRAIN_STEPS} | {loss:.4f} | {seconds:.0f} |")
    print()


def translate(seed, forward, backward, pretrained):
    spec = job("translate-es-en")
    spec["seed"], spec["steps"] = seed, STEPS
    spec["compression"] = {"forward": forward, "backward": backward}
    for k, stage in enumerate(spec["stages"]):
        stage["daemon"] = testbed("control", str(k), capture=True).strip()
        if pretrained:
            stage["init_from"] = [ENCODER, DECODER][k]
        else:
            stage.pop("init_from", None)
    if not pretrained:
        spec["model"].pop("trainable", None)
        spec["model"]["adapter"] = 0
    _, status = submit(spec)
    steady = [s for s in status["steps"] if s["step"] > 5]
    return {"step_s": statistics.median(s["step_s"] for s in steady), "bleu": status["summary"]["validation_bleu"],
            "bytes": statistics.mean(s["bytes_sent"] for s in steady), "loss": [s["loss"] for s in status["steps"]],
            "validation": status["summary"]["validation_loss"], "m": status["plans"][-1]["micro_batches"]}


def translation_table():
    results = {}
    for link in (SHAPED, UNSHAPED):
        testbed("up", link)
        try:
            for label, forward, backward, pretrained, row_link in ROWS:
                if row_link == link:
                    results[label] = [translate(seed, forward, backward, pretrained) for seed in range(1, SEEDS + 1)]
        finally:
            testbed("down")
    reference = statistics.mean(r["step_s"] for r in results[ROWS[0][0]])
    print(f"### t. Translation, Spanish→English (`sudo SEEDS={SEEDS} STEPS={STEPS} python3 deploy/wan/finetune.py t`)\n")
    print(f"{STEPS} steps of batch 32 every row (same number of steps); test BLEU on 900 held-out verses (Mark, Joel, "
          f"Galatians), greedy decoding, sacreBLEU conventions (13a, 4-grams, brevity penalty); seeds 1..{SEEDS}.\n")
    print("| forward / backward | step time vs none | step (s), median | bytes a step | m | test BLEU, mean (min–max) | test loss |")
    print("|---|---:|---:|---:|---|---|---|")
    for label, *_ in ROWS:
        rs = results[label]
        step = statistics.mean(r["step_s"] for r in rs)
        print(f"| {label} | {step / reference:.2f} | {step:.3f} | {statistics.mean(r['bytes'] for r in rs):,.0f} | "
              f"{', '.join(str(r['m']) for r in rs)} | {spread([r['bleu'] for r in rs])} | "
              f"{spread([r['validation'] for r in rs])} |")
    print()
    colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#7f7f7f"]
    window = 20
    curve = lambda rs: [statistics.mean(statistics.mean(r["loss"][max(0, i - window + 1):i + 1]) for r in rs)
                        for i in range(STEPS)]
    plot({label: (colours[i], curve(results[label])) for i, (label, *_) in enumerate(ROWS)},
         os.path.join(ROOT, "docs", "translation-loss.svg"), "training loss (mean of seeds, 20-step average)")
    print("plot: `docs/translation-loss.svg`\n")


def labelled_sets():
    """Spanish verses labelled by their group of books: 2,000 random held-out verses for test."""
    with open(os.path.join(DATA, "es.tsv"), encoding="utf-8") as f:
        verses = [line.rstrip("\n").split("\t", 1) for line in f if "\t" in line]
    order = []
    for ref, _ in verses:
        if ref.rsplit(" ", 1)[0] not in order:
            order.append(ref.rsplit(" ", 1)[0])
    def group(ref):
        i = order.index(ref.rsplit(" ", 1)[0])
        return next(name for name, first, last in GROUPS if order.index(first) <= i <= order.index(last))
    random.Random(2026).shuffle(verses)
    paths = []
    for name, chosen in (("es-groups-train.tsv", verses[2000:]), ("es-groups-test.tsv", verses[:2000])):
        paths.append(os.path.join(DATA, name))
        with open(paths[-1], "w", encoding="utf-8") as f:
            f.writelines(f"{group(ref)}\t{text}\n" for ref, text in chosen)
    return paths


def classify(seed, train, test, block=None, rank=8):
    spec = job("pretrain-es-encoder")
    layers = spec["model"]["layers"]
    cut = layers // 2 if block is None else block + 1
    model = dict(spec["model"], kind="classifier", classes=[g[0] for g in GROUPS], init_from=ENCODER)
    model.pop("mask_rate", None)
    if block is not None:
        model["split_point"] = {"block": block, "layer": "fc", "rank": rank}
    spec.update({"name": "es-groups", "seed": seed, "steps": CLS_STEPS, "model": model,
                 "data": {"files": [train], "eval_files": [test], "sentencepiece_model": spec["data"]["sentencepiece_model"]},
                 "optimizer": {"lr": 0.0005, "schedule": "cosine", "warmup_steps": CLS_STEPS // 10, "min_lr": 0.00005,
                               "clip_norm": 1.0},
                 "eval": {"samples": 2000}, "checkpoint": {"interval": 0, "keep": 1}})
    spec["stages"] = [{"daemon": testbed("control", str(k), capture=True).strip(), "layers": r}
                      for k, r in enumerate(([0, cut], [cut, layers]))]
    _, status = submit(spec)
    return status["summary"]["validation_accuracy"]


def split_points():
    train, test = labelled_sets()
    layers, d = job("pretrain-es-encoder")["model"]["layers"], job("pretrain-es-encoder")["model"]["d_model"]
    blocks = list(range(layers - 1))  # a cut must leave a block to the second stage
    testbed("up", UNSHAPED)  # accuracy does not depend on the link
    try:
        uncut = [classify(s, train, test) for s in range(1, SEEDS + 1)]
        by_block = {k: [classify(s, train, test, k, 8) for s in range(1, SEEDS + 1)] for k in blocks}
        top = blocks[-1]
        by_rank = {8: by_block[top]}
        for r in (16, 32):
            by_rank[r] = [classify(s, train, test, top, r) for s in range(1, SEEDS + 1)]
    finally:
        testbed("down")
    print(f"### c. Split points (`sudo SEEDS={SEEDS} CLS_STEPS={CLS_STEPS} python3 deploy/wan/finetune.py c`)\n")
    print(f"Spanish encoder (pretrained, part p) + classifier head, {CLS_STEPS} steps of batch 32, every parameter "
          f"trains; 5 groups of books; 2,000 held-out verses; seeds 1..{SEEDS}.\n")
    print("| cut | accuracy, mean (min–max) |\n|---|---|")
    print(f"| uncut (block boundary {layers // 2}, d_model = {d} a token) | {spread(uncut)} |")
    for k in blocks:
        print(f"| split point after block {k}'s fc, r = 8 | {spread(by_block[k])} |")
    print()
    print(f"| r at block {top} | accuracy, mean (min–max) | numbers a token crossing | of d_model = {d} |\n|---|---|---:|---:|")
    for r, accs in by_rank.items():
        print(f"| {r} | {spread(accs)} | {r} | 1/{d // r} |")
    print(f"| uncut | {spread(uncut)} | {d} | 1 |\n")
    plot({"split point, r = 8": ("#d62728", [statistics.mean(by_block[k]) for k in blocks]),
          "uncut": ("#1f77b4", [statistics.mean(uncut)] * len(blocks))},
         os.path.join(ROOT, "docs", "split-point-accuracy.svg"), "accuracy (mean of seeds)", "block of the cut", blocks)
    print("plot: `docs/split-point-accuracy.svg`\n")


def main():
    if os.geteuid() != 0:
        sys.exit("finetune.py: needs root (network namespaces)")
    subprocess.run([os.path.join(ROOT, "deploy", "parallel-corpus.sh"), DATA], check=True, stdout=subprocess.DEVNULL)
    if "p" in PARTS:
        pretrain()
    if "t" in PARTS:
        translation_table()
    if "c" in PARTS:
        split_points()


if __name__ == "__main__":
    main()
