#!/usr/bin/env bash
# `kill -9` of process 1 of `mpirun -np 2 lockstep-train` once it has written a checkpoint: the
# job ends within the bound with a non-zero exit and mpirun's message naming rank 1 and the
# signal, no process of the job is left running, and the checkpoint resumes in another world
# shape (one process, four host devices) at the step it was written.
# Then the same under `mpirun --enable-recovery`, where mpirun lets process 0 run on: lockstep's
# own bound must end it (the watchdog at --collective-timeout-s, naming the process it awaits).
# usage: mpi_kill_test.sh MPIEXEC LOCKSTEP_TRAIN WORKDIR
set -uo pipefail
mpiexec=$1
train=$2
dir=$3/mpi-kill
rm -rf "$dir"
mkdir -p "$dir"
flags=(--model gpt --layers 1 --hidden 32 --heads 2 --seq 16 --batch 8 --max-examples 2000
       --eval-examples 200 --log-every 0 --checkpoint-dir "$dir/checkpoints")
fail() { echo "FAIL: $*"; echo "--- job output:"; cat "$dir/job.log"; exit 1; }
# Waits (up to 60 s) for the job's first checkpoint, then prints its process of rank 1: the job's
# processes are mpirun's children, and process 1 has OMPI_COMM_WORLD_RANK=1.
rank1_of() {
  local job=$1
  for _ in $(seq 1 600); do
    [ -e "$dir/checkpoints/latest" ] && break
    kill -0 "$job" 2>/dev/null || { echo "the job ended before its first checkpoint" >&2; return 1; }
    sleep 0.1
  done
  [ -e "$dir/checkpoints/latest" ] || { echo "no checkpoint after 60 s" >&2; return 1; }
  for pid in $(pgrep -P "$job"); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && echo "$pid"
  done
}
# Succeeds once process $1 has ended, within $2 seconds.
ends_within() {
  for _ in $(seq 1 $(($2 * 10))); do
    kill -0 "$1" 2>/dev/null || return 0
    sleep 0.1
  done
  return 1
}
# Succeeds once none of the given processes runs any more (zombies count as gone), within 5 s.
all_gone() {
  for _ in $(seq 1 50); do
    local left=""
    for pid in "$@"; do
      local state
      state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)
      [ -n "$state" ] && [ "$state" != Z ] && left="$left $pid"
    done
    [ -z "$left" ] && return 0
    sleep 0.1
  done
  echo "$left"
  return 1
}

"$mpiexec" -np 2 --allow-run-as-root --oversubscribe "$train" --devices host:1 "${flags[@]}" \
  --steps 1000000 --checkpoint-every 20 --collective-timeout-s 20 >"$dir/job.log" 2>&1 &
job=$!
victim=$(rank1_of $job)
[ -n "$victim" ] || { kill -9 $job; fail "no process of rank 1 among mpirun's children"; }
children=$(pgrep -P $job)
killed_at=$(date +%s%N)
kill -9 "$victim"

bound_s=30  # mpirun ends the job at once; the collective timeout (20 s) is the backstop
ends_within $job $bound_s || { kill -9 $job; fail "the job still ran ${bound_s} s after kill -9 of process 1"; }
wait $job
rc=$?
took_ms=$(( ($(date +%s%N) - killed_at) / 1000000 ))
[ $rc -ne 0 ] || fail "mpirun exited 0 after a process was killed"
grep -q "rank 1 .*signal 9" "$dir/job.log" || fail "no message naming rank 1 and signal 9"
left=$(all_gone $children) || fail "processes of the job still running:$left"  # reaped once mpirun is gone

step=$(sed 's/step-0*//' "$dir/checkpoints/latest")
out=$("$train" --devices host:4 "${flags[@]}" --steps $((step + 10)) --resume 2>&1)
grep -q "resumed from $dir/checkpoints at step $step" <<<"$out" ||
  { echo "$out"; fail "no resume at step $step on host:4"; }
grep -q "^done: $((step + 10)) steps" <<<"$out" || { echo "$out"; fail "the resumed run did not finish"; }
echo "ok: job ended ${took_ms} ms after kill -9 of process 1 (exit $rc), no process left," \
     "resumed step $step on one process x host:4"

# --enable-recovery: mpirun does not end the job; process 0 must end itself within its bound.
rm -rf "$dir/checkpoints"
"$mpiexec" -np 2 --allow-run-as-root --oversubscribe --enable-recovery "$train" --devices host:1 \
  "${flags[@]}" --steps 1000000 --checkpoint-every 20 --collective-timeout-s 3 >"$dir/job.log" 2>&1 &
job=$!
victim=$(rank1_of $job)
[ -n "$victim" ] || { kill -9 $job; fail "no process of rank 1 in the recovery job"; }
children=$(pgrep -P $job)
killed_at=$(date +%s%N)
kill -9 "$victim"
bound_s=20  # the 3 s watchdog, then process 0 ends the job
ends_within $job $bound_s ||
  { kill -9 $job; pkill -9 -P $job; fail "process 0 still ran ${bound_s} s after process 1 died (recovery mode)"; }
wait $job
rc=$?
took_ms=$(( ($(date +%s%N) - killed_at) / 1000000 ))
# Open MPI 4.1's mpirun exits 0 under --enable-recovery whatever its processes return, and its
# MPI_ABORT banner is sometimes lost (ORTE_ERROR_LOG in show_help): the failure is read from
# process 0's own error below, and the bound from the job having ended.
left=$(all_gone $children) || fail "processes of the recovery job still running:$left"
# Killed within a step: the watchdog names process 1; between steps or while a checkpoint is
# written: the process exchange that waits for it (the stop agreement, the save) times out, and
# its error starts with that exchange's name ("any_process: ...", "save: waiting for ...: ...").
grep -E -q "process 0 of 2 on .*collective timeout \(3.0 s\).*waiting for (process 1 on|the other processes' data)|(any_process|save: [^:]+): the processes did not all take part within 3000 ms" "$dir/job.log" ||
  fail "process 0 did not end with a timeout naming the collective or the missing process"
echo "ok: with --enable-recovery process 0 ended itself ${took_ms} ms after the kill" \
     "(mpirun exit $rc), with its timeout error; no process left"