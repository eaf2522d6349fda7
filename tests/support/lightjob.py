"""A light stand-in for a training script (no TensorFlow): serves its task port like a TF server.

Used by the lab tests that exercise orchestration (launch order, ports, stop, restart) where
TensorFlow's 4 s import would only add time. It reads its role from TF_CONFIG or the classic
flags exactly as a real trainer does, binds its port on all interfaces, logs steps, and:
ps tasks serve forever (like `server.join()`), workers/chief finish after `--steps` steps unless
`--forever`. `--fail-at-start N` exits N immediately (for rollback tests). `--listen-delay S`
waits S seconds before binding its port (tasks of the types in `--delay-types`, default all), like
a real server importing TensorFlow: the window the interrupt tests aim at. `--log-lines N`
prints N numbered lines of about 100 bytes at start (a chatty task, for the log cap's test).
`--end-file F`: a worker or chief finishes at its next step once the file F (relative to its
working directory) exists, so a test ends the job the moment it has seen what it waits for.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time


def role(args: argparse.Namespace) -> tuple[str, int, str | None]:
    if args.job_name:
        hosts = {"ps": args.ps_hosts, "worker": args.worker_hosts}[args.job_name].split(",")
        return args.job_name, args.task_index, hosts[args.task_index]
    cfg = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task = cfg.get("task", {"type": "worker", "index": 0})
    addrs = cfg.get("cluster", {}).get(task["type"])
    return task["type"], task["index"], addrs[task["index"]] if addrs else None


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ps_hosts", default="")
    p.add_argument("--worker_hosts", default="")
    p.add_argument("--job_name", default="")
    p.add_argument("--task_index", type=int, default=0)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--step_s", type=float, default=0.2)
    p.add_argument("--forever", action="store_true")
    p.add_argument("--fail-at-start", type=int, default=0)
    p.add_argument("--fail-task", default="")
    p.add_argument("--listen-delay", type=float, default=0.0)
    p.add_argument("--delay-types", default="ps,worker,chief,evaluator")
    p.add_argument("--log-lines", type=int, default=0)
    p.add_argument("--end-file", default="")
    args, _ = p.parse_known_args()
    kind, index, addr = role(args)
    me = f"{kind}:{index}"
    print(f"{me} starting, argv={sys.argv[1:]}", flush=True)
    for n in range(1, args.log_lines + 1):
        print(f"{me} line {n:07d} {'x' * 80}")
    sys.stdout.flush()
    if args.fail_at_start and (not args.fail_task or args.fail_task == me):
        print(f"{me}: failing at start on purpose", file=sys.stderr, flush=True)
        return args.fail_at_start
    if args.listen_delay and kind in args.delay_types.split(","):
        print(f"{me} waiting {args.listen_delay:g} s before listening", flush=True)
        time.sleep(args.listen_delay)
    server = None
    if addr:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC servers do
        server.bind(("0.0.0.0", int(addr.rsplit(":", 1)[1])))
        server.listen()
    if kind == "ps" or args.forever:
        while True:
            time.sleep(1)
    for step in range(1, args.steps + 1):
        if args.end_file and os.path.exists(args.end_file):
            break
        time.sleep(args.step_s)
        print(f"step {step} loss={1.0 / step:.4f} steps_per_sec={1 / args.step_s:.1f}",
              flush=True)
    print(f"{me} done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
