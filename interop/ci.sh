#!/usr/bin/env bash
# ci.sh - the interop stage for CI (root, Debian bookworm, 2 cores), called by .ci/run after
# `make test`.  build.sh installs what it needs with apt-get (qemu-system-x86, debootstrap,
# tshark, nft, ...) and builds the guest from the apt-configured Debian mirror (~2-4 min from
# nothing); run.sh boots the VM and runs the matrix (see README.md for measured times).
#
# Exit: 0 pass; 1 a goroce case failed; 2 harness failure: the build, or a guest that cannot
# boot on this machine (never a skip: the console tail is printed and the job fails).
# Cases "not run" (goroce lacks a subcommand or link) are listed loudly; they fail the job
# (exit 3) with GOROCE_INTEROP_STRICT=1, which .ci/run sets.  The rxe<->rxe baseline is
# informational and never decides the exit status; GOROCE_INTEROP_BASELINE=0 skips it.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"$here/build.sh" || { echo "interop: FAILED: build.sh (image build or host tools)" >&2; exit 2; }
"$here/run.sh"
rc=$?
case $rc in
  0) echo "interop: all goroce cases passed" >&2 ;;
  1) echo "interop: FAILED: at least one goroce case failed (table above; logs in interop/.cache/logs)" >&2 ;;
  2) echo "interop: FAILED: harness failure - build, or the guest did not boot here (see above and interop/.cache/logs)" >&2
     tail -30 "$here/.cache/run/console.log" 2>/dev/null >&2 ;;
  3) echo "interop: WARNING: some goroce cases were not run (see the table above)" >&2
     [ "${GOROCE_INTEROP_STRICT:-0}" = 1 ] && { echo "interop: FAILED: GOROCE_INTEROP_STRICT=1" >&2; exit 3; }
     exit 0 ;;
  *) echo "interop: FAILED: run.sh exit $rc" >&2 ;;
esac
exit $rc
