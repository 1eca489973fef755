#!/usr/bin/env bash
# bench-vs-rxe.sh - goroce against kernel rxe on the same VM, same vCPUs, same kind of path.
#
#   interop/bench-vs-rxe.sh [-n ITERS | -D SECS] [-l ITERS] [-r REPS] [-m LINKMTU[,LINKMTU]]
#                           [-M MODE[,MODE]] [-L udp|afpacket] [-G FLAGS] [-K SUITE] [-c tsc|hpet] [-e K=V]... [-k] [-w]
#
# Boots its own interop VM (netns goroce-bvr, bridge grbvr0, tap grbvrtap0, 10.67.0.0/24,
# qemu -name goroce-bvr-vm, state in .cache/run-bvr, 9p share .cache/share-bvr), so it never
# touches the matrix VM (goroce-interop).  In the guest, sequentially, never concurrently:
#   rxe:    ib_{write,send,read}_bw -s 65536 and ib_send_lat -s 2, rxev1 (vp1 10.99.0.1) ->
#           rxev2 (vp2 10.99.0.2) over a veth pair in init_net;
#   goroce: goroce bench MODE with the same flags (the share's goroce, installed in the guest's
#           root file system as perftest is), netns bvra 10.98.0.1 -> bvrb 10.98.0.2 over
#           a veth pair (goroce cannot share init_net's UDP 4791 with rxe, hence the netns);
# both veth pairs at link MTU LINKMTU (1500 -> IB path MTU 1024, 9000 -> 4096; -m passed to
# both tools).  Each measurement runs REPS times, rxe and goroce alternating; the table shows
# the median.  Prints mode | size | rxe | goroce | goroce/rxe and whether issue 5's targets are
# met (bw >= 2x rxe, send_lat t_typical <= rxe); the targets never change the exit status.
#
# Options: -n ITERS per bandwidth run (500 x 64 KiB), or -D SECS (perftest's duration mode:
# ib_write_bw/ib_read_bw 4.5 on rxe often print 0.00 MB/s in it, so it is not the default);
# -l ITERS of send_lat (2000); -r REPS (3); -m link MTUs (1500; "1500,9000" adds IB MTU 4096);
# -M the modes to run (write_bw,send_bw,read_bw,send_lat); -L goroce's link (udp: a UDP socket,
# as rxe's; afpacket: a packet socket on the same veth, frames leave without the IP/UDP stack);
# -G FLAGS more goroce bench flags (e.g. --busy-poll=false); -K SUITE boots that suite's Debian
# kernel instead of bookworm's (e.g. bookworm-backports: 6.12, which takes UDP GSO from packet
# sockets; Linux 6.1 refuses it), same userspace, its own cached kernel and initramfs;
# -c guest clocksource: tsc (default; boots with tsc=reliable) or hpet (what TCG picks by
# itself: every clock_gettime is then an emulated HPET read, ~17 us, which the Go runtime does
# constantly and perftest/rxe hardly); -e K=V sets K=V for both stacks' processes (GOMAXPROCS=1,
# GODEBUG=...); -k keeps the VM up afterwards; -w builds goroce from the working tree instead
# of a clean export of HEAD.
# Exit: 0 everything measured, 1 a run failed or printed no result, 2 harness (build, boot, root).
# With send_lat, the table also shows the floor under it on goroce's path (interop/udplat: a plain
# UDP ping-pong between the two namespaces, and two shaped as goroce's udp link's traffic: raw
# socket receive, and the packet socket RX ring of --rx-ring, which -G --rx-ring selects).
# The table ends with what the guest charges per operation of a 64 KiB message (interop/tcgcost:
# Go copy, goroce's ICRC, hash/crc32, the kernel's copy in and out of a socket) and per single
# operation of the per-packet path (a call, an atomic, a mutex, a clock read, Finish, Decode).
# Outputs: .cache/bvr/{table.txt,results.tsv,runs.log}; every exact command is in runs.log.
set -uo pipefail

# Our own VM and network names (never the matrix's defaults).
IOP=$(cd "$(dirname "$0")" && pwd)
CACHE_DIR=${GOROCE_INTEROP_CACHE:-$IOP/.cache}
export GOROCE_INTEROP_NETNS=goroce-bvr GOROCE_INTEROP_BRIDGE=grbvr0 GOROCE_INTEROP_TAP=grbvrtap0 \
  GOROCE_INTEROP_NET=10.67.0 GOROCE_INTEROP_VM_NAME=goroce-bvr-vm \
  GOROCE_INTEROP_RUN=$CACHE_DIR/run-bvr GOROCE_INTEROP_SHARE=$CACHE_DIR/share-bvr \
  GOROCE_INTEROP_MTU=1500
