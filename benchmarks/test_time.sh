#!/usr/bin/env bash
# `make test` from a fresh clone, timed: what a new user (and CI) waits for, installs included.
#
#   bash benchmarks/test_time.sh [REF]     # or: make test-timed
#
# Clones this checkout's REF (default HEAD: committed work only) into a temporary folder, runs
# `CI=true bash .ci/run` there (chromium if missing, the installs of .venv and .venv-teacher,
# the unit and browser tests, the notebooks), then prints and records in benchmarks/TEST_TIME.md:
# the total wall-clock and CPU time, the CPU time of each stage, the load average before and after (other work on the machine
# inflates wall-clock, not CPU time), when each phase ended, and the slowest tests pytest listed.
# The full log stays in the temporary folder, whose path is printed. Exits with .ci/run's status.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REF="${1:-HEAD}"
WORK="$(mktemp -d -t course-test-time.XXXXXX)"
# mktemp makes it 700; the hub's exchange test runs nbgrader as other Unix accounts, which must
# reach the clone's .venv-hub (a CI checkout is readable by all).
chmod 755 "$WORK"
LOG="$WORK/make-test.log"
RECORD="$ROOT/benchmarks/TEST_TIME.md"

git clone --quiet --no-checkout "$ROOT" "$WORK/course"
git -C "$WORK/course" checkout --quiet "$(git -C "$ROOT" rev-parse "$REF")"
commit="$(git -C "$WORK/course" rev-parse --short HEAD)"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
started="$(date -u '+%Y-%m-%d %H:%M UTC')"

# Each line of the log is stamped with the seconds since the start, so the phases can be read off.
SECONDS=0
# STAGE_TIME: the Makefile times each stage (installs, unit + browser, notebooks, other CPU
# kernels, hub); TFMLIB_STAGE_CPU: each test file's share of the unit + browser stage (tests/conftest.py).
STAGE_CPU="$WORK/stage-cpu.jsonl"
( cd "$WORK/course" && CI=true STAGE_TIME=1 TFMLIB_STAGE_CPU="$STAGE_CPU" \
    /usr/bin/time -f 'TIME wall %e s, user %U s, sys %S s' bash .ci/run ) 2>&1 \
    | while IFS= read -r line; do printf '[%4d s] %s\n' "$SECONDS" "$line"; done > "$LOG"
status=${PIPESTATUS[0]}
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

stamp_of() {  # the time stamp of the first log line matching $1, or "-"
    grep -m1 -E "$1" "$LOG" | sed -E 's/^\[ *([0-9]+) s\].*/\1 s/' || true
}
total="$(grep -m1 'TIME wall' "$LOG" | sed 's/^\[ *[0-9]* s\] TIME //')"
phases="installs done (first pytest starts): $(stamp_of 'python -m pytest'); \
unit + browser tests done: $(stamp_of '(passed|failed).* in [0-9.]+s'); end: ${SECONDS} s"
# user + sys per stage, summed over its commands (the installs are several)
stages="$(python3 - "$LOG" "$STAGE_CPU" <<'PY'
import json, re, sys
totals = {}
for line in open(sys.argv[1], encoding="utf-8", errors="replace"):
    m = re.search(r"STAGE (.+?): wall ([0-9.]+) s; user ([0-9.]+) s; sys ([0-9.]+) s", line)
    if m:
        totals[m[1]] = totals.get(m[1], 0.0) + float(m[3]) + float(m[4])
files = {}
try:
    for line in open(sys.argv[2], encoding="utf-8"):
        for path, seconds in json.loads(line)["files"].items():
            files[path] = files.get(path, 0.0) + seconds
except OSError:
    pass
browser = sum(seconds for path, seconds in files.items() if path.startswith("tests/browser/"))
parts = [f"{name} {seconds:.0f} s" + (f" (the browser tests {browser:.0f} s, the others {seconds - browser:.0f} s)"
                                       if name == "unit + browser" and browser else "")
         for name, seconds in totals.items()]
# make test's own stages; .ci/run's hub test (its installs included) runs after it
make_test = sum(seconds for name, seconds in totals.items() if not name.startswith("hub"))
print("; ".join(parts) + f" (make test: {make_test:.0f} s)" if parts else "not recorded")
print("\n".join(f"{seconds:7.1f} s  {path}" for path, seconds in sorted(files.items(), key=lambda f: -f[1])[:15]))
PY
)"
by_file="$(echo "$stages" | tail -n +2)"
stages="$(echo "$stages" | head -n 1)"
slowest="$(grep -A 15 -E '=+ slowest [0-9]+ durations =+' "$LOG" | sed -E 's/^\[ *[0-9]+ s\] //' \
    | grep -E '^[0-9.]+s ' || true)"

report="## $started, commit $commit: $([ "$status" -eq 0 ] && echo passed || echo "FAILED ($status)")

- machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
- total: $total
- load average (1/5/15 min) before: $load_before, after: $load_after
- $phases
- CPU (user + sys) per stage: $stages

CPU (user + sys) of the unit + browser stage's costliest test files, each with its fixtures and
every process they ran:

\`\`\`
$by_file
\`\`\`

Slowest tests (the first 15 of each pytest call's --durations):

\`\`\`
$slowest
\`\`\`
"
echo
echo "$report"
echo "log: $LOG"
if [ ! -f "$RECORD" ]; then
    printf '# `make test` from a fresh clone\n\nWritten by `make test-timed` (benchmarks/test_time.sh), newest first.\n\n' > "$RECORD"
fi
{ head -n 4 "$RECORD"; echo "$report"; tail -n +5 "$RECORD"; } > "$RECORD.new" && mv "$RECORD.new" "$RECORD"
exit "$status"
