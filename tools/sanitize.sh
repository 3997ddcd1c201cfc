#!/usr/bin/env bash
# `make sanitize`: the kernels and both bindings rebuilt with AddressSanitizer
# and UndefinedBehaviorSanitizer, and the kernel tests run against them.
#
# The build happens in a copy of the sources under build/sanitize/ (git-ignored),
# so customops/*.so in the repository are never touched.  The tests then run
# from that copy (cwd and PYTHONPATH point at it; the editable install's finder
# comes after both), with libasan preloaded into the Python interpreter, which
# is not itself instrumented.
#
# Any sanitizer report fails the run: ASan stops at its first error,
# UBSan is compiled with -fno-sanitize-recover and halt_on_error=1, every
# report is also written to build/sanitize/reports/ (pytest's capture or a
# subprocess could hide it otherwise) and any report there fails the run.
# A canary library with a deliberate heap overflow checks the setup first.
#
# Cost (2-core machine, measured): 105-140 s to rebuild the kernels and
# relink, 70-90 s of tests; about 3-3.5 min in all, more on a fresh clone
# (the torch binding compiles from scratch).
#
# Environment: PY (interpreter, default .venv/bin/python), SANITIZE_DIR
# (default build/sanitize), MAX_JOBS (parallel compiles, default nproc),
# SANITIZE_TESTS (test files, default below), PYTEST_ARGS (extra arguments).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PY:-$ROOT/.venv/bin/python}
OUT=${SANITIZE_DIR:-$ROOT/build/sanitize}
SRC=$OUT/src
LOG=$OUT/test.log
# Default: each op's own tests (tests/test_<op>.py for every op of tests/optable.py),
# the bad-input tables and the fuzz.
op_tests() {
  PYTHONPATH="$ROOT/tests:$ROOT" "$PY" -c \
    'from optable import OPS; print(" ".join(f"tests/test_{n}.py" for n in OPS))'

}
TESTS=${SANITIZE_TESTS:-"$(op_tests) tests/test_errors.py tests/test_fuzz.py"}
SAN_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g"

start=$(date +%s)
say() { printf '[sanitize %4ds] %s\n' "$(( $(date +%s) - start ))" "$*"; }

LIBASAN=$(gcc -print-file-name=libasan.so)
if [ ! -e "$LIBASAN" ] || [ "$LIBASAN" = libasan.so ]; then
  echo "sanitize: libasan.so not found (gcc -print-file-name=libasan.so gave '$LIBASAN');" \
       "install the compiler's sanitizer runtime (Debian: libasan8, part of gcc)" >&2
  exit 2
fi

