#!/usr/bin/env bash
# vm-exec.sh [-t SECS] [-i] [-e K=V]... [-C DIR] [--] COMMAND...
# Run COMMAND (a /bin/sh -c line; words joined like ssh) in the interop VM through the
# virtio-serial agent.  Output streams back; the exit status is the remote one (124 timeout,
# 255 agent unreachable).  -i forwards stdin.  Up to 4 calls can run at once.
#   interop/vm-exec.sh 'ibv_devinfo -d rxe0'
#   interop/vm-exec.sh -i 'cat > /tmp/prog && chmod +x /tmp/prog' < prog
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[ $# -gt 0 ] || { sed -n '2,7p' "$0"; exit 2; }
exec "$AGENT_BIN" exec -d "$RUN" "$@"
