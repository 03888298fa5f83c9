#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/) into build-fuzz/ with clang-14 and runs each for
# SECONDS (default 60) on a scratch copy of its seed corpus (tests/fuzz/corpus/<target>/),
# so the repository is not modified. Prints one line per target (executions, exec/s,
# coverage) and exits 1 if any target crashed, naming the input that reproduces it.
#
#   bash deploy/fuzz.sh [SECONDS]
#   FUZZ_TARGETS="job_spec_fuzz key_files_fuzz" bash deploy/fuzz.sh 10   # a subset
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS

seconds=${1:-60}
if ! [[ $seconds =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: deploy/fuzz.sh [SECONDS]   (seconds per target, default 60)" >&2
  exit 2
fi

# What the build needs: the project's packages, clang and libFuzzer (llvm-14: the
# symbolizer, for stack traces).
bash deploy/install-deps.sh clang-14 libfuzzer-14-dev llvm-14

if [ -n "${FUZZ_TARGETS:-}" ]; then
  read -r -a targets <<<"$FUZZ_TARGETS"
else
  targets=()
  for f in tests/fuzz/*_fuzz.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
CC=clang-14 CXX=clang++-14 cmake -S tests/fuzz -B build-fuzz "${generator[@]}"
cmake --build build-fuzz --parallel "$(nproc)" --target "${targets[@]}"
built=$SECONDS

# LibTorch and the other system libraries are not instrumented; ASan's interceptors still
# see their allocations, and no option needs changing for them so far. UBSan reports abort
# (-fno-sanitize-recover), with a stack.
if [ -z "${ASAN_SYMBOLIZER_PATH:-}" ] && command -v llvm-symbolizer-14 >/dev/null; then
  export ASAN_SYMBOLIZER_PATH=$(command -v llvm-symbolizer-14)
fi
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

# The value of a final "stat::NAME:" line, and of "NAME:" on the last status line (cov, ft,
# corp), of a libFuzzer log.
final_stat() { sed -n "s/^stat::$2: *//p" "$1" | tail -1; }
status_field() { grep -E '^#[0-9]+.* cov: ' "$1" | tail -1 | sed -n "s/.* $2: \([^ ]*\).*/\1/p"; }

summary=()
failed=0
for t in "${targets[@]}"; do
  work=build-fuzz/run/$t
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  cp -r "tests/fuzz/corpus/$t/." "$work/corpus/"
  seeds=$(find "$work/corpus" -type f | wc -l)
  args=(-max_total_time="$seconds" -rss_limit_mb=4096 -timeout=10 -print_final_stats=1
        -artifact_prefix="$work/artifacts/")
  if [ -f "tests/fuzz/dict/$t.dict" ]; then args+=(-dict="tests/fuzz/dict/$t.dict"); fi
  echo "fuzz: $t for ${seconds} s from $seeds seeds (log: $work/log)"
  t0=$SECONDS
  rc=0
  "build-fuzz/$t" "${args[@]}" "$work/corpus" >"$work/log" 2>&1 || rc=$?
  elapsed=$((SECONDS - t0))

  log=$work/log
  line=$(printf '%-21s execs %-9s exec/s %-7s cov %-6s ft %-6s corpus %-13s %4s s' "$t" \
    "$(final_stat "$log" number_of_executed_units)" "$(final_stat "$log" average_exec_per_sec)" \
    "$(status_field "$log" cov)" "$(status_field "$log" ft)" "$(status_field "$log" corp)" "$elapsed")
  artifacts=$(find "$work/artifacts" -type f | sort)
  if [ "$rc" -ne 0 ] || [ -n "$artifacts" ]; then
    failed=1
    line+="  CRASH (exit $rc)"
    echo "fuzz: $t crashed; the end of its log:"
    tail -n 80 "$work/log"
    for a in $artifacts; do
      echo "fuzz: reproduce with: build-fuzz/$t $a"
      line+=" $a"
    done
  fi
  echo "$line"
  summary+=("$line")
done

echo
echo "fuzz: ${seconds} s per target; build $((built - started)) s, total $((SECONDS - started)) s"
printf '%s\n' "${summary[@]}"
exit "$failed"
