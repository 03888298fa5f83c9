"""What the experiments on the emulated WAN share: driving the testbed (deploy/wan/testbed.sh),
submitting jobs and waiting for their end, spreads over seeds, and line charts as SVG."""
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TESTBED = os.path.join(HERE, "testbed.sh")
STATE = os.environ.get("SKYTRAIN_WAN_STATE", "/tmp/skytrain-wan")


def testbed(*args, capture=False):
    return subprocess.run([TESTBED, *args], check=True, text=True,
                          stdout=subprocess.PIPE if capture else subprocess.DEVNULL).stdout


def submit(spec):
    """Runs a job spec on the testbed that is up to its end; returns (job id, status)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    out = testbed("client", "submit", f.name, capture=True)
    os.unlink(f.name)
    job = next(line.split()[2] for line in out.splitlines() if line.startswith("submitted job"))
    status = json.loads(testbed("client", "status", "--json", job, capture=True))
    if status["state"] != "succeeded":
        sys.exit(f"job {spec['name']} failed: {status['error']}")
    return job, status


def spread(values):
    return f"{statistics.mean(values):.4f} ({min(values):.4f}–{max(values):.4f})"


def smooth(values, window=10):
    return [statistics.mean(values[max(0, i - window + 1):i + 1]) for i in range(len(values))]


def plot(curves, path, ylabel, xlabel="step", xs=None):
    """A line chart as SVG: {label: (colour, [y per point])}; xs: the x value of each point
    (default: its index)."""
    width, height, left, bottom, top, right = 720, 400, 60, 40, 20, 20
    every = [y for _, ys in curves.values() for y in ys]
    lo, hi = min(every), max(every)
    steps = max(len(ys) for _, ys in curves.values())
    x = lambda i: left + (width - left - right) * i / max(1, steps - 1)
    y = lambda v: top + (height - top - bottom) * (hi - v) / max(1e-9, hi - lo)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="black"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="black"/>']
    for k in range(5):
        v = lo + (hi - lo) * k / 4
        parts.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.3f}</text>')
        s = int((steps - 1) * k / 4)
        label = s if xs is None else xs[s]
        parts.append(f'<text x="{x(s):.1f}" y="{height - bottom + 16}" text-anchor="middle">{label}</text>')
    parts.append(f'<text x="{(left + width - right) / 2}" y="{height - 4}" text-anchor="middle">{xlabel}</text>')
    parts.append(f'<text x="14" y="{(top + height - bottom) / 2}" transform="rotate(-90 14 {(top + height - bottom) / 2})" '
                 f'text-anchor="middle">{ylabel}</text>')
    for n, (label, (colour, ys)) in enumerate(curves.items()):
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(ys))
        dash = ' stroke-dasharray="6,4"' if n else ""  # dashed: a curve that coincides stays visible
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5"{dash} points="{points}"/>')
        parts.append(f'<text x="{width - right - 8}" y="{top + 16 + 16 * n}" text-anchor="end" fill="{colour}">{label}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")
