"""Compare two HDF5 files object by object with h5py: the same groups and datasets, every
dataset with the same type, shape and values (NaN equal to NaN), every attribute with the same
value wherever both objects have it. Prints one line per difference (at most 50) and the
number of objects compared; exits 1 on any difference.

Usage: compare_files.py A.h5 B.h5 [--ignore-attr NAME]...
"""
import sys

import h5py
import numpy as np


def objects(f):
    out = {}
    f.visititems(lambda name, obj: out.__setitem__(name, obj))
    out["/"] = f
    return out


def same_values(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.names:
        return all(same_values(a[n], b[n]) for n in a.dtype.names)
    if a.dtype.kind == "f":
        return bool(np.array_equal(a, b, equal_nan=True))
    if a.dtype.kind == "O":
        return a.ravel().tolist() == b.ravel().tolist()
    return bool(np.array_equal(a, b))


def main():
    args = sys.argv[1:]
    ignored = {args[i + 1] for i, a in enumerate(args) if a == "--ignore-attr"}
    paths = [a for i, a in enumerate(args) if a != "--ignore-attr" and (i == 0 or args[i - 1] != "--ignore-attr")]
    diffs = []
    with h5py.File(paths[0], "r") as fa, h5py.File(paths[1], "r") as fb:
        oa, ob = objects(fa), objects(fb)
        for name in sorted(set(oa) ^ set(ob)):
            diffs.append(f"{name}: only in {'A' if name in oa else 'B'}")
        for name in sorted(set(oa) & set(ob)):
            a, b = oa[name], ob[name]
            if isinstance(a, h5py.Dataset) != isinstance(b, h5py.Dataset):
                diffs.append(f"{name}: a dataset in one file only")
                continue
            if isinstance(a, h5py.Dataset):
                if a.dtype != b.dtype:
                    diffs.append(f"{name}: type {a.dtype} vs {b.dtype}")
                elif a.shape != b.shape:
                    diffs.append(f"{name}: shape {a.shape} vs {b.shape}")
                elif not same_values(a[()], b[()]):
                    diffs.append(f"{name}: values differ")
            for attr in sorted(set(a.attrs) & set(b.attrs)):
                if attr in ignored:
                    continue
                if not same_values(a.attrs[attr], b.attrs[attr]):
                    diffs.append(f"{name}@{attr}: {a.attrs[attr]!r} vs {b.attrs[attr]!r}")
        for d in diffs[:50]:
            print(d)
        print(f"{len(set(oa) & set(ob))} objects compared, {len(diffs)} difference(s)")
    sys.exit(1 if diffs else 0)


main()
