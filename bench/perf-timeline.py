#!/usr/bin/env python3
"""perf-timeline.py — what each thread did while a start ran, from the
`perf script` text that bench/lazy-eager-run.sh keeps under LAZY_PERF_SCRIPT=1
(OUTDIR/perf-NAME.script.xz, with OUTDIR/perf-NAME.clock beside it).

  bench/perf-timeline.py summary  perf-NAME.script.xz REGEX
      per thread whose name matches REGEX: its on-CPU samples (~1 ms each at
      999 Hz) by kind: user code, page faults, waiting in a userfaultfd fault,
      munmap/freeing, allocation and pinning, the nvidia module, other
  bench/perf-timeline.py timeline perf-NAME.script.xz REGEX [BUCKET_MS]
      per such thread: its samples in each BUCKET_MS (default 50) with their
      top functions, on the logs' wall clock (from perf-NAME.clock), and where
      it slept (its context switches and how long each lasted)

How the GPU example's CUDA restore was read this way: bench/LOG.md,
"Lazy GPU starts: the driver's own timeline".
"""
import collections
import datetime
import lzma
import re
import sys

HEADER = re.compile(r'^(\S.*?)\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)$')


def events(path):
    """(time, comm, tid, event, rest, frames) for each record, in time order."""
    out = []
    for block in lzma.open(path, 'rt').read().split('\n\n'):
        lines = block.strip('\n').split('\n')
        m = HEADER.match(lines[0]) if lines and lines[0] else None
        if not m:
            continue
        comm, tid, _cpu, t, ev, rest = m.groups()
        frames = []
        for line in lines[1:]:
            parts = line.split(None, 1)
            frames.append(parts[1].split(' (')[0] if len(parts) > 1 else '?')
        out.append((float(t), comm, int(tid), ev, rest, frames))
    out.sort(key=lambda e: e[0])
    return out


def kind(frames):
    s = ' '.join(frames)
    if 'handle_userfault' in s:
        return 'uffd-wait'
    if any(k in s for k in ('unmap_page_range', 'free_unref', 'folio_remove_rmap', 'zap_',
                            'tlb_finish', 'unmap_vmas')):
        return 'munmap/free'
    if any(k in s for k in ('__fc_dmapin', 'clear_page', 'pin_user', 'get_user_pages')):
        return 'alloc/pin'
    if 'asm_exc_page_fault' in s:
        return 'page-fault'
    if any(k in s for k in ('osDev', '_kgsp', 'rm_ioctl', '_issueRpc')):
        return 'nvidia-kmod'
    if frames and frames[0].startswith('[unknown]'):
        return 'user'
    return 'other'


def threads(evs, rx):
    names = {}
    for _t, comm, tid, *_ in evs:
        if rx.search(comm):
            names.setdefault(tid, comm)
    return names


def summary(evs, rx):
    for tid, comm in threads(evs, rx).items():
        mine = [e for e in evs if e[2] == tid and e[3].startswith('cpu-clock')]
        if len(mine) < 20:
            continue
        kinds = collections.Counter(kind(e[5]) for e in mine)
        span = (mine[-1][0] - mine[0][0]) * 1000
        print(f"{comm} {tid}: {len(mine)} samples over {span:.0f} ms: " +
              ", ".join(f"{k} {n}" for k, n in kinds.most_common()))


def timeline(evs, rx, bucket, offset):
    def wall(t):
        return datetime.datetime.fromtimestamp(t + offset, datetime.timezone.utc) \
            .strftime('%H:%M:%S.%f')[:-3]
    for tid, comm in threads(evs, rx).items():
        mine = [e for e in evs if e[2] == tid]
        t0 = mine[0][0]
        print(f"\n=== {comm} {tid}: {wall(t0)} .. {wall(mine[-1][0])}")
        per = collections.OrderedDict()
        for t, _c, _tid, ev, _rest, frames in mine:
            if ev.startswith('cpu-clock'):
                k = int((t - t0) * 1000 // bucket)
                per.setdefault(k, collections.Counter())[(frames or ['?'])[0][:40]] += 1
        for k, top in per.items():
            print(f"  +{k * bucket:6.0f} ms {wall(t0 + k * bucket / 1000)} "
                  f"{sum(top.values()):3d} samples: " +
                  ", ".join(f"{f} x{n}" for f, n in top.most_common(3)))
        print("  slept (a context switch, until its next record):")
        waits = collections.Counter()
        for i, (t, _c, _tid, ev, rest, frames) in enumerate(mine):
            if ev != 'sched:sched_switch' or i + 1 == len(mine):
                continue
            state = re.search(r'prev_state=(\S+)', rest)
            where = ' < '.join(f.split()[0] for f in frames[3:8])
            waits[f"{state.group(1) if state else '?'} {where}"] += (mine[i + 1][0] - t) * 1000
        for where, ms in waits.most_common(10):
            print(f"    {ms:8.1f} ms  {where}")


def main(argv):
    if len(argv) < 4 or argv[1] not in ('summary', 'timeline'):
        sys.stderr.write(__doc__)
        return 2
    evs = events(argv[2])
    rx = re.compile(argv[3])
    if argv[1] == 'summary':
        summary(evs, rx)
    else:
        clock = argv[2].replace('.script.xz', '.clock')
        offset = float(open(clock).read().split(':')[1])
        timeline(evs, rx, float(argv[4]) if len(argv) > 4 else 50, offset)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
