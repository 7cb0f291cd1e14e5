"""The cluster's shared state: the guide's cluster file, the c10d store, the node table.

The master process hosts the TCPStore that torch's c10d rendezvous uses, bound to the one
address it is given, on the store port (the master port + 1 unless told otherwise). Nothing of
the run is readable there without its rendezvous id: every key we write, and torch's own
rendezvous state, is named after it, and the admission gate on the master port
(trainer/cluster/admission.py) hands it out only to nodes that proved the token. The rendezvous state
itself is signed (trainer/cluster/rendezvous.py).

The master's `NodeMonitor` thread registers the admitted nodes, watches each node's heartbeat,
logs `Worker connected` / `Worker lost` / `Worker back` and keeps `<run_dir>/nodes.json` (the
studio's node table) up to date with atomic writes.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from trainer.config.checks import ConfigError, short_repr
from trainer.run.files import atomic_write
from trainer.run.layout import events_path, nodes_path

DEFAULT_PORT = 54321
CLUSTER_SECTIONS = ("master", "workers", "communication")
HEARTBEAT_SECONDS = 2.0
LOST_AFTER_SECONDS = 10.0
KEY = "rl_studio/"  # every key we add to the rendezvous store starts with this, then the run's id


# ---------------------------------------------------------------------------------------------
# The guide's cluster file: training keys plus master / workers / communication


@dataclass
class ClusterFile:
    host: str | None = None
    port: int = DEFAULT_PORT
    workers: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # keys that mean nothing here, said once each


def split_cluster_file(raw: dict) -> tuple[dict, ClusterFile]:
    """(the training keys, the cluster sections) of a master's YAML mapping. Keys of the guide's
    sections that have no meaning here earn a note, never an error; a bad host or port is one."""
    train = {name: value for name, value in raw.items() if name not in CLUSTER_SECTIONS}
    cluster = ClusterFile()
    master = _section(raw, "master")
    if "host" in master:
        if not isinstance(master["host"], str) or not master["host"].strip():
            raise ConfigError(
                f'master.host must be an address such as "192.168.1.100", got {short_repr(master["host"])}'
            )
        cluster.host = master["host"].strip()
    if "port" in master:
        cluster.port = parse_port(master["port"], "master.port")
    cluster.notes += [
        f"master.{name}: not a setting here (master takes host and port); ignored"
        for name in master
        if name not in ("host", "port")
    ]
    workers = raw.get("workers") or []
    if not isinstance(workers, list):
        raise ConfigError(f"workers must be a list such as [{{host: 192.168.1.101}}], got {short_repr(workers)}")
    for item in workers:
        host = item.get("host") if isinstance(item, dict) else item
        if not isinstance(host, str):
            raise ConfigError(f'workers: each entry needs a host, e.g. - host: "192.168.1.101"; got {short_repr(item)}')
        cluster.workers.append(host)
    if cluster.workers:
        cluster.notes.append(
            f"workers: {', '.join(cluster.workers)} are not contacted by the master; start the "
            f"worker command below on each of them"
        )
    communication = _section(raw, "communication")
    meaning = {
        "protocol": "ranks talk through torch.distributed (gloo on CPU, nccl on GPUs), not {value}",
        "batch_size": "the batch per rank is num_envs x num_steps, not {value}",
    }
    cluster.notes += [
        f"communication.{name}: {meaning.get(name, 'not a setting here ({value})').format(value=value)}; ignored"
        for name, value in communication.items()
    ]
    return train, cluster


def _section(raw: dict, name: str) -> dict:
    value = raw.get(name) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"{name} must be a mapping (e.g. {name}: {{host: ..., port: ...}}), got {short_repr(value)}")
    return value


def parse_port(value: Any, name: str) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, str))
        or not str(value).isdigit()
        or not 1 <= int(value) <= 65535
    ):
        raise ConfigError(
            f"{name} must be a TCP port between 1 and 65535 (the guide uses 54321), got {short_repr(value)}"
        )
    return int(value)


def parse_endpoint(text: str, name: str = "--master") -> tuple[str, int]:
    """'192.168.1.100:54321' -> ('192.168.1.100', 54321); the port defaults to 54321."""
    host, _, port = str(text).rpartition(":") if ":" in str(text) else (str(text), "", str(DEFAULT_PORT))
    if not host:
        raise ConfigError(f"{name} expects HOST:PORT, e.g. 192.168.1.100:{DEFAULT_PORT}; got {short_repr(text)}")
    return host.strip("[]"), parse_port(port, name)


# ---------------------------------------------------------------------------------------------
# The store


def run_key(run_id: str, name: str) -> str:
    """A key of the run in the c10d store: under its secret rendezvous id, so unreadable to outsiders."""
    return f"{KEY}{run_id}/{name}"


def host_store(host: str, port: int):
    """The rendezvous TCPStore, served by this process on exactly `host`:`port` (the socket is
    bound here and handed to the store, so it listens on no other address)."""
    from torch.distributed import TCPStore

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as error:
        listener.close()
        raise ConfigError(
            f"cannot listen on {host}:{port} ({error.strerror}); give an address of this machine "
            f"with --host and free ports with --port / --store-port"
        ) from None
    listener.listen(128)
    listener.set_inheritable(False)
    store = TCPStore(
        host,
        port,
        is_master=True,
        wait_for_workers=False,
        timeout=timedelta(seconds=60),
        master_listen_fd=listener.detach(),
        use_libuv=True,
    )
    return store


def connect_store(host: str, port: int, timeout: float = 60.0):
    from torch.distributed import TCPStore

    try:
        return TCPStore(host, port, is_master=False, timeout=timedelta(seconds=timeout))
    except (RuntimeError, OSError) as error:
        raise ConfigError(
            f"cannot reach the run's store at {host}:{port} ({str(error).splitlines()[0][:200]}); is "
            f"its port open on the master?"
        ) from None


def local_address(master_host: str, master_port: int) -> str:
    """This machine's address on the route to the master (what the master's log calls the node)."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in master_host else socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((master_host, master_port))
            return probe.getsockname()[0]
    except OSError:
        return socket.gethostname()


