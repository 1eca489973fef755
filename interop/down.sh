#!/usr/bin/env bash
# down.sh - power off the interop VM and delete the netns.  Only the qemu whose pid file
# up.sh wrote (and whose command line carries -name goroce-interop-vm) is ever signalled.
set -uo pipefail
. "$(dirname "$0")/lib.sh"
if pid=$(qemu_pid); then
  log "VM: powering off (qemu pid $pid)"
  "$AGENT_BIN" exec -w 5 -d "$RUN" -t 10 -- 'sync; (sleep 0.3; busybox poweroff -f) >/dev/null 2>&1 &' >/dev/null 2>&1 || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then log "VM: still running, SIGTERM $pid"; kill -TERM "$pid"; sleep 1; fi
  if kill -0 "$pid" 2>/dev/null; then log "VM: SIGKILL $pid"; kill -KILL "$pid"; fi
fi
rm -f "$RUN"/qemu.pid "$RUN"/*.sock "$RUN"/*.lock
if netns_exists; then
  left=$(ip netns pids "$NETNS" 2>/dev/null | tr '\n' ' ')
  [ -z "$left" ] || log "netns $NETNS: processes still inside: $left (not touched)"
  log "netns $NETNS: deleting"
  ip netns del "$NETNS"
fi
exit 0
