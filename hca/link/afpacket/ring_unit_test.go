package afpacket

import (
	"bytes"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/hca/link/internal/vnet"
)

// slotFrame decodes one slot as the ring reader does (no socket: the slot
// must not say TP_STATUS_COPY) and drains what it left pending; it returns
// the frames delivered into bufs of bufLen bytes.
func slotFrame(t *testing.T, slot []byte, bufLen int) (frames [][]byte, st Stats) {
	t.Helper()
	e := &Endpoint{cfg: Config{BatchSize: 4}}
	e.rx.init(e)
	r := &e.rx
	r.over = [][]byte{make([]byte, maxFrame)}
	bufs := make([][]byte, 4)
	for i := range bufs {
		bufs[i] = make([]byte, bufLen)
	}
	sizes := make([]int, len(bufs))
	collect := func(n int) {
		if n > len(bufs) {
			t.Fatalf("%d frames delivered into %d buffers", n, len(bufs))
		}
		for i := range n {
			if sizes[i] > bufLen || sizes[i] < 0 {
				t.Fatalf("frame of %d bytes in a %d-byte buffer", sizes[i], bufLen)
			}
			frames = append(frames, bytes.Clone(bufs[i][:sizes[i]]))
		}
	}
	collect(r.ringFrame(^uintptr(0), slot, unix.TP_STATUS_USER, bufs, sizes, 0))
	for r.pend < r.got {
		collect(r.deliverPending(bufs, sizes, 0))
	}
	c := &e.st
	return frames, Stats{RxTooLarge: c.rxTooLarge.Load(), RxRunt: c.rxRunt.Load(), RxKernelDrop: c.rxKernelDrop.Load(),
		RxMalformed: c.rxMalformed.Load(), RxGSO: c.rxGSO.Load(), RxGSOSegments: c.rxGSOSegments.Load()}
}

// fillSlot writes a slot as tpacket_rcv would: header fields, the
// virtio_net_hdr before the frame at mac, the frame.
func fillSlot(slot []byte, mac, net int, tlen, snap uint32, vh vnet.Hdr, frame []byte) {
	if mac >= vnetHdrLen && mac <= len(slot) {
		vh.Encode(slot[mac-vnetHdrLen : mac])
		copy(slot[mac:], frame)
	}
	// Last: a bad tp_mac may have put bytes over the header.
	h := (*unix.Tpacket2Hdr)(unsafe.Pointer(&slot[0]))
	h.Status, h.Len, h.Snaplen, h.Mac, h.Net = unix.TP_STATUS_USER, tlen, snap, uint16(mac), uint16(net)
}

