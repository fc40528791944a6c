#!/usr/bin/env bash
# A checkpoint write that fails half-way (the file-size limit, `ulimit -f`, makes write() fail
# with EFBIG) ends lockstep-train with exit 1 and an error naming the cause, leaves the previous
# checkpoint and `latest` intact, and the next run resumes from it and cleans the temporaries.
# usage: file_size_limit_test.sh LOCKSTEP_TRAIN WORKDIR
set -uo pipefail
train=$1
dir=$2/file-size-limit
rm -rf "$dir"
flags=(--devices host:2 --hidden 256 --log-every 0 --checkpoint-dir "$dir")

"$train" "${flags[@]}" --steps 2 >/dev/null || { echo "FAIL: the first run failed"; exit 1; }
out=$( (ulimit -f 64; "$train" "${flags[@]}" --steps 4 --resume) 2>&1)
rc=$?
[ $rc -eq 1 ] || { echo "FAIL: exit code $rc under ulimit -f 64, expected 1"; echo "$out"; exit 1; }
grep -q "File too large" <<<"$out" || { echo "FAIL: no 'File too large' in:"; echo "$out"; exit 1; }
[ "$(cat "$dir/latest")" = step-000002 ] || { echo "FAIL: latest moved"; exit 1; }
"$train" "${flags[@]}" --steps 4 --resume | grep -q "resumed from .* at step 2" ||
  { echo "FAIL: no resume from step 2 after the failed write"; exit 1; }
leftovers=$(find "$dir" -maxdepth 1 -name '.*' ! -name . | wc -l)
[ "$leftovers" -eq 0 ] || { echo "FAIL: $leftovers temporaries left"; ls -a "$dir"; exit 1; }
echo "ok: EFBIG reported (exit 1), step-000002 kept, resumed from it"
