"""Starting ranks through torch's elastic launcher (what `torchrun` runs): one machine with
`--nproc`, and the guide's cluster with `python -m trainer master` / `worker`.

    python -m trainer --config configs/cartpole.yaml --nproc 4
    python -m trainer master --config cluster.yaml [--host 192.168.1.100] [--port 54321] [--token T]
    python -m trainer worker --master 192.168.1.100:54321 [--token T] [--nproc 2]

The master process serves the admission gate on its port (trainer/cluster/admission.py: the token is
proved both ways before anything of the run is shared), hosts the c10d store on the next port
and runs an elastic agent for its own ranks; each worker, once admitted, runs an agent that
joins the same signed rendezvous (trainer/cluster/rendezvous.py). Every rank is `python -m trainer
_rank`: it takes the run's config, folder and custom-code permission from its own agent's
environment (RANK_SETUP_ENV), never from the network, joins the process group, resumes from the
newest checkpoint when the run already has one (an elastic restart or re-formation) and trains.
The ranks on the master's machine write the run folder (trainer/run/ranks.py, `main_rank`).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import sys
from pathlib import Path

from trainer.cluster.admission import AdmissionGate, RefusedError, request_admission, resolve_token
from trainer.cluster.nodes import (
    DEFAULT_PORT,
    NodeMonitor,
    connect_store,
    host_store,
    local_address,
    parse_endpoint,
    pin_collectives_to,
    run_key,
    split_cluster_file,
    start_heartbeat,
)
from trainer.config.checks import ConfigError
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
    """--nproc, else `nproc_per_node`, else one rank per listed GPU (`gpu_ids`)."""
    if nproc:
        return nproc
    if config.nproc_per_node > 1 or not config.gpu_ids:
        return config.nproc_per_node
    return len(config.gpu_ids)


def custom_code_line(allowed: bool, flag: str) -> str:
    """Each node says what it decided, on its own: the network never decides what code runs."""
    if allowed:
        return f"note: custom code (module:Class envs, wrappers) allowed on this machine by {flag}"
    return f"note: custom code (module:Class envs, wrappers) not allowed on this machine (it takes {flag})"


def _launch(config, nproc: int, run_id: str, store: str, token: str, node_address: str, setup: dict, say) -> None:
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
        _launch(
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
            f"master: stopped by {_signal_name(error)}; continue the run later with `python -m trainer master "
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
    run_dir = run_dir_for(config, args.resume, args.run_dir, args.runs_dir)
    quiet = getattr(args, "quiet", False)
    return host_run(
        config,
        run_dir,
        "127.0.0.1",
        free_port(),
        None,
        nproc,
        say=(lambda line: None) if quiet else print,
        allow_custom_envs=bool(getattr(args, "allow_custom_envs", False)),
    )


# ---------------------------------------------------------------------------------------------
# Commands


def build_master_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m trainer master", description="Host an elastic training run that workers on other machines join."
    )
    parser.add_argument(
        "--config",
        "-c",
        required=True,
        help="YAML: training keys plus the guide's master / workers / communication sections",
    )
    parser.add_argument(
        "--set",
        "-s",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set min_nodes=2 --set max_nodes=4",
    )
    parser.add_argument("--host", help="address to listen on (default: master.host of the file, else 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, help=f"the admission port workers are given (default: master.port, else {DEFAULT_PORT})"
    )
    parser.add_argument(
        "--store-port",
        type=int,
        help="port of the run's c10d store, which admitted workers are told (default: --port + 1)",
    )
    parser.add_argument(
        "--token",
        help="the run's token, at least 20 random characters (default: RL_STUDIO_TOKEN, "
        "else a new random 128-bit one, printed)",
    )
    parser.add_argument("--nproc", type=int, help="ranks on this machine (default: nproc_per_node)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--runs-dir", default="runs", help="folder for new run directories (default: runs)")
    where.add_argument("--run-dir", help="use exactly this run directory")
    where.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its newest checkpoint")
    parser.add_argument(
        "--allow-custom-envs", action="store_true", help="let the config import a `module:Class` env or wrappers"
    )
    return parser


def master_command(argv: list[str]) -> int:
    args = build_master_parser().parse_args(argv)
    from trainer.config.defaults import shipped_config_file
    from trainer.config.loading import merge_settings, parse_override, read_yaml_mapping
    from trainer.config.permissions import require_code_permission
    from trainer.config.preflight import check_run_fits
    from trainer.config.validation import config_from_dict

    try:
        raw = read_yaml_mapping(shipped_config_file(args.config))
        train_raw, cluster = split_cluster_file(raw)
        overrides = dict(parse_override(text) for text in args.overrides)
        if cluster.workers and "max_nodes" not in train_raw and "max_nodes" not in overrides:
            overrides["max_nodes"] = max(1 + len(cluster.workers), int(train_raw.get("min_nodes", 1)))
        config = config_from_dict(merge_settings(train_raw, overrides))
        require_code_permission(config, args.allow_custom_envs, args.config, "--allow-custom-envs")
        check_run_fits(config)
        host = args.host or cluster.host or "127.0.0.1"
        port = args.port or cluster.port
        resolve_token(args.token, generate=False)  # a weak token is refused before anything starts
        run_dir = run_dir_for(config, args.resume, args.run_dir, args.runs_dir)
        return host_run(
            config,
            run_dir,
            host,
            port,
            args.token,
            ranks_wanted(config, args.nproc),
            cluster.notes,
            allow_custom_envs=args.allow_custom_envs,
            store_port=args.store_port,
        )
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE


def build_worker_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m trainer worker", description="Join a master's elastic training run (its config comes from it)."
    )
    parser.add_argument(
        "--master", required=True, help=f"HOST:PORT of `python -m trainer master` (port default {DEFAULT_PORT})"
    )
    parser.add_argument("--token", help="the run's token (default: RL_STUDIO_TOKEN)")
    parser.add_argument("--nproc", type=int, help="ranks on this machine (default: the run's nproc_per_node)")
    parser.add_argument(
        "--allow-custom-envs",
        action="store_true",
        help="let the master's config import a `module:Class` env or wrappers on this machine",
    )
    return parser


def worker_command(argv: list[str]) -> int:
    args = build_worker_parser().parse_args(argv)
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous import RendezvousError

    try:
        host, port = parse_endpoint(args.master)
        token = resolve_token(args.token, generate=False)
        if token is None:
            raise ConfigError(
                "a worker needs the run's token: --token TOKEN or RL_STUDIO_TOKEN (the master printed "
                "it when it started)"
            )
        node_address = local_address(host, port)
        node, run = request_admission(f"{host}:{port}", token, node_address, args.nproc or 0)
        config = config_from_setup(
            run["config"], args.allow_custom_envs, f"the master at {host}:{port}", "--allow-custom-envs on the worker"
        )
        store_host, store_port = parse_endpoint(run["store"], "the run's store")
        start_heartbeat(connect_store(store_host, store_port), run["run_id"], node)
        print(f"Joining the run at {host}:{port} ({ranks_wanted(config, args.nproc)} processes)", flush=True)
        print(custom_code_line(args.allow_custom_envs, "--allow-custom-envs"), flush=True)
        print(f"note: {ENCRYPTION_NOTE}", flush=True)
        _launch(
            config,
            ranks_wanted(config, args.nproc),
            run["run_id"],
            run["store"],
            token,
            node_address,
            {"config": run["config"], "run_dir": run["run_dir"], "allow_custom_envs": args.allow_custom_envs},
            print,
        )
    except (ConfigError, RefusedError, RendezvousError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except ChildFailedError as error:
        print(f"error: this worker's ranks failed: {str(error).strip()[:2000]}", file=sys.stderr)
        return EXIT_FAILED
    except (SignalException, KeyboardInterrupt) as error:
        print(
            f"worker: stopped by {_signal_name(error)}; the master carries on without this machine "
            f"(start the worker again to rejoin at the next re-formation)",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    print("worker: the run has finished")
    return EXIT_OK


def config_from_setup(config_yaml: str, allow_custom_code: bool, source: str, flag: str):
    """The run's config, refused if it names code this machine's user did not allow."""
    from trainer.config.permissions import require_code_permission
    from trainer.config.safe_yaml import load_yaml_text
    from trainer.config.validation import config_from_dict

    config = config_from_dict(load_yaml_text(config_yaml, source))
    require_code_permission(config, allow_custom_code, source, flag)
    return config


def formation_line(formation: int, world_size: int, restart: int, max_restarts: int, resume: bool) -> str:
    """What the master's log says each time the ranks (re-)form. The formation count is the
    run's own (the writer adds one in the store each time): whichever agent noticed a failure
    first, only it counts a restart (`max_restarts` is per agent), while an agent that sees a
    node waiting re-forms without counting one, so the agent's count alone can read 0."""
    if formation == 1:
        return f"world: {world_size} ranks{', resuming the run in its folder' if resume else ''}"
    return (
        f"Re-formed (formation {formation}): world {world_size} ranks"
        f"{', resuming from the newest checkpoint' if resume else ', starting again: no checkpoint yet'}; "
        f"this machine's restarts: {restart} of {max_restarts}"
    )