// TestRingSlot decodes slots laid out as the kernel lays them out, and
// ones it must refuse, from bytes: the frame is the slot's bytes from
// tp_mac, a GSO frame in a slot is split, a slot without room for the
// virtio_net_hdr (tp_net not 10 past a 16-byte boundary), out of bounds,
// truncated without TP_STATUS_COPY, runt or too large for the buffer is
// counted and dropped.
func TestRingSlot(t *testing.T) {
	plain := superFrame(false, make([]byte, 100), 0)
	for i := range plain[ethHdr+28:] {
		plain[ethHdr+28+i] = byte(i)
	}
	super := superFrame(false, make([]byte, 3*200), 0)
	gso := vnet.Hdr{GSOType: vnet.GSOUDPL4, GSOSize: 200}
	fl := uint32(len(plain))
	tests := []struct {
		name     string
		mac, net int
		tlen     uint32
		snap     uint32
		vh       vnet.Hdr
		frame    []byte
		bufLen   int
		want     int // frames
		wantSt   Stats
	}{
		{"plain", ringMacOff, ringMacOff + ethHdr, fl, fl, vnet.Hdr{}, plain, 1600, 1, Stats{}},
		{"gso-in-slot", ringMacOff, ringMacOff + ethHdr, uint32(len(super)), uint32(len(super)), gso, super, 1600, 3,
			Stats{RxGSO: 1, RxGSOSegments: 3}},
		{"no-vnet-room", 80 - ethHdr, 80, fl, fl, vnet.Hdr{}, plain, 1600, 0, Stats{RxMalformed: 1}},
		{"mac-in-header", 20, 34, fl, fl, vnet.Hdr{}, plain, 1600, 0, Stats{RxMalformed: 1}},
		{"past-slot", ringMacOff, ringMacOff + ethHdr, 2000, 1600, vnet.Hdr{}, plain, 1600, 0, Stats{RxMalformed: 1}},
		{"truncated-no-copy", ringMacOff, ringMacOff + ethHdr, 5000, fl, vnet.Hdr{}, plain, 1600, 0, Stats{RxKernelDrop: 1}},
		{"runt", ringMacOff, ringMacOff + ethHdr, 10, 10, vnet.Hdr{}, plain, 1600, 0, Stats{RxRunt: 1}},
		{"too-large", ringMacOff, ringMacOff + ethHdr, fl, fl, vnet.Hdr{}, plain, 100, 0, Stats{RxTooLarge: 1}},
		{"bad-csum-offsets", ringMacOff, ringMacOff + ethHdr, fl, fl,
			vnet.Hdr{Flags: vnet.FlagNeedsCsum, CsumStart: 5000, CsumOffset: 6}, plain, 1600, 0, Stats{RxMalformed: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			slot := make([]byte, 1600)
			fillSlot(slot, tc.mac, tc.net, tc.tlen, tc.snap, tc.vh, tc.frame)
			got, st := slotFrame(t, slot, tc.bufLen)
			if len(got) != tc.want || st != tc.wantSt {
				t.Fatalf("%d frames, stats %+v; want %d, %+v", len(got), st, tc.want, tc.wantSt)
			}
			if tc.name == "plain" && !bytes.Equal(got[0], plain) {
				t.Fatal("frame is not the slot's bytes from tp_mac")
			}
			if tc.name == "gso-in-slot" {
				for i, f := range got {
					if len(f) != ethHdr+28+200 || !bytes.Equal(f[ethHdr+28:], super[ethHdr+28+200*i:ethHdr+28+200*(i+1)]) {
						t.Fatalf("segment %d: %d bytes or payload differs", i, len(f))
					}
				}
			}
		})
	}
}

// FuzzRingSlot feeds arbitrary slot contents (tpacket2_hdr fields, the
// virtio_net_hdr, the frame) to the ring's slot decoder: it must never
// panic or read outside the slot, and what it delivers fits the buffers
// (checked by slotFrame).
func FuzzRingSlot(f *testing.F) {
	plain := superFrame(false, make([]byte, 100), 0)
	super := superFrame(true, make([]byte, 600), 0)
	var vh [vnetHdrLen]byte
	f.Add(uint16(ringMacOff), uint16(ringMacOff+ethHdr), uint32(len(plain)), uint32(len(plain)), vh[:], plain)
	(&vnet.Hdr{GSOType: vnet.GSOUDPL4, GSOSize: 200}).Encode(vh[:])
	f.Add(uint16(ringMacOff), uint16(ringMacOff+ethHdr), uint32(len(super)), uint32(len(super)), bytes.Clone(vh[:]), super)
	(&vnet.Hdr{Flags: vnet.FlagNeedsCsum, CsumStart: 34, CsumOffset: 6}).Encode(vh[:])
	f.Add(uint16(ringMacOff), uint16(ringMacOff+ethHdr), uint32(len(plain)), uint32(len(plain)), bytes.Clone(vh[:]), plain)
	f.Add(uint16(0), uint16(0), uint32(0), uint32(0), []byte{}, []byte{})
	f.Add(uint16(1590), uint16(1604), uint32(1<<31), uint32(1<<31), vh[:], plain)
	f.Fuzz(func(t *testing.T, mac, net uint16, tlen, snap uint32, vhb, frame []byte) {
		slot := make([]byte, 1600)
		var h vnet.Hdr
		if len(vhb) >= vnetHdrLen {
			h.Decode(vhb)
		}
		fillSlot(slot, int(mac), int(net), tlen, snap, h, frame)
		slotFrame(t, slot, 1600)
	})
}
