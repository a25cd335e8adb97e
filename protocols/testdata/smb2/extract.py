#!/usr/bin/env python3
"""Extract SMB2 messages from a pcapng capture (no tshark needed).

Usage: extract.py CAPTURE.pcapng PORT OUTDIR_PREFIX
Reassembles each TCP direction (loopback/ethernet, IPv4/IPv6), splits the
NetBIOS session service framing (RFC 1002 4-byte length) and writes one line
per SMB2 message: "<dir> <frame> <hex>" where dir is C (client->server) or S.
"""
import struct, sys

def blocks(data):
    off = 0
    le = '<'
    while off + 12 <= len(data):
        btype, blen = struct.unpack_from(le + 'II', data, off)
        if btype == 0x0A0D0D0A:
            bom = data[off+8:off+12]
            le = '<' if bom == b'\x4d\x3c\x2b\x1a' else '>'
            btype, blen = struct.unpack_from(le + 'II', data, off)
        yield btype, data[off+8:off+blen-4], le
        off += blen

def packets(path):
    data = open(path, 'rb').read()
    linktypes = []
    n = 0
    for btype, body, le in blocks(data):
        if btype == 1:
            linktypes.append(struct.unpack_from(le + 'H', body, 0)[0])
        elif btype == 6:
            iface, th, tl, caplen, origlen = struct.unpack_from(le + 'IIIII', body, 0)
            n += 1
            yield n, linktypes[iface], body[20:20+caplen]

def tcp(link, pkt):
    if link == 1:
        eth = struct.unpack_from('>H', pkt, 12)[0]; ip = pkt[14:]
    elif link == 113:
        eth = struct.unpack_from('>H', pkt, 14)[0]; ip = pkt[16:]
    elif link == 276:
        eth = struct.unpack_from('>H', pkt, 0)[0]; ip = pkt[20:]
    elif link == 0:
        fam = struct.unpack_from('<I', pkt, 0)[0]; ip = pkt[4:]; eth = 0x0800 if fam == 2 else 0x86dd
    elif link == 101:
        ip = pkt; eth = 0x0800 if (pkt[0] >> 4) == 4 else 0x86dd
    else:
        return None
    if eth == 0x0800:
        ihl = (ip[0] & 15) * 4
        if ip[9] != 6: return None
        total = struct.unpack_from('>H', ip, 2)[0]
        src, dst = ip[12:16], ip[16:20]
        seg = ip[ihl:total]
    elif eth == 0x86dd:
        if ip[6] != 6: return None
        plen = struct.unpack_from('>H', ip, 4)[0]
        src, dst = ip[8:24], ip[24:40]
        seg = ip[40:40+plen]
    else:
        return None
    sport, dport, seq = struct.unpack_from('>HHI', seg, 0)
    doff = (seg[12] >> 4) * 4
    flags = seg[13]
    return (src, sport, dst, dport, seq, flags, seg[doff:])

def main():
    path, port, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    streams = {}
    lines = []
    for n, link, pkt in packets(path):
        t = tcp(link, pkt)
        if not t: continue
        src, sport, dst, dport, seq, flags, payload = t
        if port not in (sport, dport): continue
        key = (src, sport, dst, dport)
        st = streams.setdefault(key, {'next': None, 'buf': b'', 'dir': 'C' if dport == port else 'S'})
        if flags & 2:
            st['next'] = (seq + 1) & 0xffffffff; continue
        if not payload: continue
        if st['next'] is None: st['next'] = seq
        if seq != st['next']:
            # retransmission or gap: skip duplicates
            if ((st['next'] - seq) & 0xffffffff) < 0x80000000: continue
            st['buf'] = b''
        st['next'] = (seq + len(payload)) & 0xffffffff
        st['buf'] += payload
        while len(st['buf']) >= 4:
            ln = struct.unpack_from('>I', st['buf'], 0)[0] & 0xffffff
            if len(st['buf']) < 4 + ln: break
            msg = st['buf'][4:4+ln]
            st['buf'] = st['buf'][4+ln:]
            lines.append('%s %d %s' % (st['dir'], n, msg.hex()))
    open(out, 'w').write('\n'.join(lines) + '\n')

main()