. "$IOP/lib.sh"

DUR= BW_ITERS=500 LAT_ITERS=2000 REPS=3 MTUS=1500 CLOCK=tsc KEEP=0 ENVS=() WORKTREE=0
MODES=write_bw,send_bw,read_bw,send_lat GLINK=udp GFLAGS=
KSUITE_OPT=
while getopts "n:D:l:r:m:M:L:G:K:c:e:kwh" o; do
  case $o in
    n) BW_ITERS=$OPTARG ;; D) DUR=$OPTARG ;; l) LAT_ITERS=$OPTARG ;; r) REPS=$OPTARG ;;
    m) MTUS=$OPTARG ;; M) MODES=$OPTARG ;; L) GLINK=$OPTARG ;; G) GFLAGS=$OPTARG ;; K) KSUITE_OPT=$OPTARG ;; c) CLOCK=$OPTARG ;; e) ENVS+=(-e "$OPTARG") ;; k) KEEP=1 ;; w) WORKTREE=1 ;;
    *) sed -n '2,40p' "$0"; exit 2 ;;
  esac
done
if [ -n "$KSUITE_OPT" ]; then   # lib.sh derives the kernel and initramfs paths from it
  export GOROCE_INTEROP_KERNEL_SUITE=$KSUITE_OPT
  . "$IOP/lib.sh"
fi
case $CLOCK in
  tsc) export GOROCE_INTEROP_KERNEL_ARGS=tsc=reliable KERNEL_ARGS=tsc=reliable ;;
  hpet) export GOROCE_INTEROP_KERNEL_ARGS= KERNEL_ARGS= ;;
  *) log "ERROR: -c tsc or -c hpet"; exit 2 ;;
esac
if [ -n "$DUR" ]; then BWRUN="-D $DUR"; else BWRUN="-n $BW_ITERS"; fi
[ "$(id -u)" = 0 ] || { log "ERROR: run as root"; exit 2; }

OUT=$CACHE/bvr
mkdir -p "$OUT"
RUNLOG=$OUT/runs.log TSV=$OUT/results.tsv TABLE=$OUT/table.txt
: > "$RUNLOG"; printf 'linkmtu\tmode\tsize\tmetric\tstack\trep\tvalue\n' > "$TSV"
T0=$(date +%s)

cleanup() {
  local rc=$?
  if [ "$KEEP" = 1 ]; then
    log "VM left up (-k): GOROCE_INTEROP_* as in $0, then interop/down.sh"
  else
    "$IOP/down.sh" >/dev/null 2>&1 || log "down.sh failed"
    rm -rf "$RUN"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 2' INT TERM

# 1. Image (cached; build.sh only when something is missing: it may rebuild the shared image).
if ! { [ -f "$KERNEL" ] && [ -f "$INITRD" ] && [ -x "$AGENT_BIN" ]; }; then
  log "no cached image: interop/build.sh"
  "$IOP/build.sh" || exit 2
fi

# 2. A static goroce in our 9p share, with the guest half next to it.  Built from a clean
# export of HEAD (other engineers edit the checkout concurrently), or the working tree with -w.
mkdir -p "$SHARE"
REV=$(git -C "$REPO_DIR" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ "$WORKTREE" = 1 ]; then
  git -C "$REPO_DIR" diff --quiet HEAD -- bth wire transport hca bench cmd go.mod 2>/dev/null || REV="$REV+worktree"
  SRC=$REPO_DIR
else
  SRC=$OUT/src
  rm -rf "$SRC"; mkdir -p "$SRC"
  git -C "$REPO_DIR" archive --format=tar HEAD | tar -x -C "$SRC" || { log "ERROR: git archive HEAD failed"; exit 2; }
fi
log "building static goroce ($REV) in $SRC"
(cd "$SRC" && CGO_ENABLED=0 "$GO" build -trimpath -o "$SHARE/goroce" ./cmd/goroce &&
  CGO_ENABLED=0 "$GO" build -trimpath -o "$SHARE/tcgcost" ./interop/tcgcost &&
  CGO_ENABLED=0 "$GO" build -trimpath -o "$SHARE/udplat" ./interop/udplat) || exit 2
[ "$WORKTREE" = 1 ] || rm -rf "$SRC"
cp "$IOP/bench-vs-rxe-guest.sh" "$SHARE/bench-vs-rxe-guest.sh" || exit 2
G=/mnt/host/bench-vs-rxe-guest.sh

# 3. Boot.
"$IOP/down.sh" >/dev/null 2>&1   # a leftover of an interrupted run (ours only: VM_NAME check)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
"$IOP/up.sh" || exit 2
GUEST_CLOCK=$(vmx 'cat /sys/devices/system/clocksource/clocksource0/current_clocksource' 2>/dev/null)
GUEST_KERNEL=$(vmx 'uname -r' 2>/dev/null)
log "guest clocksource: $GUEST_CLOCK, kernel $GUEST_KERNEL"
# What the guest's CPU charges for each operation of a 64 KiB message (interop/tcgcost): under
# TCG the kernel's copies and the CRC cost what the network costs on hardware.
COSTS=$(vmx /mnt/host/tcgcost 2>&1) || log "tcgcost failed: $COSTS"
echo "=== $(date +%T) tcgcost (guest)"$'\n'"$COSTS" >> "$RUNLOG"

# bench STACK MODE FLAGS... runs one server+client pair in the guest, logs everything and
# prints the client's output.
bench() {
  local out rc
  out=$("$AGENT_BIN" exec -d "$RUN" "${ENVS[@]}" -e BVR_LINK="$GLINK" -e BVR_GOROCE_FLAGS="$GFLAGS" -- "timeout 150 $G run $*" 2>&1); rc=$?
  { echo "=== $(date +%T) run $* (exit $rc)${ENVS[*]:+ env ${ENVS[*]}}"; echo "$out"; } >> "$RUNLOG"
  printf '%s\n' "$out" | grep -v '^server| '
  return $rc
}

# record LINKMTU MODE SIZE METRIC STACK REP VALUE
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >> "$TSV"; }

