"""A Ray driver for `launcher: ray`: checks that the Ray cluster hpclaunch started has the
allocation's CPUs, then runs tasks that report which nodes they ran on.

    python ray_hosts.py [EXPECTED_CPUS]     (RAY_ADDRESS is set by hpclaunch)

Exit 0 if the cluster has EXPECTED_CPUS CPUs (when given) and tasks ran on every node, else 3.
"""
import socket
import sys
import time

import ray


@ray.remote(num_cpus=1)
def where(_):
    time.sleep(0.5)  # long enough that one node cannot run every task
    return socket.gethostname()


def main() -> int:
    ray.init()  # RAY_ADDRESS: the job's own cluster
    cpus = ray.cluster_resources().get("CPU", 0)
    nodes = sum(1 for n in ray.nodes() if n["Alive"])
    hosts = sorted(set(ray.get([where.remote(i) for i in range(4 * int(cpus or 1))])))
    print(f"cpus {cpus:g} nodes {nodes} hosts {' '.join(hosts)} driver {socket.gethostname()}", flush=True)
    want = float(sys.argv[1]) if len(sys.argv) > 1 else cpus
    return 0 if cpus == want and len(hosts) == nodes else 3


if __name__ == "__main__":
    sys.exit(main())
