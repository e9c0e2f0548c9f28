"""Print what the PyPI package scope-profiler reads from a profile, as JSON (the oracle the
Rust tests compare our own reading against).

{"num_ranks": N, "has_likwid": bool, "likwid_ranks": [..], "metadata": {...},
 "regions": {name: {rank: {"calls": n, "total_ns": t, "durations_ns": [...] or null,
                           "source_file": str or null, "source_lineno": int or null}}},
 "perf_events": {rank: {region: {"calls": n, "values": {event: count}}}},
 "likwid": {rank: {tag: {"group_id", "group_name", "source", "event_names", "counter_names",
                         "metric_names", "cpus", "times", "call_counts", "events", "metrics"}}}}
NaN becomes null and infinities "inf"/"-inf" (JSON has neither).
"""
import json
import math
import sys

import numpy as np
from scope_profiler import read_h5


def plain(value):
    if isinstance(value, np.ndarray):
        return plain(value.tolist())
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if math.isnan(v):
            return None
        return v if math.isfinite(v) else ("inf" if v > 0 else "-inf")
    return value


results = read_h5(sys.argv[1])
out = {
    "num_ranks": int(results.num_ranks),
    "has_likwid": bool(results.has_likwid),
    "likwid_ranks": [int(r) for r in results.likwid_ranks],
    "metadata": {k: plain(v) for k, v in results.metadata.items()},
    "regions": {},
    "likwid": {},
}
for name in results.region_names:
    per_rank = {}
    for rank, region in results[name].regions.items():
        durations = np.asarray(region.durations_ns, dtype=np.int64)
        per_rank[str(rank)] = {
            "calls": int(region.num_calls),
            "total_ns": int(durations.sum()),
            "durations_ns": durations.tolist() if len(durations) <= 100 else None,
            "source_file": region.source_file,
            "source_lineno": plain(region.source_lineno),
        }
    out["regions"][name] = per_rank
for rank, regions in results.get_likwid_regions().items():
    out["likwid"][str(rank)] = {
        tag: {
            "group_id": int(r.group_id),
            "group_name": r.group_name,
            "source": r.source,
            "event_names": list(r.event_names),
            "counter_names": list(r.counter_names),
            "metric_names": list(r.metric_names),
            "cpus": plain(r.cpus),
            "times": plain(r.times),
            "call_counts": plain(r.call_counts),
            "events": plain(r.events),
            "metrics": plain(r.metrics),
        }
        for tag, r in regions.items()
    }
out["perf_events"] = {
    str(rank): {name: {"calls": int(t.calls), "values": {k: int(v) for k, v in t.values.items()}} for name, t in regions.items()}
    for rank, regions in results.get_perf_events().items()
}
json.dump(out, sys.stdout)
