"""What one socket read costs at each buffer size: why the served simulators' channel reads 64 KiB at a time.

    python benchmarks/recv_size.py [--calls 20000] [--bytes 3400]

A message of ``--bytes`` (a 4-environment Meta-World ``steps`` answer is ~3.4 KB) is sent over a Unix socket pair
and read back with ``recv(size)`` for each size, in alternating rounds; prints the CPU time of a send and its reads,
median over the rounds, and each size's time over 64 KiB's. CPython's ``recv(size)`` allocates ``size`` bytes for
every call (a buffer that large may be a fresh mapping from glibc each time; this script does not trace that).
"""

from __future__ import annotations

import argparse
import socket
import statistics
import time

SIZES = (1 << 13, 1 << 16, 1 << 17, 1 << 20)


def per_call(size: int, message: bytes, calls: int) -> float:
    a, b = socket.socketpair()
    try:
        started = time.process_time()
        for _ in range(calls):
            a.sendall(message)
            got = 0
            while got < len(message):
                got += len(b.recv(size))
        return (time.process_time() - started) / calls * 1e6
    finally:
        a.close()
        b.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--bytes", type=int, default=3400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    message = b"x" * args.bytes
    times: dict[int, list[float]] = {size: [] for size in SIZES}
    for round_ in range(args.rounds):
        for size in SIZES if round_ % 2 == 0 else reversed(SIZES):
            times[size].append(per_call(size, message, args.calls))
    base = statistics.median(times[1 << 16])
    print(f"`python benchmarks/recv_size.py --calls {args.calls} --bytes {args.bytes} --rounds {args.rounds}`\n")
    print("| read size | CPU µs a send and its reads (median) | / 64 KiB's |\n|---:|---:|---:|")
    for size, values in times.items():
        print(f"| {size // 1024} KiB | {statistics.median(values):.2f} | {statistics.median(values) / base:.2f} |")


if __name__ == "__main__":
    main()
