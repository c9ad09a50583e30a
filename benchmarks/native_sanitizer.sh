#!/usr/bin/env bash
# compute-sanitizer racecheck and synccheck on the native executor's small case (Simple and LL),
# each tool within SAN_S seconds; its summary lines and exit status appended to $OUT/native_sanitizer.txt.
#   OUT=results/gpu SAN_S=40 bash benchmarks/native_sanitizer.sh
OUT=${OUT:-results/gpu}
# logs name the repository, the Python environment and the temporary folder by placeholders, not this machine's paths
scrub() { python3 benchmarks/shown_paths.py || cat; }   # a filter that cannot start: the log as it came
for tool in racecheck synccheck; do
  timeout ${SAN_S:-40} compute-sanitizer --tool $tool --error-exitcode 3 python3 benchmarks/native_small_case.py 2>&1 \
    | tail -4 | scrub | tee -a "$OUT/native_sanitizer.txt"
  echo "$tool rc=${PIPESTATUS[0]}" | tee -a "$OUT/native_sanitizer.txt"
done