FAIL=0
FLOOR=
for lm in ${MTUS//,/ }; do
  case $lm in 1500) ib=1024 ;; 9000) ib=4096 ;; *) log "ERROR: link MTU $lm: use 1500 or 9000"; exit 2 ;; esac
  log "guest: setup at link MTU $lm (IB MTU $ib)"
  vmx "$G setup $lm" 2>&1 | tee -a "$RUNLOG" >&2 || { log "ERROR: guest setup failed"; exit 2; }
  case ,$MODES, in
    *,send_lat,*)
      # The floor under send_lat on goroce's path (interop/udplat): a busy-polled ping-pong of
      # 20-byte datagrams between bvra and bvrb, plain and as goroce's udp link sends and
      # receives (connected send, the ACK and the answer in one GSO skb; raw-socket receive,
      # or with --rx-ring a packet socket's RX ring), and through AF_XDP sockets: one frame,
      # two frames a kick (an ACK and its answer, each its own skb), the two as one GSO
      # super-frame from a packet socket (Linux 6.2+) or from a connected UDP socket.
      for f in "" "-connect -raw -gso 2" "-connect -ring -gso 2" "-xdp drv" "-xdp skb" \
        "-xdp skb -frames 2" "-xdp skb -gso 2" "-xdp skb -udpsend -gso 2"; do
        if [ "$f" = "-xdp drv" ] && [ "$lm" -gt 1500 ]; then
          # veth refuses native XDP (ERANGE) when the peer's MTU passes what fits a page
          # (about 3.5 KB) and the program does not take multi-buffer frames, as udplat's
          # does not: it would only print that error. Generic XDP (-xdp skb) has no limit.
          FLOOR+="  IB MTU $ib, udplat $f: not run (veth's native XDP refuses link MTU $lm)"$'\n'
          continue
        fi
        l=$(vmx "/mnt/host/udplat $f -n $LAT_ITERS bvra 10.98.0.1 bvrb 10.98.0.2" 2>&1 | tail -1)
        echo "=== $(date +%T) udplat $f (guest, link MTU $lm)"$'\n'"$l" >> "$RUNLOG"
        FLOOR+="  IB MTU $ib, udplat ${f:-(plain)}: $l"$'\n'
      done ;;
  esac
  for rep in $(seq 1 "$REPS"); do
    for mode in ${MODES//,/ }; do
      case $mode in
        *_bw) size=65536 flags="-s 65536 $BWRUN -F -m $ib" ;;
        *_lat) size=2 flags="-s 2 -n $LAT_ITERS -F -m $ib" ;;
      esac
      for stack in rxe goroce; do
        out=$(bench "$stack" "$mode" $flags); rc=$?
        line=$(printf '%s\n' "$out" | awk -v s="$size" '$1 == s && $2 ~ /^[0-9]+$/ { l = $0 } END { print l }')
        # perftest prints 0.00 (bw) or inf (lat) when it measured nothing: a failed run too.
        if [ $rc -ne 0 ] || [ -z "$line" ] || echo "$line" | awk '$4 + 0 == 0 || /inf|nan/ { exit 0 } { exit 1 }'; then
          log "FAILED: $stack $mode $flags (exit $rc; see $RUNLOG)"
          FAIL=1; continue
        fi
        case $mode in
          *_bw) v=$(echo "$line" | awk '{print $4}'); record "$lm" "$mode" "$size" "BW average" "$stack" "$rep" "$v"
                log "mtu $ib rep $rep: $stack $mode $size B: $v MB/s" ;;
          *_lat) read -r t_typ t_avg < <(echo "$line" | awk '{print $5, $6}')
                record "$lm" "$mode" "$size" t_typical "$stack" "$rep" "$t_typ"
                record "$lm" "$mode" "$size" t_avg "$stack" "$rep" "$t_avg"
                log "mtu $ib rep $rep: $stack $mode $size B: t_typical $t_typ us, t_avg $t_avg us" ;;
        esac
      done
    done
  done
