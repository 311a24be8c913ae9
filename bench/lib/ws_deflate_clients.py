"""Opens N WebSocket connections that negotiate permessage-deflate (offered as browsers do,
with context takeover), sends one compressed message on each, reads its echo or broadcast,
then holds them all open for HOLD seconds.

Usage: python3 bench/lib/ws_deflate_clients.py PORT PATH N HOLD
PATH may contain {i}, replaced by the connection's number (a room of its own per client).
"""
import os
import socket
import sys
import time
import zlib

PORT, PATH, N, HOLD = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
MESSAGE = b'{"type":"message","text":"hello everyone in this room, how are you today?"}' * 3


def frame(opcode, payload):
    """A final client frame with RSV1 (compressed), masked."""
    mask = os.urandom(4)
    head = bytes([0x80 | 0x40 | opcode])
    n = len(payload)
    head += bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def connect(i):
    s = socket.create_connection(("127.0.0.1", PORT))
    s.sendall(
        f"GET {PATH.replace('{i}', str(i))} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n".encode()
    )
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        byte = s.recv(1)
        if not byte:
            sys.exit(f"connection {i} closed during the handshake: {head!r}")
        head += byte
    if not head.startswith(b"HTTP/1.1 101"):
        sys.exit(f"connection {i} refused: {head!r}")
    z = zlib.compressobj(6, zlib.DEFLATED, -15)
    data = z.compress(MESSAGE) + z.flush(zlib.Z_SYNC_FLUSH)
    s.sendall(frame(1, data[:-4]))
    return s


conns = [connect(i) for i in range(N)]
for i, s in enumerate(conns):
    s.settimeout(10)
    if not s.recv(65536):
        sys.exit(f"connection {i} closed instead of answering its message")
print(f"{N} connections open, each sent one compressed message", flush=True)
time.sleep(HOLD)