def rank_command(argv: list[str]) -> int:
    """One rank, started by an elastic agent (never by hand)."""
    argparse.ArgumentParser(
        prog="python -m trainer _rank", description=f"takes everything from {RANK_SETUP_ENV}, set by its agent"
    ).parse_args(argv)
    from trainer.run.events import LogSink
    from trainer.run.loop import train
    from trainer.run.ranks import continues_its_run, setup_distributed, shutdown_distributed
    from trainer.run.setup import device_type

    setup = json.loads(os.environ[RANK_SETUP_ENV])
    config = config_from_setup(
        setup["config"], setup["allow_custom_envs"], "the run's config", "--allow-custom-envs on this machine"
    )
    run_dir = Path(setup["run_dir"])
    store = connect_store(*parse_endpoint(setup["store"], "the run's store"))
    context = setup_distributed(config.backend, device_type(config))  # None in a world of one rank
    resume = continues_its_run(context, run_dir, config)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    sinks = []
    if context is None or context.is_main:
        sinks.append(LogSink(stream=sys.stdout, log_interval=config.log_interval, timestamps=False))
        print(
            formation_line(
                store.add(run_key(setup["run_id"], "formations"), 1),
                context.world_size if context else 1,
                restart,
                config.max_restarts,
                resume,
            ),
            flush=True,
        )
    from trainer.cluster.signals import StopRequest

    stop = StopRequest()  # the agent forwards SIGTERM / SIGINT: the ranks agree to stop after this update
    stop.install_signals()
    stop.watch_parent()  # and an agent that dies without a word (kill -9) stops them too
    try:
        train(config, run_dir, sinks=sinks, should_stop=stop, resume=resume, preflight=False)
    except KeyboardInterrupt:  # a second Ctrl-C: abort at once; the agent reports it
        return EXIT_INTERRUPTED
    except RuntimeError as error:
        if not _a_peer_left(error):
            raise
        # A rank or machine left: its agent, or ours, re-forms the ranks; one line is enough
        # (the writer's train.log has the traceback).
        print(
            f"rank {os.environ.get('RANK', '?')}: a peer left ({str(error).splitlines()[0][:300]}); the elastic "
            f"agents re-form the ranks",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_FAILED
    finally:
        shutdown_distributed()
    return EXIT_OK


def _a_peer_left(error: RuntimeError) -> bool:
    """A collective failed because another rank is gone (gloo / nccl say so in these words)."""
    text = str(error)
    return any(
        words in text
        for words in (
            "Connection closed by peer",
            "Connection reset by peer",
            "Connection refused",
            "Broken pipe",
            "Timed out waiting",
            "timed out",
            "NCCL communicator was aborted",
        )
    )


def _signal_name(error: BaseException) -> str:
    sigval = getattr(error, "sigval", None)
    return sigval.name if sigval is not None else "Ctrl-C"
