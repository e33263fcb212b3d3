"""Baseline for `rulka bench shm`: the Python original's transport.

Sends records of pickled numpy arrays (as Rulka's collectors put rollouts on a
multiprocessing.Queue) from a producer process to this process and prints the
throughput as JSON: {"record_bytes": N, "records": K, "seconds": S, "bytes_per_s": B}.

usage: bench_mp_queue.py RECORD_BYTES SECONDS
"""
import json
import multiprocessing as mp
import sys
import time

import numpy as np


def producer(q, record_bytes, stop_at):
    frame = np.random.randint(0, 255, size=record_bytes, dtype=np.uint8)
    while time.time() < stop_at:
        q.put({"frames": frame, "t": time.time()})
    q.put(None)


def main():
    record_bytes, seconds = int(sys.argv[1]), float(sys.argv[2])
    q = mp.Queue(maxsize=32)
    stop_at = time.time() + seconds
    p = mp.Process(target=producer, args=(q, record_bytes, stop_at))
    p.start()
    n, start = 0, time.perf_counter()
    while True:
        item = q.get()
        if item is None:
            break
        n += 1
    elapsed = time.perf_counter() - start
    p.join()
    print(json.dumps({"record_bytes": record_bytes, "records": n, "seconds": elapsed, "bytes_per_s": n * record_bytes / elapsed}))


if __name__ == "__main__":
    main()