def interface_of(address: str) -> str | None:
    """The name of this machine's network interface that holds `address` (None if none does)."""
    import psutil

    bare = address.split("%")[0]
    for name, addresses in psutil.net_if_addrs().items():
        if any(item.address.split("%")[0] == bare for item in addresses):
            return name
    return None


def pin_collectives_to(address: str) -> str | None:
    """Make gloo (and nccl's bootstrap) use the interface that reaches the master. By default gloo
    takes the address the host name resolves to, often 127.0.1.1 (Debian's /etc/hosts) or a
    container's own: the ranks then advertise an address the other machines cannot reach, and
    every formation fails with "connectFullMesh ... Connection refused". A GLOO_SOCKET_IFNAME /
    NCCL_SOCKET_IFNAME the user set wins. Returns the interface chosen (None: left alone)."""
    interface = interface_of(address)
    if interface is not None:
        for variable in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            os.environ.setdefault(variable, interface)
    return interface


def start_heartbeat(store, run_id: str, node_id: str) -> threading.Thread:
    """Tell the master's NodeMonitor every HEARTBEAT_SECONDS that this node lives."""

    def beat() -> None:
        while True:
            try:
                store.set(run_key(run_id, f"alive/{node_id}"), str(time.time()))
            except Exception:  # noqa: BLE001 - the master is gone: the agent finds out by itself
                return
            time.sleep(HEARTBEAT_SECONDS)

    thread = threading.Thread(target=beat, name="rl-studio-heartbeat", daemon=True)
    thread.start()
    return thread


# ---------------------------------------------------------------------------------------------
# The master's view of the nodes


@dataclass
class Node:
    node: str
    host: str
    hostname: str
    nproc: int
    since: float
    last_beat: float
    lost: bool = False
    beat: str = ""  # the last heartbeat value seen (a change is a beat: no trust in clocks)


