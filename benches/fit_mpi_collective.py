"""Tables and a model from benches/run_mpi_collective.sh's lines (stdin or a file):
  way ranks calls/rank file-bytes finalize-s raw-s ratio status
Medians over the repeats; then finalize = a + b*log2(P) + c*bytes fitted (least squares) to
each way's medians, and the collective way extrapolated to 10,000 ranks x 1e6 calls per rank.
Usage: fit_mpi_collective.py [LOG] [--bandwidth GB/s (default 50)] [--rank0-bandwidth GB/s (default 2)]
"""
import math
import statistics
import sys
from collections import defaultdict

import numpy as np

args = sys.argv[1:]


def opt(name, default):
    if name in args:
        i = args.index(name)
        v = float(args[i + 1])
        del args[i : i + 2]
        return v
    return default


bw = opt("--bandwidth", 50.0) * 1e9
bw0 = opt("--rank0-bandwidth", 2.0) * 1e9
lines = open(args[0]).read().splitlines() if args else sys.stdin.read().splitlines()
runs = defaultdict(list)
for line in lines:
    parts = line.split()
    if len(parts) != 8 or parts[0] not in ("rank0", "collective", "default"):
        continue
    way, p, calls, size, fin, raw, _, status = parts
    if status != "0":
        print(f"failed run: {line}", file=sys.stderr)
        continue
    runs[(way, int(p), int(calls))].append((int(size), float(fin), float(raw)))

keys = sorted({(p, c) for (_, p, c) in runs})
print("| ranks | calls per rank | file MB | raw write_at_all s | through rank 0 s (ratio) | collective s (ratio) | default layout s (ratio) |")
print("|---|---|---|---|---|---|---|")
med = {}
for p, c in keys:
    cells = []
    raws = []
    for way in ("rank0", "collective", "default"):
        r = runs.get((way, p, c), [])
        if not r:
            cells.append("-")
            continue
        fin = statistics.median(x[1] for x in r)
        ratio = statistics.median(x[1] / x[2] for x in r)
        raws.extend(x[2] for x in r)
        size = statistics.median(x[0] for x in r)
        med[(way, p, c)] = (size, fin)
        cells.append(f"{fin:.3f} ({ratio:.2f})")
    size = statistics.median(x[0] for way in ("collective", "rank0") for x in runs.get((way, p, c), [])) if raws else 0
    print(f"| {p} | {c:,} | {size / 1e6:.1f} | {statistics.median(raws):.3f} | " + " | ".join(cells) + " |")

print()
for way in ("collective", "rank0"):
    pts = [(p, size, fin) for (w, p, c), (size, fin) in med.items() if w == way]
    if len(pts) < 3:
        continue
    A = np.array([[1.0, math.log2(p), size] for p, size, _ in pts])
    y = np.array([fin for _, _, fin in pts])
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    pred = A @ coef
    r2 = 1 - ((y - pred) ** 2).sum() / max(((y - y.mean()) ** 2).sum(), 1e-30)
    a, b, c = coef
    print(f"{way}: finalize = {a * 1e3:.1f} ms + {b * 1e3:.2f} ms x log2 P + {c * 1e9:.3f} s/GB x bytes   (R^2 = {r2:.3f}, {len(pts)} points)")

P, calls = 10_000, 1_000_000
B = 17 * P * calls
print()
print(f"10,000 ranks x 1e6 calls: {B / 1e9:.0f} GB in the columnar layout")
pts = [(p, size, fin) for (w, p, c), (size, fin) in med.items() if w == "collective"]
if pts:
    A = np.array([[1.0, math.log2(p), size] for p, size, _ in pts])
    coef, *_ = np.linalg.lstsq(A, np.array([f for *_, f in pts]), rcond=None)
    a, b, c = coef
    per_rank = c * 17 * calls  # this VM's cost of one rank's bytes (encoding and writing), on its own core
    t = a + b * math.log2(P) + per_rank + B / bw
    print(
        f"collective: {a:.3f} s + {b * math.log2(P):.3f} s (log2 P) + {per_rank:.3f} s (a rank's own 1e6 calls at this VM's "
        f"rate) + {B / bw:.1f} s ({B / 1e9:.0f} GB at {bw / 1e9:.0f} GB/s) = {t:.1f} s"
    )
    print(f"through rank 0: at least {B / bw0:.0f} s ({B / 1e9:.0f} GB through one process at {bw0 / 1e9:.0f} GB/s)")
