"""What Debian's OTF2 reader (python3-otf2, run with /usr/bin/python3) sees in an archive, as
JSON: per location ("<group>/<location>") the Enter and Leave counts, whether every Leave closes
the innermost open region, the deepest nesting, the open regions left at the end and the call
paths entered; per region its source file, line and paradigm; the archive's properties."""
import sys, json, otf2
from otf2.events import Enter, Leave
out = {}
with otf2.reader.open(sys.argv[1]) as trace:
    props = {}
    for loc, ev in trace.events:
        key = f"{loc.group.name}/{loc.name}"
        d = out.setdefault(key, {"enter": 0, "leave": 0, "stack": [], "ok": True, "max_depth": 0, "paths": {}})
        if isinstance(ev, Enter):
            d["enter"] += 1
            d["stack"].append(ev.region.name)
            d["max_depth"] = max(d["max_depth"], len(d["stack"]))
            p = "/".join(d["stack"]); d["paths"][p] = d["paths"].get(p, 0) + 1
        elif isinstance(ev, Leave):
            d["leave"] += 1
            if not d["stack"] or d["stack"][-1] != ev.region.name:
                d["ok"] = False
            else:
                d["stack"].pop()
    regions = {r.name: (r.source_file, r.begin_line_number, str(r.paradigm)) for r in trace.definitions.regions}
    import _otf2
    names = _otf2.Reader_GetPropertyNames(trace._handle)
    props = {n: _otf2.Reader_GetProperty(trace._handle, n) for n in names}
    print(json.dumps({"locations": {k: {kk: vv for kk, vv in v.items() if kk != "stack"} | {"open": len(v["stack"])} for k, v in out.items()}, "regions": regions, "properties": props}, default=str))
