#!/usr/bin/env python3
"""The restart herd's plain-TCP floor: the CPU a sender spends writing the
herd's bytes (by default 200 connections x 12,609,608 bytes, what 200
subscribers of 10,000 ConfigMaps of 1 KiB receive as object JSON) to
loopback connections in 1 MiB sendall calls, with a reader in another
process. Prints the sender's user and system CPU. Add the cost of
encrypting the same bytes (`openssl speed -evp aes-128-gcm`) for the TLS
floor; BENCHMARKS.md ("The herd encoded once") has both.
"""
import os
import resource
import selectors
import socket
import sys

CONNECTIONS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
PER_CONNECTION = int(sys.argv[2]) if len(sys.argv) > 2 else 12_609_608
CHUNK = 1 << 20


def reader(port):
    sel = selectors.DefaultSelector()
    for _ in range(CONNECTIONS):
        s = socket.create_connection(("127.0.0.1", port))
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    left = CONNECTIONS
    while left:
        for key, _ in sel.select():
            if not key.fileobj.recv(1 << 20):
                sel.unregister(key.fileobj)
                key.fileobj.close()
                left -= 1


def main():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(CONNECTIONS)
    port = listener.getsockname()[1]
    child = os.fork()
    if child == 0:
        reader(port)
        os._exit(0)
    conns = [listener.accept()[0] for _ in range(CONNECTIONS)]
    payload = b"x" * CHUNK
    before = resource.getrusage(resource.RUSAGE_SELF)
    for conn in conns:
        sent = 0
        while sent < PER_CONNECTION:
            n = min(CHUNK, PER_CONNECTION - sent)
            conn.sendall(payload[:n])
            sent += n
        conn.close()
    after = resource.getrusage(resource.RUSAGE_SELF)
    os.waitpid(child, 0)
    user = after.ru_utime - before.ru_utime
    system = after.ru_stime - before.ru_stime
    total = CONNECTIONS * PER_CONNECTION
    print(f"{total} bytes to {CONNECTIONS} connections: sender CPU {user + system:.2f} s "
          f"(user {user:.2f}, system {system:.2f}), {(user + system) / total * 1e9:.3f} ns a byte")


main()
