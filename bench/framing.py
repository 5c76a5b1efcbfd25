"""The Kafka listener's receive path alone: requests per second through one connection, by
frame size, and what idle connections and connections that announced a big frame and sent
nothing more cost the broker's memory.

    .venv/bin/python bench/framing.py [--seconds S] [--connections N] [--announcers A]

A KafkaServer runs in this process (uvloop), answering ApiVersions; requests are ApiVersions v0
padded with trailing bytes (ignored by the broker) to each size. A client process pipelines them
on one connection, at most 64 unanswered (the broker's in-flight bound), for S seconds per size,
and the rate is printed. Then N connections that send nothing, and N that send a size prefix
announcing 100 MB (A of them: a broker that allocates what is announced needs A x 100 MB): the
server process's RSS after each, less before, divided by their number. Run it with
another checkout's `src` first on PYTHONPATH to compare; figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import struct
import subprocess
import sys
import time

import uvloop

from replog.net.server import KafkaServer
from replog.obs import BrokerMetrics

SIZES = (40, 1000, 16_000, 250_000, 1_000_000)  # not multiples of the 64 KiB a read takes
IN_FLIGHT = 64
MAX_REQUEST_BYTES = 100 * 1024 * 1024

CLIENT = r"""
import socket, struct, sys, time
port, size, in_flight = (int(arg) for arg in sys.argv[1:4])
seconds = float(sys.argv[4])
body = struct.pack(">hhih", 18, 0, 1, 4) + b"test"
body += bytes(size - 4 - len(body))
frame = struct.pack(">i", len(body)) + body
connection = socket.create_connection(("127.0.0.1", port))
connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
received = bytearray()
def read_answers(count):
    global received
    while count:
        while len(received) < 4 or len(received) < 4 + struct.unpack_from(">i", received)[0]:
            received += connection.recv(1 << 20)
        size = struct.unpack_from(">i", received)[0]
        del received[:4 + size]
        count -= 1
sent = answered = 0
deadline = time.perf_counter() + seconds
started = time.perf_counter()
while time.perf_counter() < deadline:
    burst = in_flight - (sent - answered)
    connection.sendall(frame * burst)
    sent += burst
    read_answers(in_flight // 2)
    answered += in_flight // 2
read_answers(sent - answered)
print(sent / (time.perf_counter() - started))
"""


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


async def requests_per_second(port: int, size: int, seconds: float) -> float:
    client = await asyncio.create_subprocess_exec(sys.executable, "-c", CLIENT, str(port), str(size), str(IN_FLIGHT),
                                                  str(seconds), stdout=subprocess.PIPE)
    out, _ = await client.communicate()
    return float(out)


async def memory_per_connection(server: KafkaServer, count: int, first_bytes: bytes) -> float:
    before = rss_bytes()
    connections = []

    def connect() -> None:
        for _ in range(count):
            connection = socket.create_connection(("127.0.0.1", server.port))
            if first_bytes:
                connection.sendall(first_bytes)
            connections.append(connection)

    await asyncio.to_thread(connect)
    deadline = time.monotonic() + 60
    while server.connection_count < count and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)  # the prefixes read (the loop is otherwise idle)
    grown = rss_bytes() - before
    for connection in connections:
        connection.close()
    while server.connection_count and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return grown / count


async def main(seconds: float, connections: int, announcers: int) -> None:
    server = KafkaServer(None, "127.0.0.1", 0, max_request_bytes=MAX_REQUEST_BYTES, metrics=BrokerMetrics())
    await server.start()
    try:
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; replog from {os.path.dirname(sys.modules['replog'].__file__)}")
        for size in SIZES:
            rate = await requests_per_second(server.port, size, seconds)
            print(f"frames of {size:>8} bytes, {IN_FLIGHT} in flight: {rate:>9.0f} requests/s, "
                  f"{rate * size / 1e6:>8.1f} MB/s")
        idle = await memory_per_connection(server, connections, b"")
        print(f"{connections} idle connections: {idle / 1024:.1f} KiB of RSS each")
        announced = await memory_per_connection(server, announcers, struct.pack(">i", MAX_REQUEST_BYTES))
        print(f"{announcers} connections that sent only a prefix announcing {MAX_REQUEST_BYTES >> 20} MiB: "
              f"{announced / 1024:.1f} KiB of RSS each")
    finally:
        await server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--announcers", type=int, default=200)
    arguments = parser.parse_args()
    uvloop.run(main(arguments.seconds, arguments.connections, arguments.announcers))
