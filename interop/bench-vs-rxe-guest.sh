#!/bin/sh
# bench-vs-rxe-guest.sh - the guest half of interop/bench-vs-rxe.sh.  The host copies it into
# the VM's 9p share (/mnt/host) next to a static goroce; it is not baked into the image, so
# changing it never forces an image rebuild under the matrix VM.
#
#   bench-vs-rxe-guest.sh setup MTU        both paths at link MTU MTU (1500 -> IB MTU 1024,
#                                          9000 -> 4096); idempotent, changes the MTU in place;
#                                          installs $BVR_GOROCE (/mnt/host/goroce) as
#                                          /usr/local/bin/goroce-bvr, which "run" uses
#   bench-vs-rxe-guest.sh run STACK MODE FLAGS...
#                                          one server+client run, sequentially:
#                                          STACK rxe:    ib_MODE -d rxev2 (server), -d rxev1 10.99.0.2
#                                          STACK goroce: goroce bench MODE in netns bvrb 10.98.0.2
#                                                        (server) and bvra 10.98.0.1 (client),
#                                                        --link $BVR_LINK (udp, or afpacket on
#                                                        vb/va) and $BVR_GOROCE_FLAGS
#   bench-vs-rxe-guest.sh teardown
#
# Paths.  rxe: the interop overlay's rxe-veth-pair, vp1 10.99.0.1 rxev1 <== veth ==> vp2
# 10.99.0.2 rxev2, both ends in init_net (Linux 6.1 rxe works only in init_net).  goroce cannot
# share init_net's UDP port 4791 with rxe, so it gets two network namespaces joined by its own
# veth pair va 10.98.0.1/24 (bvra) <== veth ==> vb 10.98.0.2/24 (bvrb), same MTU, same VM,
# same vCPUs.
#
# "run" prints "# server: CMD" / "# client: CMD", then the client's output, then the server's
# (prefixed "server| ").  Exit status: 0 when both ends exited 0, else the first failure.
set -u
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# goroce runs from the guest's own root file system, where perftest and rxe's
# libraries are. From the 9p share (no page cache across opens) every process
# read its code from the host page by page as it first ran it: ~20 major faults
# inside a 500-message write_bw's timed phase, none from RAM. "setup" copies it.
GOROCE_SRC=${BVR_GOROCE:-/mnt/host/goroce}
GOROCE=/usr/local/bin/goroce-bvr
PORT=18515
TMO=${BVR_TIMEOUT:-90}   # hard cap per process: a forgotten perftest server busy-polls a vCPU

die() { echo "bench-vs-rxe-guest: $*" >&2; exit 2; }

# listening NETNS: exit 0 once something listens on TCP $PORT ("" = init_net).
listening() {
  if [ -n "$1" ]; then ip netns exec "$1" ss -Hltn "sport = :$PORT"; else ss -Hltn "sport = :$PORT"; fi | grep -q .
}

setup() {
  mtu=${1:?setup MTU}
  # rxe <-> rxe
  if ip link show vp1 >/dev/null 2>&1; then
    ip link set vp1 mtu "$mtu" && ip link set vp2 mtu "$mtu"
  else
    rxe-veth-pair up "$mtu" >/dev/null || die "rxe-veth-pair up $mtu failed"
  fi
  # goroce <-> goroce
  if ! ip netns list | grep -qw bvra; then
    ip netns add bvra && ip netns add bvrb || die "ip netns add failed"
    ip link add va mtu "$mtu" netns bvra type veth peer name vb mtu "$mtu" netns bvrb || die "veth failed"
    ip -n bvra addr add 10.98.0.1/24 dev va
    ip -n bvrb addr add 10.98.0.2/24 dev vb
    for n in bvra bvrb; do
      ip -n "$n" link set lo up
      # No IPv6 noise, like init_net (rcS); net.core.netdev_max_backlog (16384) is global.
      ip netns exec "$n" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 2>/dev/null || true
    done
    ip -n bvra link set va up
    ip -n bvrb link set vb up
  else
    ip -n bvra link set va mtu "$mtu" && ip -n bvrb link set vb mtu "$mtu"
  fi
  # Neighbours resolved before any timing.
  ping -q -c1 -W5 -I 10.99.0.1 10.99.0.2 >/dev/null 2>&1 || die "no ping over vp1->vp2"
  ip netns exec bvra ping -q -c1 -W5 10.98.0.2 >/dev/null 2>&1 || die "no ping over va->vb"
  [ -x "$GOROCE_SRC" ] || die "$GOROCE_SRC missing"
  mkdir -p /usr/local/bin && cp "$GOROCE_SRC" "$GOROCE.new" && mv -f "$GOROCE.new" "$GOROCE" ||
    die "cannot install $GOROCE_SRC as $GOROCE"
  g1=$(gid-index rxev1 10.99.0.1) && g2=$(gid-index rxev2 10.99.0.2) || die "no IPv4 GID on rxev1/rxev2"
  echo "setup: link MTU $mtu; rxev1 $(ibv_devinfo -d rxev1 | awk '/active_mtu/ {print $2}') gid $g1," \
    "rxev2 gid $g2; $(nproc) vCPU; $(uname -r)"
}

run() {
  stack=${1:?run STACK MODE FLAGS}; mode=${2:?run STACK MODE FLAGS}; shift 2
  case $stack in
    rxe)
      srvns= g1=$(gid-index rxev1 10.99.0.1) g2=$(gid-index rxev2 10.99.0.2)
      scmd="timeout $TMO ib_$mode -d rxev2 -x $g2 $*"
      ccmd="timeout $TMO ib_$mode -d rxev1 -x $g1 $* 10.99.0.2" ;;
    goroce)
      srvns=bvrb
      case ${BVR_LINK:-udp} in
        udp) slink="--link udp" clink="--link udp" ;;
        afpacket) slink="--link afpacket --dev vb" clink="--link afpacket --dev va" ;;
        *) die "BVR_LINK: udp or afpacket" ;;
      esac
      gx=${BVR_GOROCE_FLAGS:-}
      scmd="ip netns exec bvrb timeout $TMO $GOROCE bench $mode $* $slink $gx --addr 10.98.0.2"
      ccmd="ip netns exec bvra timeout $TMO $GOROCE bench $mode $* $clink $gx --addr 10.98.0.1 10.98.0.2" ;;
    *) die "unknown stack $stack" ;;
  esac
  i=0
  while listening "$srvns"; do  # a previous server still draining
    i=$((i + 1)); [ $i -lt 100 ] || die "TCP $PORT still busy"; sleep 0.1
  done
  echo "# server: $scmd"
  echo "# client: $ccmd"
  slog=/tmp/bvr-server.$$.log
  $scmd > "$slog" 2>&1 &
  spid=$!
  i=0
  until listening "$srvns"; do
    kill -0 $spid 2>/dev/null || break
    i=$((i + 1)); [ $i -lt 300 ] || break; sleep 0.1
  done
  $ccmd 2>&1
  crc=$?
  wait $spid
  src=$?
  sed 's/^/server| /' "$slog"; rm -f "$slog"
  echo "# exit: client $crc server $src"
  [ $crc = 0 ] || exit $crc
  exit $src
}

teardown() {
  ip netns del bvra 2>/dev/null
  ip netns del bvrb 2>/dev/null
  rxe-veth-pair down >/dev/null 2>&1
  return 0
}

cmd=${1:-}; [ $# -gt 0 ] && shift
case $cmd in
  setup) setup "$@" ;;
  run) run "$@" ;;
  teardown) teardown ;;
  *) sed -n '2,16p' "$0" >&2; exit 2 ;;
esac