# 1. A copy of what the build and the tests need.  cp -p keeps modification
#    times, so ninja recompiles only the files that changed since last time
#    (its objects live in $SRC/build, which is kept).
say "copying sources to $SRC"
mkdir -p "$SRC"
rm -rf "$SRC/csrc" "$SRC/tests" "$SRC"/customops/*.py "$SRC"/customops/*/
cp -rp "$ROOT/csrc" "$ROOT/tests" "$ROOT/setup.py" "$ROOT/pyproject.toml" "$SRC/"
mkdir -p "$SRC/customops"  # keeps the sanitized *.so of the last run (relinked if stale)
cp -p "$ROOT"/customops/*.py "$SRC/customops/"
cp -rp "$ROOT"/customops/*/ "$SRC/customops/"  # its subpackages (check, doctor, ...)
rm -rf "$SRC"/customops/__pycache__ "$SRC"/customops/*/__pycache__
rm -rf "$SRC/tests/__pycache__" "$SRC/tests/.hypothesis"

# 2. Build both compiled parts in place inside the copy.  distutils appends
#    CFLAGS to every compile (torch's ninja backend included) and LDFLAGS to
#    every link; setup.py's -O3 comes later on the command line and wins.
say "building with $SAN_FLAGS"
if ! (
  cd "$SRC"
  CFLAGS="$SAN_FLAGS" LDFLAGS="-fsanitize=address,undefined" \
    MAX_JOBS=${MAX_JOBS:-$(nproc)} "$PY" setup.py --quiet build_ext --inplace
) > "$OUT/build.log" 2>&1; then
  tail -50 "$OUT/build.log" >&2
  echo "sanitize: build failed (full log: $OUT/build.log)" >&2
  exit 1
fi
for so in "$SRC"/customops/_C*.so "$SRC/customops/libcustomops_ort.so"; do
  if [ ! -f "$so" ]; then echo "sanitize: build failed, $so is missing" >&2; exit 1; fi
  # (grep -c reads all of nm's output: with grep -q, nm could die of SIGPIPE)
  if [ "$(nm -D --undefined-only "$so" | grep -c __asan_)" = 0 ]; then
    echo "sanitize: $so is not instrumented (no __asan_ symbols)" >&2; exit 1
  fi
done
say "built: $(cd "$SRC" && ls customops/*.so | tr '\n' ' ')"

# 3. The tests, from inside the copy.
# libstdc++ is preloaded too: the python binary does not link it, and ASan's
# __cxa_throw interceptor must find it at start-up, or the first C++
# exception (every refused input) stops the process with
# 'CHECK failed: asan_interceptors.cpp "((__interception::real___cxa_throw)) != (0)"'.
LIBSTDCXX=$(gcc -print-file-name=libstdc++.so)
export LD_PRELOAD=$LIBASAN:$LIBSTDCXX${LD_PRELOAD:+:$LD_PRELOAD}
# Reports also go to files (asan.<pid>, ubsan.<pid>): pytest's output capture
# and the fuzz's subprocess could otherwise hide them.
REPORTS=$OUT/reports
rm -rf "$REPORTS" && mkdir -p "$REPORTS"
# Python and torch keep memory until exit by design: no leak checking.
export ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:exitcode=99:print_summary=1:detect_stack_use_after_return=1:check_initialization_order=1:log_path=$REPORTS/asan:log_exe_name=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=98:log_path=$REPORTS/ubsan
export PYTHONPATH=$SRC${PYTHONPATH:+:$PYTHONPATH}

# 4. The setup catches a bug: a canary library with a heap overflow must
#    make a process exit with ASan's status and leave a report.
printf '%s\n' '#include <stdlib.h>' \
  'int canary(int i) { int *a = malloc(4 * sizeof(int)); int v = a[i]; free(a); return v; }' \
  > "$OUT/canary.c"
gcc -shared -fPIC $SAN_FLAGS -o "$OUT/canary.so" "$OUT/canary.c"
set +e
"$PY" -c "import ctypes, sys; ctypes.CDLL(sys.argv[1]).canary(4)" "$OUT/canary.so" 2>/dev/null
canary_status=$?
set -e
if [ "$canary_status" != 99 ] || ! grep -q "heap-buffer-overflow" "$REPORTS"/asan.* 2>/dev/null; then
  echo "sanitize: the canary's heap overflow went unnoticed (exit status $canary_status):" \
       "the sanitizer setup is broken" >&2
  exit 1
fi
rm -f "$REPORTS"/*
say "canary: ASan reports a heap overflow and exits with status 99, as it should"

cd "$SRC"
"$PY" - <<'EOF'
import customops, customops.ort, os
here = os.path.realpath(os.path.dirname(customops.__file__))
assert here == os.path.realpath("customops"), f"tests would import {here}, not the sanitized build"
print(f"sanitize: testing {customops.ort.library_path()}")
EOF

say "running: pytest $TESTS"
set +e
# -o addopts= drops the notebook options of pyproject.toml (no notebooks here).
"$PY" -m pytest -o addopts= -p no:cacheprovider -q -ra --durations=10 $TESTS ${PYTEST_ARGS:-} 2>&1 | tee "$LOG"
status=${PIPESTATUS[0]}
set -e

reports=$(cat "$REPORTS"/* 2>/dev/null | grep -c -E "ERROR: AddressSanitizer|runtime error:|SUMMARY: (Address|UndefinedBehavior)Sanitizer|CHECK failed" || true)
say "pytest exit status $status, sanitizer reports: $reports (log: $LOG, reports: $REPORTS)"
if [ "$reports" != 0 ]; then
  echo "sanitize: FAILED: sanitizer reports:" >&2
  for report in "$REPORTS"/*; do
    echo "=== $report" >&2
    grep -v -E "^    #[0-9]+ .* in _?Py|^    #[0-9]+ .*python3" "$report" | head -80 >&2
  done
  exit 1
fi
if [ "$status" != 0 ]; then
  echo "sanitize: FAILED: tests failed under the sanitizers (exit status $status)" >&2
  exit 1
fi
say "OK: no sanitizer reports, all tests passed"
