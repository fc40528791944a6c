#!/usr/bin/env bash
# `mpirun -np 2 lockstep-train --trace FILE`: each process writes its own trace file (process 1:
# FILE.process-1), scripts/merge-traces joins them into one file, and the joined file holds both
# processes' tracks (one device each, replicas 0 and 1; their host threads; the data loaders)
# with every traced step, on one time line. The verdict printed at the end covers the devices
# of both processes (Trainer::device_use_all_processes).
# usage: mpi_trace_test.sh MPIEXEC LOCKSTEP_TRAIN WORKDIR SOURCE_DIR
set -euo pipefail
mpiexec=$1
train=$2
dir=$3/mpi-trace
source=$4
rm -rf "$dir"
mkdir -p "$dir"
"$mpiexec" -np 2 --allow-run-as-root --oversubscribe "$train" --devices host:1 --steps 8 \
  --hidden 8 --log-every 0 --trace "$dir/t.json" --trace-steps 3:6 > "$dir/job.log" 2>&1 ||
  { cat "$dir/job.log"; echo "FAIL: the traced job failed"; exit 1; }
grep -q "trace of steps 3-6 written to $dir/t.json" "$dir/job.log" ||
  { cat "$dir/job.log"; echo "FAIL: no trace announced"; exit 1; }
for p in 0 1; do
  grep -Eq "^  host:0 \(process $p\) +compute " "$dir/job.log" ||
    { cat "$dir/job.log"; echo "FAIL: the verdict does not show process $p's device"; exit 1; }
done
grep -q "^verdict: " "$dir/job.log" || { cat "$dir/job.log"; echo "FAIL: no verdict"; exit 1; }
for f in "$dir/t.json" "$dir/t.json.process-1"; do
  [ -s "$f" ] || { echo "FAIL: $f was not written"; exit 1; }
done
python3 "$source/scripts/merge-traces" "$dir/merged.json" "$dir/t.json" "$dir/t.json.process-1"
python3 - "$dir/merged.json" <<'PY'
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
names = {(e["pid"], e["args"]["name"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
for pid, replica in ((0, 0), (1, 1)):
    for track in ("compute stream", "host thread"):
        want = (pid, f"host:0 (replica {replica}) {track}")
        assert want in names, f"no track {want} in {sorted(names)}"
    assert (pid, "data loader") in names, f"no data loader in process {pid}: {sorted(names)}"
for pid in (0, 1):
    steps = {e["args"]["step"] for e in events
             if e["ph"] == "X" and e["pid"] == pid and e["name"] == "forward + backward"}
    assert steps == {3, 4, 5, 6}, f"process {pid} traced steps {sorted(steps)}"
# One time line: the two processes' same step overlaps (they all-reduce together).
span = {pid: [e for e in events if e["ph"] == "X" and e["pid"] == pid and
              e["name"] == "forward + backward" and e["args"]["step"] == 5][0] for pid in (0, 1)}
a, b = span[0], span[1]
assert a["ts"] < b["ts"] + b["dur"] + 50000 and b["ts"] < a["ts"] + a["dur"] + 50000, (a, b)
print("merged trace: both processes, steps 3-6, one time line")
PY
# A file that is not a trace is refused with exit 2.
echo '{}' > "$dir/not-a-trace.json"
set +e
python3 "$source/scripts/merge-traces" "$dir/out.json" "$dir/not-a-trace.json" 2> "$dir/err.log"
code=$?
set -e
[ "$code" = 2 ] && grep -q "is not a lockstep trace" "$dir/err.log" ||
  { cat "$dir/err.log"; echo "FAIL: merge-traces exit $code on a file that is not a trace"; exit 1; }
echo PASS
