#!/usr/bin/env bash
# build.sh [--force] [STAGE...] - build (or reuse) the interop VM image under interop/.cache/.
#
# Stages, in order (each is skipped when its output is present and up to date):
#   hosttools  apt-get install what the harness needs on the host when missing
#              (qemu-system-x86, debootstrap, cpio, kmod, tcpdump, tshark, nftables, ...)
#   base       debootstrap --variant=minbase of Debian $SUITE with rdma-core, ibverbs-utils,
#              perftest, rdmacm-utils, tcpdump, iproute2, ... from the mirror named in this
#              machine's apt configuration (.deb files cached in .cache/debs)
#   kernel     Debian's linux-image-amd64 (whatever it depends on today) and the closure of the
#              kernel modules the guest needs (rdma_rxe, virtio, 9p, veth, netem, ...);
#              GOROCE_INTEROP_KERNEL_SUITE=bookworm-backports takes that suite's instead (read
#              from the mirror's Packages index, checked against its SHA256) into .cache/kernel-SUITE
#   agent      static Go command agent (interop/agent, stdlib only)
#   image      rootfs + modules + guest/ overlay + agent -> uncompressed newc initramfs;
#              rebuilt whenever the agent or the overlay changed
#   probe      does KVM boot a stock kernel here?  writes "kvm" or "tcg" to .cache/accel
# Must run as root.  Times of every stage are appended to .cache/build-times.txt.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

FORCE=0
STAGES=()
for a in "$@"; do
  case $a in
    --force) FORCE=1 ;;
    hosttools|base|kernel|agent|image|probe) STAGES+=("$a") ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) die "unknown argument '$a' (see --help)" ;;
  esac
