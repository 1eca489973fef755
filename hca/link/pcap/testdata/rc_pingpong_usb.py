# Builds rc_pingpong_usb.pcapng from the kernel rxe capture rc_pingpong.pcap
# (shared/captures): its 33 Ethernet records on interface 0, with a USB
# (LINKTYPE_USB_LINUX, 189) record on interface 1 after records 2, 6, ..., 30
# and a BSD loopback (LINKTYPE_NULL, 0) record on interface 2 after records
# 11 and 21; 43 records, which tshark 4.0 reads as 20 InfiniBand, 8 USB and
# 2 ICMP frames, nothing malformed. Run from this folder:
#   python3 rc_pingpong_usb.py ../../../../../shared/captures/rc_pingpong.pcap rc_pingpong_usb.pcapng
import struct, sys
src, dst = sys.argv[1], sys.argv[2]
data = open(src, 'rb').read()
assert struct.unpack('<I', data[:4])[0] == 0xA1B2C3D4
recs, off = [], 24
while off < len(data):
    sec, usec, incl, orig = struct.unpack('<IIII', data[off:off+16])
    recs.append((sec * 1000000 + usec, data[off+16:off+16+incl], orig))
    off += 16 + incl
def block(typ, body):
    body += b'\0' * (-len(body) % 4)
    n = 12 + len(body)
    return struct.pack('<II', typ, n) + body + struct.pack('<I', n)
def idb(lt, snap=262144):
    return block(1, struct.pack('<HHI', lt, 0, snap))
def epb(iface, ts, frame, orig=None):
    orig = len(frame) if orig is None else orig
    return block(6, struct.pack('<IIIII', iface, ts >> 32, ts & 0xFFFFFFFF, len(frame), orig) + frame)
def usb(n, ts):
    # struct usbmon_packet (48 bytes, host order) of a bulk IN completion
    # carrying 8 bytes, then the 8 bytes.
    hdr = struct.pack('<QBBBBHBBqiiII8s', 0xffff8881_0000_0000 + n, ord('C'), 3, 0x81, 2, 1, ord('-'), 0,
                      ts // 1000000, ts % 1000000, 0, 8, 8, b'\0' * 8)
    assert len(hdr) == 48
    return hdr + bytes(range(n, n + 8))
def null(ts):
    # AF_INET in host order, then an IPv4 ICMP echo request 10.0.0.1 -> 10.0.0.2.
    icmp = b'\x08\x00\xf7\xfe\x00\x01\x00\x00' + b'\0' * 0
    ip = struct.pack('>BBHHHBBH4s4s', 0x45, 0, 20 + len(icmp), 1, 0, 64, 1, 0, bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
    s = sum(struct.unpack('>10H', ip))
    s = (s & 0xFFFF) + (s >> 16)
    ip = ip[:10] + struct.pack('>H', ~s & 0xFFFF) + ip[12:]
    return struct.pack('<I', 2) + ip + icmp
shb = block(0x0A0D0D0A, struct.pack('<IHHq', 0x1A2B3C4D, 1, 0, -1))
out = [shb, idb(1), idb(189), idb(0)]
for i, (ts, frame, orig) in enumerate(recs):
    out.append(epb(0, ts, frame, orig))
    if i % 4 == 1:
        out.append(epb(1, ts + 1, usb(i, ts + 1)))
    if i in (10, 20):
        out.append(epb(2, ts + 2, null(ts + 2)))
open(dst, 'wb').write(b''.join(out))
