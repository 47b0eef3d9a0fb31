#!/bin/bash
# clean_run.sh NAME ARGS...: runs bench_train ARGS (in a session of its own) under flock until
# a run during which no process outside that session used more than 20% of a core in any
# second; keeps that run's log as NAME.txt. At most 8 tries.
set -u
cd "$(git rev-parse --show-toplevel)"
B=${BENCH_TRAIN:-build/release/bench/bench_train}
R=bench/results/2026-11-30-cpu
name=$1; shift
quiet() { timeout 3 bench/results/2026-11-30-cpu/cpumon.py 0 2>/dev/null | head -1 | grep -q . && return 1; ! pgrep -x ninja >/dev/null && ! pgrep -x ctest >/dev/null; }
for try in 1 2 3 4 5 6 7 8; do
  until quiet; do sleep 15; done
  exec 9>/tmp/bench.lock; flock 9
  log=$(mktemp); mon=$(mktemp)
  echo "\$ bench_train $*" > $log
  start=$(date +%s.%N)
  setsid $B "$@" >> $log 2>&1 &
  bp=$!
  bench/results/2026-11-30-cpu/cpumon.py $bp > $mon &
  mp=$!
  wait $bp; rc=$?
  end=$(date +%s.%N)
  kill $mp; wait $mp 2>/dev/null
  flock -u 9; exec 9>&-
  echo "# wall $(echo "$end - $start" | bc) s; processes outside the benchmark above 20% of a core in a second: $(awk '{print $1}' $mon | sort | uniq -c | tr '\n' ';')" >> $log
  if [ $rc -ne 0 ]; then echo "$name try $try rc=$rc"; cat $log; exit 1; fi
  if [ ! -s $mon ]; then mv $log $R/$name.txt; echo "$name: clean on try $try"; rm -f $mon; exit 0; fi
  echo "$name try $try overlapped: $(awk '{print $1}' $mon | sort | uniq -c | tr '\n' ';')"; rm -f $log; rm -f $mon
done
echo "$name: no clean run in 8 tries"; exit 1
