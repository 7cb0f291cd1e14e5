"""Starting ranks through torch's elastic launcher (what `torchrun` runs): one machine with
`--nproc`, and the guide's cluster with `python -m trainer master` / `worker` (their commands:
trainer/cluster/commands.py; a rank's entry, `python -m trainer _rank`: trainer/cluster/rank.py).

    python -m trainer --config configs/cartpole.yaml --nproc 4
    python -m trainer master --config cluster.yaml [--host 192.168.1.100] [--port 54321] [--token T]
    python -m trainer worker --master 192.168.1.100:54321 [--token T] [--nproc 2]

The master process serves the admission gate on its port (trainer/cluster/admission.py: the token is
proved both ways before anything of the run is shared), hosts the c10d store on the next port
and runs an elastic agent for its own ranks; each worker, once admitted, runs an agent that
joins the same signed rendezvous (trainer/cluster/rendezvous.py). Every rank is `python -m trainer
_rank` (trainer/cluster/rank.py), told its run by its own agent through RANK_SETUP_ENV, never by
the network. The ranks on the master's machine write the run folder (trainer/run/ranks.py, `main_rank`).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from trainer.cluster.admission import AdmissionGate, resolve_token
from trainer.cluster.nodes import NodeMonitor, host_store, pin_collectives_to, start_heartbeat
from trainer.config.checks import ConfigError
from trainer.config.keys import TrainConfig
from trainer.run.layout import log_path
from trainer.run.ranks import WRITER_ENV

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
RANK_SETUP_ENV = "RL_STUDIO_RANK"  # what a node's agent tells its own ranks (never read from the network)
ENCRYPTION_NOTE = (
    "traffic between nodes is not encrypted: this torch build's gloo has no TLS transport "
    "(GLOO_DEVICE_TRANSPORT=TCP_TLS fails with 'unsupported gloo device'); run the cluster on a "
    "private network or through a WireGuard / SSH tunnel (docs/cluster.md)"
)
RENDEZVOUS_TIMEOUTS = {"join_timeout": 600, "last_call_timeout": 2, "close_timeout": 10, "heartbeat": 5}


def launched_by_elastic() -> bool:
    """This process is already a rank (torchrun, or our own launcher)."""
    return "TORCHELASTIC_RUN_ID" in os.environ or int(os.environ.get("WORLD_SIZE", "1")) > 1


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def ranks_wanted(config, nproc: int | None) -> int:
    """--nproc, else the config's (`TrainConfig.ranks_per_node`; `config` may be any object with
    nproc_per_node and gpu_ids, as the studio's launcher passes)."""
    return nproc or TrainConfig.ranks_per_node(config)


def custom_code_line(allowed: bool, flag: str) -> str:
    """Each node says what it decided, on its own: the network never decides what code runs."""
    if allowed:
        return f"note: custom code (module:Class envs, wrappers) allowed on this machine by {flag}"
    return f"note: custom code (module:Class envs, wrappers) not allowed on this machine (it takes {flag})"


def run_agent(config, nproc: int, run_id: str, store: str, token: str, node_address: str, setup: dict, say) -> None:
    """One elastic agent on this machine, through the signed c10d rendezvous at `store`. Its ranks
    read `setup` (the config, the run folder, the custom-code permission) from this process's
    environment: nothing they run comes from the network."""
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    from trainer.cluster.rendezvous import register_signed_rendezvous

    backend = register_signed_rendezvous(token, say)
    # A fresh bootstrap store for every rendezvous round. torch's default shares one TCPStore
    # across rounds without a per-round prefix, so after a re-formation a new rank can read the
    # dead rank's gloo address and fail ("connectFullMesh ... Connection refused"), burning an
    # extra restart or hanging the round; every agent of the run must agree, so all set it here.
    os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    os.environ[RANK_SETUP_ENV] = json.dumps({**setup, "store": store, "run_id": run_id})
    pin_collectives_to(node_address)
    launch = LaunchConfig(
        min_nodes=config.min_nodes,
        max_nodes=config.max_nodes,
        nproc_per_node=nproc,
        run_id=run_id,
        rdzv_backend=backend,
        rdzv_endpoint=store,
        rdzv_configs={"is_host": False, **RENDEZVOUS_TIMEOUTS},
        max_restarts=config.max_restarts,
        monitor_interval=0.5,
        local_addr=node_address,
        start_method="spawn",
    )
    try:
        elastic_launch(launch, sys.executable)("-m", "trainer", "_rank")
    finally:
        os.environ.pop(RANK_SETUP_ENV, None)


