#!/usr/bin/env python3
"""Per-kernel breakdown of an Nsight Compute CSV (`ncu --csv --log-file F --metrics
gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,...`, one row per metric).

    tools/gpu/ncu_breakdown.py F.csv [--split KERNEL_SUBSTRING]

Groups the kernels by name (template arguments dropped), and prints per group: launches, summed
time (kernels serialized: ncu replays each alone, caches flushed, no PDL overlap), share, DRAM
bytes, bandwidth as % of the 4.27 TB/s copy ceiling, and time per launch. --split starts a new
section at each kernel whose name contains the substring (e.g. embedding_kernel: one section per
profiled decode step when gpu_bench's STRATA_BENCH_NCU window held several steps)."""
import collections
import csv
import io
import re
import sys

CEILING = 4.27e12
SCALE = {'byte': 1, 'Kbyte': 1e3, 'Mbyte': 1e6, 'Gbyte': 1e9, 'nsecond': 1e-3, 'ns': 1e-3,
         'usecond': 1, 'us': 1, 'msecond': 1e3, 'ms': 1e3}  # times in us


def load(path):
    lines = open(path).read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith('"ID"'))
    body = '\n'.join(l for l in lines[start:] if l.startswith('"'))
    kernels = collections.OrderedDict()
    for r in csv.DictReader(io.StringIO(body)):
        d = kernels.setdefault(int(r['ID']), {'name': r['Kernel Name']})
        v = r['Metric Value'].replace(',', '')
        d[r['Metric Name']] = float(v or 0) * SCALE.get(r['Metric Unit'], 1)
    return list(kernels.values())


def group(name):
    n = name.replace('<unnamed>', 'anon').replace('(anonymous namespace)', 'anon')
    n = re.sub(r'^void ', '', n).split('(')[0].split('<')[0]
    return n.split('::')[-1][:60]


def report(title, ks):
    total = sum(k.get('gpu__time_duration.sum', 0) for k in ks)
    agg = collections.OrderedDict()
    for k in ks:
        a = agg.setdefault(group(k['name']), [0, 0.0, 0.0])
        a[0] += 1
        a[1] += k.get('gpu__time_duration.sum', 0)
        a[2] += k.get('dram__bytes_read.sum', 0) + k.get('dram__bytes_write.sum', 0)
    print(f'== {title}: {len(ks)} kernels, {total / 1000:.3f} ms summed')
    for name, (n, us, b) in sorted(agg.items(), key=lambda x: -x[1][1]):
        bw = b / (us * 1e-6) if us else 0
        print(f'  {name:60s} n={n:4d} {us / 1000:7.3f} ms {100 * us / total:5.1f}%'
              f' {b / 1e9:7.3f} GB {100 * bw / CEILING:5.1f}% of 4.27  {us / n:7.1f} us/launch')


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    split = None
    if '--split' in args:
        i = args.index('--split')
        split = args[i + 1]
        del args[i:i + 2]
    ks = load(args[0])
    if split is None:
        report(args[0], ks)
        return
    sections, cur = [], []
    for k in ks:
        if split in k['name'] and cur and any(split in c['name'] for c in cur):
            sections.append(cur)
            cur = []
        cur.append(k)
    sections.append(cur)
    for j, s in enumerate(sections):
        report(f'{args[0]} section {j + 1}', s)


if __name__ == '__main__':
    main()
