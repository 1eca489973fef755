#!/usr/bin/env bash
# up.sh - create the interop network namespace and boot the interop VM.
#
#   netns goroce-interop:  bridge gribr0 10.66.0.1/24 ── tap gritap0 ── VM eth0 10.66.0.2 (rxe0)
#
# The host-side goroce process runs inside the netns (ip netns exec goroce-interop goroce ...)
# and uses 10.66.0.1 (UDP 4791, or raw frames on gribr0).  The VM has no default route; the
# subnet exists only inside the netns and the VM.
#
# Environment: GOROCE_INTEROP_MTU (1500; 9000 gives rxe0 active_mtu 4096),
# GOROCE_INTEROP_ACCEL=kvm|tcg (default: what build.sh probe found), GOROCE_INTEROP_VCPUS (2),
# GOROCE_INTEROP_MEM (1024 MiB).  Fails loudly (non-zero, console log tail) if the VM does
# not come up; never skips.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || die "run as root"
[ -f "$KERNEL" ] && [ -f "$INITRD" ] && [ -x "$AGENT_BIN" ] || die "no VM image: run interop/build.sh first"
ACCEL=${GOROCE_INTEROP_ACCEL:-$(cat "$CACHE/accel" 2>/dev/null || echo tcg)}

if pid=$(qemu_pid); then
  have=$(cat "$RUN/mtu" 2>/dev/null || echo ?)
  [ "$have" = "$MTU" ] || die "VM already running (pid $pid) with MTU $have; run down.sh first"
  log "VM already running (pid $pid, MTU $MTU)"
  exit 0
fi

if ! netns_exists; then
  log "netns $NETNS: bridge $BR $HOST_IP/24"
  ip netns add "$NETNS"
  in_ns sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  ip -n "$NETNS" link set lo up
  ip -n "$NETNS" link add "$BR" type bridge
  ip -n "$NETNS" addr add "$HOST_IP/24" dev "$BR"
fi
# A fixed bridge MAC: a Linux bridge without one takes the smallest MAC of its ports, so the
# per-case gritap1 (random MAC) changed it, the guest's ARP entry for $HOST_IP went stale and
# its TCP SYNs went to the old MAC for ~7 s (rc_pingpong_tap capture) until ARP recovered.
ip -n "$NETNS" link set "$BR" address "$BR_MAC"
ip -n "$NETNS" link set "$BR" mtu "$MTU" up
ip -n "$NETNS" link del "$TAP" 2>/dev/null || true
ip -n "$NETNS" tuntap add dev "$TAP" mode tap
ip -n "$NETNS" link set "$TAP" mtu "$MTU" master "$BR" up
# The bridge takes the smallest MTU of its ports; set it again now that the tap is in.
ip -n "$NETNS" link set "$BR" mtu "$MTU"

case $ACCEL in
  kvm) accel=(-accel kvm -cpu host,-arch-capabilities) ;;
  tcg) accel=(-accel tcg,thread=multi -cpu max) ;;
  *) die "GOROCE_INTEROP_ACCEL must be kvm or tcg, not '$ACCEL'" ;;
esac
rm -rf "$RUN"; mkdir -p "$RUN" "$SHARE"
args=(
  -name "$VM_NAME" -machine pc "${accel[@]}" -smp "$VCPUS" -m "$MEM_MB"
  -nodefaults -display none -no-reboot
  -kernel "$KERNEL" -initrd "$INITRD"
  -append "console=ttyS0 quiet panic=-1 goroce.ip=$VM_IP/24 goroce.mtu=$MTU goroce.rxe=rxe0${KERNEL_ARGS:+ $KERNEL_ARGS}"
  -chardev "socket,id=ser0,path=$RUN/console.sock,server=on,wait=off,logfile=$RUN/console.log"
  -serial chardev:ser0
  -device virtio-serial-pci,id=vser0
)
for ((i = 0; i < AGENT_PORTS; i++)); do
  args+=(-chardev "socket,id=ag$i,path=$RUN/agent.$i.sock,server=on,wait=off"
         -device "virtserialport,bus=vser0.0,chardev=ag$i,name=goroce.agent.$i")
done
args+=(
  -netdev "tap,id=net0,ifname=$TAP,script=no,downscript=no"
  -device "virtio-net-pci,netdev=net0,mac=$VM_MAC,romfile=,host_mtu=$MTU"
  -fsdev "local,id=fs0,path=$SHARE,security_model=none"
  -device virtio-9p-pci,fsdev=fs0,mount_tag=hostshare
  -device virtio-rng-pci
  -pidfile "$RUN/qemu.pid" -daemonize
)
echo "$MTU" > "$RUN/mtu"
echo "$ACCEL" > "$RUN/accel"
t0=$(date +%s.%N)
in_ns qemu-system-x86_64 "${args[@]}" 2> "$RUN/qemu.stderr" \
  || { cat "$RUN/qemu.stderr" >&2; die "qemu failed to start"; }
log "VM: qemu pid $(cat "$RUN/qemu.pid") ($ACCEL, $VCPUS vCPU, $MEM_MB MiB, $VM_IP, MTU $MTU)"
if ! "$AGENT_BIN" wait -d "$RUN" -t "${GOROCE_INTEROP_BOOT_TIMEOUT:-180}"; then
  tail -30 "$RUN/console.log" >&2 || true
  die "the VM did not come up (console log: $RUN/console.log)"
fi
awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f\n", b - a }' > "$RUN/boot-seconds"
log "VM: agent answered $(cat "$RUN/boot-seconds") s after qemu start"
vmx 'echo "  $(uname -r), $(nproc) vCPU, eth0 mtu $(cat /sys/class/net/eth0/mtu), $(rdma link show | tr "\n" " ")"' >&2