done
vmx "$G teardown" >/dev/null 2>&1

# 4. The table: median over the repetitions per (mtu, mode, metric, stack).
{
  echo "goroce vs kernel rxe, same VM ($(cat "$RUN/accel" 2>/dev/null || echo ?), $VCPUS vCPU, Linux $GUEST_KERNEL, clocksource $GUEST_CLOCK, host load $LOAD0 -> $(cut -d' ' -f1-3 /proc/loadavg)), veth at the same MTU, goroce $REV --link $GLINK${GFLAGS:+ $GFLAGS}${ENVS[*]:+, env ${ENVS[*]}}"
  echo "bw: $BWRUN per run; send_lat: -n $LAT_ITERS; median of $REPS alternating runs; MB/s = 2^20 B/s as perftest prints"
  awk -F'\t' '
    NR == 1 { next }
    { k = $1 SUBSEP $2 SUBSEP $3 SUBSEP $4; if (!(k in seen)) { seen[k] = 1; order[++n] = k }
      v[k, $5, ++c[k, $5]] = $7 }
    function median(k, st,   m, i, j, a, t) {
      m = c[k, st]; if (!m) return ""
      for (i = 1; i <= m; i++) a[i] = v[k, st, i] + 0
      for (i = 2; i <= m; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
      return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
    }
    BEGIN { printf "%-5s | %-8s | %-7s | %-17s | %10s | %10s | %10s | %s\n", "IBMTU", "mode", "size", "metric", "rxe", "goroce", "goroce/rxe", "target (issue 5)"
            printf "%s\n", "------+----------+---------+-------------------+------------+------------+------------+-----------------" }
    END {
      for (i = 1; i <= n; i++) {
        split(order[i], f, SUBSEP); k = order[i]
        r = median(k, "rxe"); g = median(k, "goroce")
        ratio = (r != "" && g != "" && r > 0) ? sprintf("%.2fx", g / r) : "-"
        if (f[2] ~ /_bw$/) { tgt = ">= 2x"; met = (ratio != "-" && g >= 2 * r) }
        else if (f[4] == "t_typical") { tgt = "<= 1x"; met = (ratio != "-" && g <= r) }
        else { tgt = "(info)"; met = -1 }
        st = ratio == "-" ? "not measured" : met == 1 ? "met" : met == 0 ? "NOT met" : ""
        printf "%-5s | %-8s | %-7s | %-17s | %10s | %10s | %10s | %s %s\n", (f[1] == 1500 ? 1024 : 4096), f[2], f[3] " B", f[4] (f[2] ~ /_bw$/ ? " MB/s" : " usec"), r == "" ? "-" : sprintf("%.2f", r), g == "" ? "-" : sprintf("%.2f", g), ratio, tgt, st
      }
    }' "$TSV"
  echo "guest costs (interop/tcgcost, best of 7), per 64 KiB message, then per operation:"
  printf '%s\n' "$COSTS" | sed 's/^/  /'
  if [ -n "$FLOOR" ]; then
    echo "send_lat floor on goroce's path: UDP ping-pong bvra <-> bvrb, 20-byte datagrams, busy-polled (interop/udplat), half round trip:"
    printf '%s' "$FLOOR"
  fi
  echo "commands (guest): see $RUNLOG ('# server:' / '# client:' lines); total $(( $(date +%s) - T0 )) s with boot"
} | tee "$TABLE"
awk '/^# (server|client):/ && !seen[$0]++ { print "  " substr($0, 3) }' "$RUNLOG" | head -16 | tee -a "$TABLE"
[ $FAIL = 0 ] || { log "some runs failed (see $RUNLOG)"; exit 1; }
exit 0