def host_run(
    config,
    run_dir: Path,
    host: str,
    port: int,
    token: str | None,
    nproc: int,
    notes: list[str] = (),
    say=print,
    allow_custom_envs: bool = False,
    store_port: int | None = None,
    flag: str = "--allow-custom-envs",
) -> int:
    """Serve the admission gate on host:port and the store on host:store_port, run this
    machine's ranks, watch the nodes; the master command, `--nproc` and the studio end here."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous import RendezvousError

    from trainer.config.loading import to_yaml
    from trainer.serving.http_server import ServerHandle

    token = resolve_token(token, generate=True)
    run_id = secrets.token_hex(16)  # the rendezvous id: the secret name of every key of the run
    store_port = store_port or (port + 1 if port else free_port(host))
    store = host_store(host, store_port)
    config_yaml = to_yaml(config)
    monitor = NodeMonitor(store, run_id, run_dir, config.min_nodes, config.max_nodes, say, f"{host}:{port}")
    run = {"config": config_yaml, "run_id": run_id, "store": f"{host}:{store_port}", "run_dir": str(run_dir)}

    def admit(request: dict, address: str) -> str | None:
        return monitor.admit({**request, "nproc": request["nproc"] or ranks_wanted(config, None)}, address)

    gate = ServerHandle(
        AdmissionGate(token, run, admit, say).app(),
        host,
        port,
        what="the master",
        error_type=ConfigError,
        port_flag="--port",
        host_flag="--host",
    )
    port = gate.port
    monitor.master_address = f"{host}:{port}"
    for note in notes:
        say(f"note: {note}")
    say(custom_code_line(allow_custom_envs, flag))
    if config.max_nodes > 1:
        say(
            f"Master listening on {host}:{port} (the run's store on port {store_port}): start workers with "
            f"`python -m trainer worker --master {host}:{port} --token {token}` (or RL_STUDIO_TOKEN={token})"
        )
        say(f"note: {ENCRYPTION_NOTE}")
    node = f"{host}/{os.getpid()}/master"
    monitor.admit({"node": node, "hostname": socket.gethostname(), "nproc": nproc}, host)
    start_heartbeat(store, run_id, node)
    monitor.start()
    os.environ[WRITER_ENV] = "1"  # inherited by this machine's ranks only: they write the run folder
    try:
        run_agent(
            config,
            nproc,
            run_id,
            f"{host}:{store_port}",
            token,
            host,
            {"config": config_yaml, "run_dir": str(run_dir), "allow_custom_envs": allow_custom_envs},
            say,
        )
    except ChildFailedError as error:
        say(
            f"error: training failed after {config.max_restarts} restarts: {str(error).strip()[:2000]} "
            f"(details in {log_path(run_dir)})"
        )
        return EXIT_FAILED
    except RendezvousError as error:
        say(f"error: {error}")
        return EXIT_FAILED
    except (SignalException, KeyboardInterrupt) as error:
        say(
            f"master: stopped by {signal_name(error)}; continue the run later with `python -m trainer master "
            f"--config ... --resume {run_dir}`"
        )
        return EXIT_INTERRUPTED
    finally:
        os.environ.pop(WRITER_ENV, None)
        monitor.stop()
        gate.stop()
    say(f"Run directory: {run_dir}")
    return EXIT_OK


def run_dir_for(config, resume: str | None, run_dir: str | None, runs_dir: str) -> Path:
    from trainer.run.layout import create_run_dir

    if resume:
        return Path(resume).resolve()
    if run_dir:
        return Path(run_dir).resolve()
    return create_run_dir(config, runs_dir).resolve()


def launch_here(config, args: argparse.Namespace, nproc: int) -> int:
    """`python -m trainer ... --nproc N`: N ranks on this machine, one node."""
    import dataclasses

    config = dataclasses.replace(config, min_nodes=1, max_nodes=1, nproc_per_node=nproc)
    return host_here(host_run, config, args, nproc)


def host_here(host: Callable[..., int], config, args: argparse.Namespace, processes: int) -> int:
    """Run `host` (`host_run`, or trainer/cluster/learner.py's `host_actor_learner`) for `config`
    with `processes` local processes, on a free loopback port, without a token (nothing else can join)."""
    run_dir = run_dir_for(config, args.resume, args.run_dir, args.runs_dir)
    quiet = getattr(args, "quiet", False)
    return host(
        config,
        run_dir,
        "127.0.0.1",
        free_port(),
        None,
        processes,
        say=(lambda line: None) if quiet else print,
        allow_custom_envs=bool(getattr(args, "allow_custom_envs", False)),
    )


def config_from_setup(config_yaml: str, allow_custom_code: bool, source: str, flag: str):
    """The run's config, refused if it names code this machine's user did not allow."""
    from trainer.config.permissions import require_code_permission
    from trainer.config.safe_yaml import load_yaml_text
    from trainer.config.validation import config_from_dict

    config = config_from_dict(load_yaml_text(config_yaml, source))
    require_code_permission(config, allow_custom_code, source, flag)
    return config


def signal_name(error: BaseException) -> str:
    sigval = getattr(error, "sigval", None)
    return sigval.name if sigval is not None else "Ctrl-C"
