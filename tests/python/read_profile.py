"""Print what the PyPI package scope-profiler reads from a profile, as JSON (the oracle the
Rust tests compare our own reading against).

{"num_ranks": N, "has_likwid": bool, "likwid_ranks": [..], "metadata": {...},
 "storage_layout": "regions" | "columnar" | "aggregate",
 "regions": {name: {rank: {"calls": n, "total_ns": t, "min_ns", "max_ns", "exclusive_ns" (or null),
                           "durations_ns", "starts_ns", "ends_ns", "thread_ids": [...] or null (kept calls,
                           at most 100; null when more or none kept),
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


import h5py

with h5py.File(sys.argv[1], "r") as f:
    schema = int(f.attrs.get("scope_profiler_schema", 1))
    layout = "regions" if schema == 1 else plain(f.attrs.get("storage_layout", "columnar"))
    if isinstance(layout, bytes):
        layout = layout.decode()

results = read_h5(sys.argv[1])
out = {
    "storage_layout": layout,
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
        agg = region.stored_summary
        small = lambda a: None if a is None or len(a) > 100 or agg is not None else [int(v) for v in a]
        durations = np.asarray(region.durations_ns, dtype=np.int64)
        if agg is not None:
            # Aggregate layout: the stored integers, no calls.
            total, lo, hi, excl = agg["total"], agg["minimum"], agg["maximum"], agg.get("exclusive")
        else:
            total = int(durations.sum())
            lo = int(durations.min()) if len(durations) else 0
            hi = int(durations.max()) if len(durations) else 0
            excl = None
        per_rank[str(rank)] = {
            "calls": int(region.num_calls),
            "total_ns": int(total),
            "min_ns": int(lo),
            "max_ns": int(hi),
            "exclusive_ns": None if excl is None else int(excl),
            "durations_ns": small(durations),
            "starts_ns": small(region.start_times_ns),
            "ends_ns": small(region.end_times_ns),
            "thread_ids": small(region.thread_ids),
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
