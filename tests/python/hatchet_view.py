"""What Hatchet and Thicket (PyPI llnl-hatchet, llnl-thicket) read from Caliper json-split files,
both with their default arguments, as JSON on the last line:
{"graphframes": [{"rows": [{"path": "main/solve", "rank": 0, "time": s, "time (inc)": s,
  "calls": n, ...metric columns}], "metadata": {...}}],
 "thicket": {"profiles": n, "metadata": {column: [values per profile]}}}"""
import json
import sys
import warnings

warnings.filterwarnings("ignore")
import hatchet as ht  # noqa: E402
import thicket as th  # noqa: E402


def plain(v):
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and v != v:
        return None
    return v


out = {"graphframes": []}
for path in sys.argv[1:]:
    gf = ht.GraphFrame.from_caliper(path)
    df = gf.dataframe.reset_index()
    # The path of every node, from the graph's roots (the reader links children only).
    path_of = {}
    stack = [(root, [str(root.frame["name"])]) for root in gf.graph.roots]
    while stack:
        node, names = stack.pop()
        path_of[id(node)] = "/".join(names)
        stack.extend((c, names + [str(c.frame["name"])]) for c in node.children)
    rows = []
    for _, r in df.iterrows():
        node = r["node"]
        row = {"path": path_of[id(node)]}
        for c in df.columns:
            if c != "node":
                row[c] = plain(r[c])
        rows.append(row)
    out["graphframes"].append({"rows": rows, "metadata": {k: plain(v) for k, v in gf.metadata.items()}})

tk = th.Thicket.from_caliper(sys.argv[1:])
meta = {c: [plain(v) for v in tk.metadata[c].tolist()] for c in tk.metadata.columns}
out["thicket"] = {"profiles": len(tk.profile), "metadata": meta, "perf_rows": len(tk.dataframe)}
print(json.dumps(out, default=str))
