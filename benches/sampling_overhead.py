"""Cost of sampling on the examples: each program runs with sampling off, at 200 Hz and at
1000 Hz (every thread; under mpirun every rank; perf events, the default where allowed),
and at 200 Hz with the timer source, the settings alternating round by round in this one
run, and the CPU time (user + system, the program's children included)
and wall time of each run are compared with the same round's run without sampling. Then
the size of the samples: the .sps file and the profile's rank<N>/sampling and
rank<N>/line_profile groups.

    sampling_overhead.py ROUNDS NAME -- COMMAND...   (repeatable: NAME -- COMMAND ... ;;)

Prints, per program and rate: the median ratio to the run without sampling (CPU and wall),
the samples taken, and the bytes they take.
"""
import glob
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import h5py


def run(cmd, env, cwd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def group_bytes(group):
    """Bytes of a group's datasets in the file (storage), attributes not counted."""
    total = 0

    def visit(_, obj):
        nonlocal total
        if isinstance(obj, h5py.Dataset):
            total += obj.id.get_storage_size()

    group.visititems(visit)
    return total


def sizes(workdir):
    sps = sum(os.path.getsize(p) for p in glob.glob(os.path.join(workdir, "*.sps")))
    h5 = os.path.join(workdir, "bench.h5")
    samples = lines = ticks = 0
    with h5py.File(h5, "r") as f:
        for name in f:
            if name.startswith("rank") and "sampling" in f[name]:
                samples += group_bytes(f[name]["sampling"])
                ticks += int(f[name]["sampling"].attrs["ticks"])
            if name.startswith("rank") and "line_profile" in f[name]:
                lines += group_bytes(f[name]["line_profile"])
    return ticks, sps, samples, lines, os.path.getsize(h5)


def main():
    rounds = int(sys.argv[1])
    programs = []
    args = sys.argv[2:]
    while args:
        name = args[0]
        assert args[1] == "--"
        end = args.index(";;") if ";;" in args else len(args)
        programs.append((name, args[2:end]))
        args = args[end + 1 :]
    rates = [None, 200, 1000, "200 timer"]
    for name, cmd in programs:
        workdir = tempfile.mkdtemp(prefix="sp_sampling_bench_")
        results = {r: [] for r in rates}
        last = {}
        for _ in range(rounds):
            for rate in rates:
                for p in glob.glob(os.path.join(workdir, "*")):
                    os.remove(p)
                env = dict(os.environ, SCOPE_PROFILER_VERBOSE="0", SCOPE_PROFILER_FILE=os.path.join(workdir, "bench.h5"))
                env.pop("SCOPE_PROFILER_SAMPLE_HZ", None)
                env.pop("SCOPE_PROFILER_SAMPLE_SOURCE", None)
                if rate:
                    hz, _, source = str(rate).partition(" ")
                    env["SCOPE_PROFILER_SAMPLE_HZ"] = hz
                    if source:
                        env["SCOPE_PROFILER_SAMPLE_SOURCE"] = source
                results[rate].append(run(cmd, env, workdir))
                last[rate] = sizes(workdir) if rate else (0, 0, 0, 0, os.path.getsize(os.path.join(workdir, "bench.h5")))
        base = results[None]
        print(f"{name}: {' '.join(cmd)}  ({rounds} rounds; off: CPU {statistics.median(c for c, _ in base):.3f} s, wall {statistics.median(w for _, w in base):.3f} s)")
        for rate in rates[1:]:
            cpu = [r[0] / b[0] for r, b in zip(results[rate], base)]
            wall = [r[1] / b[1] for r, b in zip(results[rate], base)]
            ticks, sps, samples, lines, h5 = last[rate]
            print(
                f"  {str(rate) + ' Hz':>12}: CPU x{statistics.median(cpu):.4f} (rounds {min(cpu):.4f}-{max(cpu):.4f}), "
                f"wall x{statistics.median(wall):.4f} ({min(wall):.4f}-{max(wall):.4f}); "
                f"{ticks} samples; .sps {sps} B ({sps / max(ticks, 1):.1f} B/sample); "
                f"in the profile: sampling/ {samples} B + line_profile/ {lines} B (file {h5} B, {h5 - last[None][4]:+d} B over off)"
            )
        shutil.rmtree(workdir)


main()
