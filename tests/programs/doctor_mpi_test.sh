#!/usr/bin/env bash
# lockstep-doctor under mpirun: 2 processes with one host device each. Process 0 prints ONE
# report with the cross-process checks OK (same lockstep version, build and devices; the
# known-answer all-reduce over both processes exact for each process's replica) and exit 0;
# process 1 prints nothing; --json gives one JSON report holding process 1's findings too.
# Then 1 and 2 devices (an MPMD launch): a WARN world-devices finding naming process 1 and its
# host, the all-reduce over all 3 replicas still exact, exit 0.
# usage: doctor_mpi_test.sh MPIEXEC LOCKSTEP_DOCTOR
set -uo pipefail
mpiexec=$1
doctor=$2
host=$(hostname)
flags=(--timeout-ms 20000)
# Open MPI refuses root without --allow-run-as-root and more processes than cores without
# --oversubscribe (as the mpi_collectives_* ctests).
launch=("$mpiexec" --allow-run-as-root --oversubscribe)
fail() {
  echo "FAIL: $1"
  echo "--- output ---"
  echo "$out"
  exit 1
}

out=$("${launch[@]}" -np 2 "$doctor" --devices host:1 "${flags[@]}" 2>&1)
rc=$?
[ $rc -eq 0 ] || fail "exit code $rc, expected 0"
[ "$(grep -c '^verdict: ' <<<"$out")" -eq 1 ] || fail "not exactly one report (process 0's)"
grep -q "^world: 2 processes under mpirun, 2 replicas" <<<"$out" || fail "no world line"
for check in world-version world-build world-devices; do
  grep -qE "^OK +$check +2 processes +" <<<"$out" || fail "no OK $check finding"
done
for p in 0 1; do
  exact="known-answer all-reduce over 2 device\(s\) in 2 processes, replicas $p\.\.$p here"
  grep -qE "^OK +world-all-reduce +p$p host:0 +$exact \(host backend\): exact" <<<"$out" ||
    fail "no exact world-all-reduce for process $p"
done
grep -qE "^OK +all-reduce +p0 host:0 +known-answer all-reduce over 1 device" <<<"$out" ||
  fail "no local all-reduce finding of process 0"
# Process 1's own OK and N/A findings are one line in the table; --json lists them all.
grep -qE "^OK +own-checks +p1 $host +its other [0-9]+ finding\(s\) are OK or N/A" <<<"$out" ||
  fail "no own-checks line for process 1"
grep -qE "^(FAIL|N/A) +world" <<<"$out" && fail "a world check did not pass"

out=$("${launch[@]}" -np 2 "$doctor" --devices host:1 --json "${flags[@]}" 2>&1)
rc=$?
[ $rc -eq 0 ] || fail "--json: exit code $rc, expected 0"
[ "$(grep -cE '^\{"verdict": "(OK|WARN)", "findings"' <<<"$out")" -eq 1 ] ||
  fail "--json: not one JSON report"
grep -q '"check": "all-reduce", "subject": "p1 host:0", "verdict": "OK"' <<<"$out" ||
  fail "--json: process 1's local all-reduce is missing"

out=$("${launch[@]}" -np 1 "$doctor" --devices host:1 "${flags[@]}" : \
  -np 1 "$doctor" --devices host:2 "${flags[@]}" 2>&1)
rc=$?
[ $rc -eq 0 ] || fail "uneven devices: exit code $rc, expected 0 (a WARN)"
uneven="2 device\(s\) \(host:0,host:1\); p0 \($host\) drives 1 \(host:0\)"
grep -qE "^WARN +world-devices +p1 \($host\) +$uneven" <<<"$out" ||
  fail "uneven devices: no WARN naming process 1 and its host"
exact3='^OK +world-all-reduce +p[01] .*over 3 device\(s\) in 2 processes'
[ "$(grep -cE "$exact3" <<<"$out")" -eq 2 ] ||
  fail "uneven devices: the all-reduce over 3 replicas is not exact in both processes"
echo "ok: the cross-process checks pass under mpirun -np 2, and uneven devices are a WARN naming p1"
