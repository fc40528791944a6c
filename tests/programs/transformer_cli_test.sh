#!/usr/bin/env bash
# lockstep-train's transformers end to end on the installed data, tiny: a GPT on dict-gcide
# exported as a Hugging Face checkpoint, a classifier on WordNet fine-tuned from that export, and
# the bag-of-bytes baseline; each writes its JSON (perplexity, accuracy, tokens/s). Then the
# Hugging Face fixture of another vocabulary is refused with an error naming the fix.
# usage: transformer_cli_test.sh LOCKSTEP_TRAIN WORKDIR FIXTURES_DIR
set -uo pipefail
train=$1
dir=$2/transformer-cli
fixtures=$3
rm -rf "$dir" && mkdir -p "$dir"
fail() { echo "FAIL: $*"; exit 1; }
tiny=(--devices host:2 --layers 1 --hidden 16 --heads 2 --seq 16 --batch 8 --log-every 0)

"$train" --model gpt "${tiny[@]}" --steps 3 --max-examples 256 --eval-examples 16 \
  --export-hf "$dir/gpt" --json "$dir/gpt.json" > "$dir/gpt.log" 2>&1 ||
  { cat "$dir/gpt.log"; fail "gpt run"; }
for f in model.safetensors config.json; do [ -s "$dir/gpt/$f" ] || fail "no $f exported"; done
grep -q '"test_perplexity"' "$dir/gpt.json" || fail "no test_perplexity in gpt.json"
grep -q '"tokens_per_s"' "$dir/gpt.json" || fail "no tokens_per_s in gpt.json"

"$train" --model classifier "${tiny[@]}" --init "$dir/gpt" --steps 3 --max-examples 64 \
  --eval-examples 32 --json "$dir/cls.json" > "$dir/cls.log" 2>&1 ||
  { cat "$dir/cls.log"; fail "classifier run from the export"; }
grep -q "head.weight not in .*freshly initialised" "$dir/cls.log" ||
  { cat "$dir/cls.log"; fail "no note about the fresh head"; }
grep -q '"test_accuracy"' "$dir/cls.json" || fail "no test_accuracy in cls.json"

"$train" --model bag-of-bytes --devices host:1 --seq 16 --steps 3 --log-every 0 \
  --json "$dir/bytes.json" > "$dir/bytes.log" 2>&1 || { cat "$dir/bytes.log"; fail "baseline"; }

out=$("$train" --model classifier "${tiny[@]}" --init "$fixtures/gpt2-cls" --steps 1 2>&1)
rc=$?
[ $rc -eq 2 ] || { echo "$out"; fail "exit $rc for a vocabulary mismatch, expected 2 (usage)"; }
grep -q "smaller than the tokenizer's (258); pass the model's --tokenizer" <<<"$out" ||
  { echo "$out"; fail "no vocabulary message"; }
echo "ok: gpt -> export -> classifier --init -> baseline; vocabulary mismatch refused"