class NodeMonitor:
    """Runs in the master process beside its agent: registers the nodes the admission gate
    admitted (trainer/cluster/admission.py), watches their heartbeats in the store, logs connected /
    lost / back lines and writes nodes.json."""

    def __init__(
        self,
        store,
        run_id: str,
        run_dir: Path,
        min_nodes: int,
        max_nodes: int,
        log: Callable[[str], None],
        master_address: str,
    ):
        self.store, self.run_id, self.run_dir = store, run_id, run_dir
        self.min_nodes, self.max_nodes, self.log = min_nodes, max_nodes, log
        self.master_address = master_address
        self.nodes: dict[str, Node] = {}
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rl-studio-nodes", daemon=True)

    def start(self) -> NodeMonitor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.poll()
        self.write_table(finished=True)

    def say(self, line: str) -> None:
        self.lines = (self.lines + [time.strftime("%Y-%m-%d %H:%M:%S ") + line])[-200:]
        self.log(line)

    def live(self) -> list[Node]:
        return [node for node in self.nodes.values() if not node.lost]

    def admit(self, request: dict, address: str) -> str | None:
        """A node that proved the token (the gate's callback): None, or why it cannot join."""
        with self._lock:
            if len(self.live()) >= self.max_nodes:
                self.say(
                    f"Worker refused: {address} (the run already has {self.max_nodes} of max_nodes "
                    f"{self.max_nodes} nodes)"
                )
                return (
                    f"the run already has its max_nodes ({self.max_nodes}) nodes; start the worker again when "
                    f"one leaves, or raise max_nodes on the master"
                )
            now = time.time()
            self.nodes[request["node"]] = Node(
                request["node"], address, request["hostname"][:100], int(request["nproc"]), now, now
            )
            self.say(
                f"Worker connected: {address} ({request['nproc']} processes); "
                f"{len(self.live())} of {self.min_nodes}..{self.max_nodes} nodes"
            )
            return None

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.poll()
                self.write_table()
            except Exception as error:  # noqa: BLE001 - the table must never stop training
                self.log(f"node table: {type(error).__name__}: {error}")

    def poll(self) -> None:
        """Heartbeats: a node silent for LOST_AFTER_SECONDS is lost; one that beats again
        (SIGSTOP then SIGCONT, a network hiccup) is back."""
        now = time.time()
        with self._lock:
            for node in self.nodes.values():
                key = run_key(self.run_id, f"alive/{node.node}")
                beat = self.store.get(key).decode(errors="replace")[:64] if self.store.check([key]) else ""
                if beat != node.beat:
                    node.beat, node.last_beat = beat, now
                    if node.lost:
                        node.lost = False
                        self.say(
                            f"Worker back: {node.host} (heartbeats again); {len(self.live())} of "
                            f"{self.min_nodes}..{self.max_nodes} nodes"
                        )
                elif not node.lost and now - node.last_beat > LOST_AFTER_SECONDS:
                    node.lost = True
                    self.say(f"Worker lost: {node.host}")

    def write_table(self, finished: bool = False) -> None:
        if not self.run_dir.is_dir():
            return
        fps = _last_fps(events_path(self.run_dir))
        live = self.live()
        world = sum(node.nproc for node in live)
        rows = [
            {
                "host": node.host,
                "hostname": node.hostname,
                "ranks": node.nproc,
                "steps_per_second": round(fps * node.nproc / world, 1) if fps and world else None,
                "connected_since": node.since,
                "lost": node.lost,
            }
            for node in self.nodes.values()
        ]
        atomic_write(
            nodes_path(self.run_dir),
            json.dumps(
                {
                    "master": self.master_address,
                    "world_size": world,
                    "nodes": rows,
                    "log": self.lines,
                    "min_nodes": self.min_nodes,
                    "max_nodes": self.max_nodes,
                    "finished": finished,
                    "updated": time.time(),
                },
                indent=1,
            ),
        )


def write_actor_table(run_dir: Path, master: str, actors: list[dict], learner: dict, log: list[str], finished: bool):
    """The node table of an actor-learner run (trainer/cluster/learner_hub.py keeps it): one row per
    actor ({"role": "actor", "actor", "host", "hostname", "steps_per_second", "policy_lag",
    "batches", "connected_since", "lost"}) and the learner's {"queue_depth", "dropped_batches", "actors"}."""
    if run_dir.is_dir():
        table = {"master": master, "world_size": 1, "nodes": actors, "learner": learner, "log": log}
        table.update(min_nodes=1, max_nodes=1, finished=finished, updated=time.time())
        atomic_write(nodes_path(run_dir), json.dumps(table, indent=1))


def _last_fps(metrics: Path) -> float | None:
    """The newest `fps` in metrics.jsonl (read from the end: the file grows all run long)."""
    try:
        with open(metrics, "rb") as handle:
            handle.seek(max(0, handle.seek(0, 2) - 8192))
            lines = handle.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("type") == "metrics" and event.get("fps") is not None:
            return float(event["fps"])
    return None


def read_nodes(run_dir: str | Path) -> dict | None:
    """The node table a master keeps in a run folder (None for a run without one)."""
    try:
        return json.loads(nodes_path(run_dir).read_text())
    except (OSError, ValueError):
        return None
