# shellcheck shell=bash
# lib.sh - settings and helpers shared by the goroce interop harness scripts.  Source it.
#
# Every knob can be overridden from the environment (GOROCE_INTEROP_*).  Names are chosen so
# that they never collide with other qemu/rxe setups on the same machine (netns, bridge, tap,
# qemu -name, subnet).

IOP_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$IOP_DIR/.." && pwd)
CACHE=${GOROCE_INTEROP_CACHE:-$IOP_DIR/.cache}
RUN=${GOROCE_INTEROP_RUN:-$CACHE/run}  # runtime state of the one VM: sockets, logs, pid file
SHARE=${GOROCE_INTEROP_SHARE:-$CACHE/share}  # 9p-exported to the guest as /mnt/host
AGENT_BIN=$CACHE/bin/goroce-interop-agent
# GOROCE_INTEROP_KERNEL_SUITE picks the guest kernel's suite, e.g. bookworm-backports (Debian's
# linux-image-amd64 of that suite, fetched from the same mirror); empty means $SUITE's kernel as
# this machine's apt configuration resolves it.  Every other suite gets its own kernel tree,
# vmlinuz and initramfs in the cache, so switching never rebuilds the default image.
KSUITE=${GOROCE_INTEROP_KERNEL_SUITE:-}
KTAG=${KSUITE:+-$KSUITE}
KDIR=$CACHE/kernel$KTAG
KERNEL=$CACHE/vmlinuz$KTAG
INITRD=$CACHE/rootfs$KTAG.cpio          # uncompressed newc cpio: unpacks fastest under TCG

NETNS=${GOROCE_INTEROP_NETNS:-goroce-interop}
BR=${GOROCE_INTEROP_BRIDGE:-gribr0}
TAP=${GOROCE_INTEROP_TAP:-gritap0}
NET_PREFIX=${GOROCE_INTEROP_NET:-10.66.0}   # private /24 that exists only inside $NETNS and the VM
HOST_IP=$NET_PREFIX.1
VM_IP=$NET_PREFIX.2
VM_MAC=52:54:00:66:00:02
BR_MAC=${GOROCE_INTEROP_BRIDGE_MAC:-02:66:00:66:00:01}  # the bridge keeps it when ports come and go
VM_NAME=${GOROCE_INTEROP_VM_NAME:-goroce-interop-vm}  # qemu -name; down.sh checks it before signalling a pid
VCPUS=${GOROCE_INTEROP_VCPUS:-2}
MEM_MB=${GOROCE_INTEROP_MEM:-1024}
MTU=${GOROCE_INTEROP_MTU:-1500}          # 9000 gives rxe0 an active_mtu of 4096
# Extra guest kernel command line (up.sh appends it), e.g. "tsc=reliable": under TCG the guest
# otherwise marks the TSC unstable and runs on the HPET, where every clock_gettime is an
# emulated MMIO read (~17 us measured), which bench-vs-rxe.sh must avoid for Go's runtime.
KERNEL_ARGS=${GOROCE_INTEROP_KERNEL_ARGS:-}
AGENT_PORTS=4                            # virtio-serial ports = concurrent guest commands
SUITE=${GOROCE_INTEROP_SUITE:-bookworm}
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
[ -x "$GO" ] || GO=/usr/local/go/bin/go

log() { printf '[interop %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# apt_mirror_url prints the Debian mirror that this machine's apt configuration uses for
# $SUITE (never a host name written in the repo).  Reads one-line *.list files and deb822
# *.sources files; ignores security suites and disabled entries.
apt_mirror_url() {
  local f url
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    url=$(awk -v s="$SUITE" '
      /^[[:space:]]*#/ { next }
      $1 == "deb" {
        i = 2
        if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
        if ($(i+1) == s && $i !~ /security/) { print $i; exit }
      }' "$f")
    if [ -n "$url" ]; then echo "${url%/}"; return 0; fi
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    url=$(awk -v s="$SUITE" '
      function stanza_end() {
        if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " s " ") && enabled != "no" && uris !~ /security/) {
          split(uris, u, " "); print u[1]; done = 1; exit
        }
        types = uris = suites = enabled = ""
      }
      /^[[:space:]]*#/ { next }
      /^[[:space:]]*$/ { stanza_end(); next }
      { key = tolower($1); $1 = ""; sub(/^ +/, "") }
      key == "types:"   { types = $0 }
      key == "uris:"    { uris = $0 }
      key == "suites:"  { suites = $0 }
      key == "enabled:" { enabled = tolower($0) }
      END { if (!done) stanza_end() }' "$f")
    if [ -n "$url" ]; then echo "${url%/}"; return 0; fi
  done
  return 1
}

netns_exists() { ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$NETNS"; }
in_ns() { ip netns exec "$NETNS" "$@"; }

# qemu_pid prints the pid recorded by up.sh if that process is still our qemu (its command
# line carries -name $VM_NAME); nothing else is ever signalled.
qemu_pid() {
  local f=$RUN/qemu.pid pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "-name $VM_NAME " || return 1
  echo "$pid"
}

# vmx CMD... runs a /bin/sh -c command line in the guest (stdout/stderr streamed, remote exit status).
vmx() { "$AGENT_BIN" exec -d "$RUN" -- "$@"; }
