#!/usr/bin/env bash
# run.sh [--smoke] [--keep] - build (cached), boot the VM, run the interop checks and matrix,
# tear everything down, print the table `case | direction | result | seconds | detail`.
#
#   --smoke   boot checks, the loss-injection check and the cases in SmokeCases only
#   --keep    leave the VM up afterwards (interop/down.sh removes it)
#
# Exit status (also that of `make interop` / `make interop-smoke`):
#   0  every case ran and passed
#   1  at least one case failed
#   2  the harness failed: build, boot (the guest could not boot here), or no results
#   3  nothing failed but some cases were not run (goroce lacks the subcommand)
# Logs: interop/.cache/logs/ (go-test.log, CASE.DIRECTION.{server,client}.log),
# captures: interop/.cache/share/captures/, table: interop/.cache/results/table.txt.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || die "run as root"
smoke=0
for a in "$@"; do
  case $a in
    --smoke) smoke=1 ;;
    --keep) export GOROCE_INTEROP_KEEP=1 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) die "unknown argument '$a'" ;;
  esac
done
if [ $smoke = 1 ]; then
  cases=$(sed -n 's/^var SmokeCases = \[\]string{\(.*\)}/\1/p' "$IOP_DIR/matrix.go" | tr -d '" ')
  [ -n "$cases" ] || die "cannot read SmokeCases from matrix.go"
  export GOROCE_INTEROP_CASES=$cases
fi
RES=$CACHE/results
mkdir -p "$CACHE/logs" "$RES"
rm -f "$RES/exit-code"
t0=$(date +%s)
log "go test -tags interop ./interop $([ $smoke = 1 ] && echo "(smoke: $GOROCE_INTEROP_CASES)")"
# Progress on the terminal, the whole verbose log in go-test.log.  TestMain prints the table.
# The job gets its own process group (set -m), so an interrupt can be forwarded to exactly
# go test and the test binary; TestMain tears down the VM and the netns on SIGTERM.
set -m
(cd "$REPO_DIR" && exec "$GO" test -tags interop -count=1 -v -timeout 100m ./interop) \
  > "$CACHE/go-test.log" 2>&1 &
gopid=$!
set +m
trap 'log "interrupted: stopping the run (teardown follows)"; kill -TERM -- -$gopid 2>/dev/null; wait $gopid; for _ in $(seq 60); do netns_exists || break; sleep 0.5; done; exit 2' INT TERM
tail -n +1 -f "$CACHE/go-test.log" --pid=$gopid 2>/dev/null | grep --line-buffered -E '^\s*--- (PASS|FAIL|SKIP)|^\[interop' &
wait $gopid
sleep 0.5
cp "$CACHE/go-test.log" "$CACHE/logs/go-test.log" 2>/dev/null
echo
if [ -f "$RES/table.txt" ]; then cat "$RES/table.txt"; fi
if [ ! -f "$RES/exit-code" ]; then
  log "no results written: the harness itself failed (see $CACHE/logs/go-test.log)"
  tail -20 "$CACHE/go-test.log" >&2
  exit 2
fi
rc=$(cat "$RES/exit-code")
log "total $(( $(date +%s) - t0 )) s, exit $rc (0 pass, 1 fail, 2 harness, 3 some not run)"
exit "$rc"
