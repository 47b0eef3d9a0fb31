#!/usr/bin/env python3
# cpumon.py SID: every second, prints "comm pid %cpu" for each process outside session SID
# that used more than 20% of a core in that second.
import os, sys, time
sid = int(sys.argv[1]); hz = os.sysconf('SC_CLK_TCK')
def snap():
    out = {}
    for p in os.listdir('/proc'):
        if not p.isdigit(): continue
        try:
            s = open(f'/proc/{p}/stat').read()
        except OSError: continue
        comm = s[s.index('(')+1:s.rindex(')')]; f = s[s.rindex(')')+2:].split()
        out[int(p)] = (comm, int(f[3]), int(f[11]) + int(f[12]))  # session, utime+stime
    return out
prev = snap(); me = os.getpid()
while True:
    time.sleep(1); cur = snap()
    for pid, (comm, s, t) in cur.items():
        if s == sid or pid == me or pid not in prev: continue
        pct = 100.0 * (t - prev[pid][2]) / hz
        if pct > 20: print(comm, pid, round(pct), flush=True)
    prev = cur
