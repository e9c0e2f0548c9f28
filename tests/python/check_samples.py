"""What the PyPI package scope-profiler makes of a sampled run, as JSON (the oracle of
tests/sampling.rs):

    check_samples.py PROFILE.h5 [FILE.sps ...]

{"sps": [{"path", "rank", "hz", "ticks", "samples", "outside",
          "regions": {region: {"total": n, "lines": {"<file name>:<line>": n}}}}],
 "h5": {rank: {region: {"total": n, "lines": {...}, "functions": [...]}}},
 "cli": the text of `scope-profiler line-profile PROFILE.h5 --ranks <all>`}

The .sps files go through `native_samples.read_samples` and `line_profile` (addresses to
lines with the system's llvm-symbolizer or addr2line, as `scope-profiler native-lines`
does); the profile through `read_profile(...).line_profile`, what `line-profile` prints.
The package parses llvm-symbolizer's `file:line:column` as file `file:line` and line
`column`: such a pair is read back as (file, line) here.
"""
import contextlib
import io
import json
import re
import sys
from collections import Counter

from scope_profiler.native_samples import line_profile, read_samples
from scope_profiler.profile_io import read_profile
from scope_profiler.line_profile_cli import main as line_profile_main


def place(file, line):
    m = re.match(r"^(.*):(\d+)$", file)
    if m:
        file, line = m.group(1), int(m.group(2))
    return f"{file.rsplit('/', 1)[-1]}:{int(line)}"


out = {"sps": [], "h5": {}, "cli": ""}
for path in sys.argv[2:]:
    s = read_samples(path)
    regions = {}
    for region, stats in line_profile(s).items():
        lines = Counter()
        for st in stats:
            lines[place(st.file, st.line)] += st.samples
        regions[region] = {"total": sum(lines.values()), "lines": dict(lines)}
    out["sps"].append(
        {
            "path": path,
            "rank": s.rank,
            "hz": s.hz,
            "ticks": s.ticks,
            "samples": int(len(s.samples)),
            "outside": int((s.samples["region"] < 0).sum()),
            "regions": regions,
        }
    )

results = read_profile(sys.argv[1])
for rank, records in results.line_profile.items():
    regions = {}
    for rec in records:
        r = regions.setdefault(rec["region"], {"total": 0, "lines": Counter(), "functions": []})
        r["functions"].append(rec["function"])
        for line, hits in zip(rec["line_numbers"], rec["hits"]):
            r["lines"][place(rec["filename"], int(line))] += int(hits)
            r["total"] += int(hits)
    out["h5"][str(rank)] = {k: {**v, "lines": dict(v["lines"])} for k, v in regions.items()}

ranks = sorted(results.line_profile)
if ranks:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        line_profile_main([sys.argv[1], "--ranks", ",".join(str(r) for r in ranks)])
    out["cli"] = buf.getvalue()
print(json.dumps(out))
