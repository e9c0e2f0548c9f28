"""Print what the PyPI package scope-profiler reads of a profile's LIKWID results, as JSON.

{"has_likwid": bool, "ranks": [..], "likwid": {rank: {tag: {...}}},
 "calls": {region: {rank: calls}}}
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
    "has_likwid": bool(results.has_likwid),
    "ranks": [int(r) for r in results.likwid_ranks],
    "likwid": {},
    "calls": {},
}
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
for name in results.region_names:
    out["calls"][name] = {str(rank): int(reg.num_calls) for rank, reg in results[name].regions.items()}
json.dump(out, sys.stdout)