done
[ ${#STAGES[@]} -gt 0 ] || STAGES=(hosttools base kernel agent image probe)
[ "$(id -u)" = 0 ] || die "run as root (debootstrap, device nodes in the cpio, netns)"

# Guest userspace; debootstrap resolves the dependencies.
GUEST_PKGS=(
  rdma-core libibverbs1 ibverbs-providers ibverbs-utils librdmacm1 rdmacm-utils libibumad3
  perftest infiniband-diags
  iproute2 iputils-ping tcpdump ethtool procps kmod psmisc busybox-static
)
# Guest kernel modules; modprobe --show-depends adds what they need.
GUEST_MODULES=(
  rdma_rxe ib_uverbs rdma_ucm ib_umad ib_cm rdma_cm iw_cm ib_core
  virtio_pci virtio_net virtio_console virtio_rng 9p 9pnet_virtio
  veth bridge tun dummy ifb
  sch_netem sch_tbf sch_prio sch_ingress cls_u32 cls_matchall act_mirred act_gact
  crc32_generic crc32_pclmul libcrc32c
)

mkdir -p "$CACHE"/{debs,bin} "$SHARE" "$RUN"
TIMES=$CACHE/build-times.txt
now() { date +%s.%N; }
timed() {  # timed NAME CMD...: run a stage and record how long it took
  local name=$1 t0 t1; shift
  t0=$(now); "$@"; t1=$(now)
  awk -v n="$name" -v a="$t0" -v b="$t1" -v d="$(date -u +%FT%TZ)" \
    'BEGIN { printf "%-10s %7.1f s   (%s)\n", n, b - a, d }' | tee -a "$TIMES" >&2
}

stage_hosttools() {
  local need=() c p
  for c in qemu-system-x86_64:qemu-system-x86 debootstrap:debootstrap cpio:cpio depmod:kmod \
           tcpdump:tcpdump tshark:tshark nft:nftables ip:iproute2 ping:iputils-ping \
           dpkg-deb:dpkg sha256sum:coreutils curl:curl xz:xz-utils; do
    command -v "${c%%:*}" >/dev/null || need+=("${c#*:}")
  done
  # debootstrap needs the archive keyring to check the Release file
  [ -f /usr/share/keyrings/debian-archive-keyring.gpg ] || need+=(debian-archive-keyring)
  if [ ${#need[@]} -gt 0 ]; then
    log "hosttools: apt-get install ${need[*]}"
    # Other users of this machine may hold the dpkg lock: wait for it instead of failing.
    apt-get -o DPkg::Lock::Timeout=300 update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q \
        --no-install-recommends "${need[@]}" > "$CACHE/hosttools.log" 2>&1 \
      || { tail -20 "$CACHE/hosttools.log" >&2; die "hosttools: apt-get install failed (log $CACHE/hosttools.log)"; }
  fi
  [ -x "$GO" ] || die "hosttools: no Go toolchain (need go in PATH or /usr/local/go/bin/go)"
}

stage_base() {
  local dst=$CACHE/rootfs-base
  if [ -f "$dst/.done" ] && [ $FORCE = 0 ]; then log "base: cached"; return; fi
  local mirror
  mirror=$(apt_mirror_url) || die "base: no '$SUITE' deb source in /etc/apt/sources.list{,.d/*}"
  log "base: debootstrap $SUITE minbase + ${#GUEST_PKGS[@]} packages (mirror from apt config)"
  rm -rf "$dst" "$dst.tmp"
  debootstrap --variant=minbase --arch=amd64 --cache-dir="$CACHE/debs" \
      --include="$(IFS=,; echo "${GUEST_PKGS[*]}")" "$SUITE" "$dst.tmp" "$mirror" \
      > "$CACHE/debootstrap.log" 2>&1 \
    || { tail -30 "$CACHE/debootstrap.log" >&2; die "base: debootstrap failed (log $CACHE/debootstrap.log)"; }
  mv "$dst.tmp" "$dst"
  touch "$dst/.done"
}

# fetch_suite_kernel SUITE downloads SUITE's linux-image-amd64 target package from the apt
# mirror (its Packages index names the file and its SHA256) into .cache/debs and prints the path.
fetch_suite_kernel() {
  local ks=$1 mirror idx=$CACHE/debs/Packages-$1 kpkg fn sum deb
  mirror=$(apt_mirror_url) || die "kernel: no '$SUITE' deb source in /etc/apt/sources.list{,.d/*}"
  curl -fsS --retry 3 -o "$idx.xz" "$mirror/dists/$ks/main/binary-amd64/Packages.xz" \
    || die "kernel: cannot fetch $ks's Packages index"
  xz -dcf "$idx.xz" > "$idx"
  pkgfield() { awk -v p="$1" -v f="$2:" '$1 == "Package:" { on = ($2 == p) } on && $1 == f { $1 = ""; sub(/^ /, ""); print; exit }' "$idx"; }
  kpkg=$(pkgfield linux-image-amd64 Depends | grep -o 'linux-image-[0-9][^ ,]*' | head -1)
  [ -n "$kpkg" ] || die "kernel: $ks has no linux-image-amd64"
  fn=$(pkgfield "$kpkg" Filename) sum=$(pkgfield "$kpkg" SHA256)
  [ -n "$fn" ] && [ -n "$sum" ] || die "kernel: $ks's index has no file for $kpkg"
  deb=$CACHE/debs/${fn##*/}
  log "kernel: $kpkg from $ks"
  if ! echo "$sum  $deb" | sha256sum -c --status 2>/dev/null; then
    curl -fsS --retry 3 -o "$deb.tmp" "$mirror/$fn" || die "kernel: cannot fetch $fn"
    echo "$sum  $deb.tmp" | sha256sum -c --status || die "kernel: $fn does not match its SHA256"
    mv "$deb.tmp" "$deb"
  fi
  echo "$deb"
}

stage_kernel() {
  local kd=$KDIR
  if [ -f "$kd/.done" ] && [ $FORCE = 0 ]; then log "kernel: cached ($(cat "$kd/version"))"; return; fi
  local deb
  if [ -n "$KSUITE" ]; then
    deb=$(fetch_suite_kernel "$KSUITE")
  else
    # linux-image-amd64 is a metapackage; its Depends names today's linux-image-6.1.0-N-amd64.
    local kpkg=""
    resolve() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }'; }
    kpkg=$(resolve)
    if [ -z "$kpkg" ]; then apt-get update -qq; kpkg=$(resolve); fi
    [ -n "$kpkg" ] || die "kernel: cannot resolve linux-image-amd64 with apt-cache"
    log "kernel: $kpkg"
    (cd "$CACHE/debs" && { ls "${kpkg}"_*.deb >/dev/null 2>&1 || apt-get -q -o APT::Sandbox::User=root download "$kpkg" >/dev/null; })
    deb=$(ls -t "$CACHE/debs/${kpkg}"_*.deb | head -1)
  fi
  rm -rf "$kd"; mkdir -p "$kd/full"
  dpkg-deb -x "$deb" "$kd/full"
  # Newer packages (backports of 6.12 on) ship usr/lib/modules; depmod/modprobe -d want lib/modules.
  if [ ! -d "$kd/full/lib/modules" ] && [ -d "$kd/full/usr/lib/modules" ]; then
    ln -s usr/lib "$kd/full/lib"
  fi
  local kver; kver=$(ls "$kd/full/lib/modules")
  echo "$kver" > "$kd/version"
  cp "$kd/full/boot/vmlinuz-$kver" "$KERNEL"
  depmod -b "$kd/full" "$kver"
  local m sel=$kd/modules.list
  : > "$sel"
  for m in "${GUEST_MODULES[@]}"; do
    modprobe -d "$kd/full" -S "$kver" --show-depends "$m" 2>/dev/null | awk '$1 == "insmod" { print $2 }' >> "$sel" \
      || log "kernel: module $m not found (built in?)"
  done
  sort -u -o "$sel" "$sel"
  local out=$kd/modules p
  while read -r p; do
    p=${p#"$kd/full/"}
    p=${p#usr/}   # usr/lib/modules/... is reached through the lib symlink above
    mkdir -p "$out/${p%/*}"
    cp "$kd/full/$p" "$out/$p"
  done < "$sel"
  cp "$kd/full/lib/modules/$kver"/modules.{builtin,builtin.modinfo,order} "$out/lib/modules/$kver/"
  depmod -b "$out" "$kver"
  rm -rf "$kd/full"
  log "kernel: $kver, $(wc -l < "$sel") modules kept ($(du -sh "$out" | cut -f1))"
  touch "$kd/.done"
}

stage_agent() {
  log "agent: go build ./interop/agent (static)"
  (cd "$REPO_DIR" && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 \
     "$GO" build -trimpath -ldflags='-s -w' -o "$AGENT_BIN.tmp" ./interop/agent)
  mv "$AGENT_BIN.tmp" "$AGENT_BIN"
}

# image_inputs prints a hash over everything the image is assembled from except the cached
# base/kernel trees, so edits to the overlay or the agent rebuild the initramfs.
image_inputs() {
  { sha256sum "$AGENT_BIN" "$KDIR/version"
    (cd "$IOP_DIR/guest" && find . -type f | LC_ALL=C sort | xargs sha256sum)
    cat "$CACHE/rootfs-base/.done" 2>/dev/null; stat -c %Y "$CACHE/rootfs-base/.done"
  } | sha256sum | cut -d' ' -f1
}

stage_image() {
  [ -f "$CACHE/rootfs-base/.done" ] || die "image: run the base stage first"
  [ -f "$KDIR/.done" ] || die "image: run the kernel stage first"
  [ -x "$AGENT_BIN" ] || die "image: run the agent stage first"
  local stamp; stamp=$(image_inputs)
  if [ -f "$INITRD" ] && [ "$(cat "$CACHE/image$KTAG.stamp" 2>/dev/null)" = "$stamp" ] && [ $FORCE = 0 ]; then
    log "image: cached"; return
  fi
  local st=$CACHE/rootfs-stage
  rm -rf "$st"; mkdir -p "$st"
  cp -a "$CACHE/rootfs-base/." "$st/"
  rm -f "$st/.done"
  # Slim down: the guest never needs docs, locales, apt state or the udev hwdb.
  rm -rf "$st"/usr/share/{doc,man,info,locale,lintian,bug,bash-completion} \
         "$st"/var/cache/apt/* "$st"/var/lib/apt/lists/* "$st"/var/log/* \
         "$st"/usr/lib/udev/hwdb.bin "$st"/etc/udev/hwdb.bin
  # bookworm is merged-/usr: /lib -> usr/lib, so modules land in usr/lib/modules
  cp -a "$KDIR/modules/lib/." "$st/usr/lib/"
  cp -a "$IOP_DIR/guest/." "$st/"
  install -D -m 0755 "$AGENT_BIN" "$st/usr/local/sbin/goroce-interop-agent"
  ln -sf /bin/busybox "$st/init"
  mkdir -p "$st"/{proc,sys,dev,run,tmp,mnt/host,root}
  echo goroce-interop > "$st/etc/hostname"
  : > "$st/etc/fstab"
  (cd "$st" && find . -xdev -print0 | cpio --null -o -H newc --quiet) > "$INITRD.tmp"
  mv "$INITRD.tmp" "$INITRD"
  echo "$stamp" > "$CACHE/image$KTAG.stamp"
  log "image: $INITRD $(du -h "$INITRD" | cut -f1), $(find "$st" -xdev | wc -l) files"
  rm -rf "$st"
}

# stage_probe decides the accelerator.  /dev/kvm can exist and still not run a stock kernel
# (a PVM host: no vmx/svm, the guest spins after the decompressor), so boot the kernel under
# KVM and wait for its "Linux version" banner on the serial port; otherwise use TCG.
stage_probe() {
  if [ -f "$CACHE/accel" ] && [ $FORCE = 0 ]; then log "probe: cached ($(cat "$CACHE/accel"))"; return; fi
  local res=tcg logf=$CACHE/probe-kvm.log
  if [ -c /dev/kvm ] && [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
    rm -f "$logf"
    qemu-system-x86_64 -accel kvm -cpu host,-arch-capabilities -m 256 -nodefaults -display none \
      -no-reboot -serial "file:$logf" -kernel "$KERNEL" \
      -append "console=ttyS0 earlyprintk=serial,ttyS0 panic=-1" >/dev/null 2>&1 &
    local qpid=$! i
    for i in $(seq 1 40); do   # up to 20 s
      grep -q 'Linux version' "$logf" 2>/dev/null && { res=kvm; break; }
      kill -0 "$qpid" 2>/dev/null || break
      sleep 0.5
    done
    kill "$qpid" 2>/dev/null || true
    wait "$qpid" 2>/dev/null || true
    log "probe: KVM $([ $res = kvm ] && echo boots the kernel || echo "does not boot a stock kernel here (log $logf)")"
  else
    log "probe: no usable /dev/kvm"
  fi
  echo "$res" > "$CACHE/accel"
  log "probe: accelerator = $res"
}

for s in "${STAGES[@]}"; do timed "$s" "stage_$s"; done
