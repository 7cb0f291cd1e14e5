"""Starting ranks through torch's elastic launcher (what `torchrun` runs): one machine with
`--nproc`, and the guide's cluster with `python -m trainer master` / `worker`.

    python -m trainer --config configs/cartpole.yaml --nproc 4
    python -m trainer master --config cluster.yaml [--host 192.168.1.100] [--port 54321] [--token T]
    python -m trainer worker --master 192.168.1.100:54321 [--token T] [--nproc 2]

The master process hosts the c10d rendezvous store (trainer/cluster.py) and runs an elastic
agent for its own ranks; each worker runs an agent that joins the same rendezvous. Every rank is
`python -m trainer _rank --store HOST:PORT`: it reads the run's config and folder from the
master's store, joins the process group, resumes from the newest checkpoint when the run
already has one (an elastic restart or re-formation) and trains. The ranks on the master's
machine write the run folder (trainer/distributed.py, `main_rank`).
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
import uuid
from pathlib import Path

from trainer.checks import ConfigError
from trainer.cluster import (DEFAULT_PORT, KEY, NodeMonitor, RefusedError, connect_store, host_store, local_address,
                             parse_endpoint, pin_collectives_to, publish_run, register_guarded_rendezvous,
                             resolve_token, split_cluster_file, store_get)
from trainer.distributed import WRITER_ENV

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
ENCRYPTION_NOTE = ("traffic between nodes is not encrypted: this torch build's gloo has no TLS transport "
                   "(GLOO_DEVICE_TRANSPORT=TCP_TLS fails with 'unsupported gloo device'); run the cluster on a "
                   "private network or through a WireGuard / SSH tunnel (docs/readme/cluster.md)")
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


def _launch(entry_args: list[str], nproc: int, min_nodes: int, max_nodes: int, max_restarts: int, run_id: str,
            store_host: str, port: int, token: str, node_address: str) -> None:
    """One elastic agent on this machine, through the token-checking c10d rendezvous."""
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    backend = register_guarded_rendezvous(token, node_address, nproc)
    # A fresh bootstrap store for every rendezvous round. torch's default shares one TCPStore
    # across rounds without a per-round prefix, so after a re-formation a new rank can read the
    # dead rank's gloo address and fail ("connectFullMesh ... Connection refused"), burning an
    # extra restart or hanging the round; every agent of the run must agree, so all set it here.
    os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    pin_collectives_to(node_address)
    config = LaunchConfig(min_nodes=min_nodes, max_nodes=max_nodes, nproc_per_node=nproc, run_id=run_id,
                          rdzv_backend=backend, rdzv_endpoint=f"{store_host}:{port}",
                          rdzv_configs={"is_host": False, **RENDEZVOUS_TIMEOUTS}, max_restarts=max_restarts,
                          monitor_interval=0.5, local_addr=node_address, start_method="spawn")
    elastic_launch(config, sys.executable)("-m", "trainer", "_rank", "--store", f"{store_host}:{port}", *entry_args)


def host_run(config, run_dir: Path, host: str, port: int, token: str | None, nproc: int,
             notes: list[str] = (), say=print) -> int:
    """Serve the rendezvous on host:port, run this machine's ranks, watch the nodes; the master
    command and `--nproc` both end here."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous import RendezvousError

    from trainer.config import to_yaml

    token = resolve_token(token, generate=True)
    store = host_store(host, port)
    publish_run(store, to_yaml(config), run_dir, f"rl-studio-{uuid.uuid4().hex[:12]}", token)
    for note in notes:
        say(f"note: {note}")
    if config.max_nodes > 1:
        say(f"Master listening on {host}:{port}: start workers with `python -m trainer worker --master "
            f"{host}:{port} --token {token}` (or RL_STUDIO_TOKEN={token})")
        say(f"note: {ENCRYPTION_NOTE}")
    monitor = NodeMonitor(store, token, run_dir, config.min_nodes, config.max_nodes, say, f"{host}:{port}").start()
    os.environ[WRITER_ENV] = "1"     # inherited by this machine's ranks only: they write the run folder
    try:
        _launch([], nproc, config.min_nodes, config.max_nodes, config.max_restarts, store_get(store, "run_id"),
                host, port, token, host)
    except ChildFailedError as error:
        say(f"error: training failed after {config.max_restarts} restarts: {str(error).strip()[:2000]} "
            f"(details in {run_dir / 'train.log'})")
        return EXIT_FAILED
    except RendezvousError as error:
        say(f"error: {error}")
        return EXIT_FAILED
    except (SignalException, KeyboardInterrupt) as error:
        say(f"master: stopped by {_signal_name(error)}; continue the run later with `python -m trainer master "
            f"--config ... --resume {run_dir}`")
        return EXIT_INTERRUPTED
    finally:
        os.environ.pop(WRITER_ENV, None)
        monitor.stop()
    say(f"Run directory: {run_dir}")
    return EXIT_OK


def run_dir_for(config, resume: str | None, run_dir: str | None, runs_dir: str) -> Path:
    from trainer.run_dir import create_run_dir

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
    return host_run(config, run_dir, "127.0.0.1", free_port(), None, nproc,
                    say=(lambda line: None) if quiet else print)


# ---------------------------------------------------------------------------------------------
# Commands


def build_master_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trainer master",
                                     description="Host an elastic training run that workers on other machines join.")
    parser.add_argument("--config", "-c", required=True,
                        help="YAML: training keys plus the guide's master / workers / communication sections")
    parser.add_argument("--set", "-s", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set min_nodes=2 --set max_nodes=4")
    parser.add_argument("--host", help="address to listen on (default: master.host of the file, else 127.0.0.1)")
    parser.add_argument("--port", type=int, help=f"port to listen on (default: master.port, else {DEFAULT_PORT})")
    parser.add_argument("--token", help="the run's token (default: RL_STUDIO_TOKEN, else a new random one, printed)")
    parser.add_argument("--nproc", type=int, help="ranks on this machine (default: nproc_per_node)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--runs-dir", default="runs", help="folder for new run directories (default: runs)")
    where.add_argument("--run-dir", help="use exactly this run directory")
    where.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its newest checkpoint")
    parser.add_argument("--allow-custom-envs", action="store_true",
                        help="let the config import a `module:Class` env or wrappers")
    return parser


def master_command(argv: list[str]) -> int:
    args = build_master_parser().parse_args(argv)
    from trainer.__main__ import shipped_config_file
    from trainer.config import (config_from_dict, merge_settings, parse_override, read_yaml_mapping,
                                require_code_permission)
    from trainer.preflight import check_run_fits

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
        run_dir = run_dir_for(config, args.resume, args.run_dir, args.runs_dir)
        return host_run(config, run_dir, host, port, args.token, ranks_wanted(config, args.nproc), cluster.notes)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE


def build_worker_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m trainer worker",
                                     description="Join a master's elastic training run (its config comes from it).")
    parser.add_argument("--master", required=True, help=f"HOST:PORT of `python -m trainer master` (port "
                                                        f"default {DEFAULT_PORT})")
    parser.add_argument("--token", help="the run's token (default: RL_STUDIO_TOKEN)")
    parser.add_argument("--nproc", type=int, help="ranks on this machine (default: the run's nproc_per_node)")
    parser.add_argument("--allow-custom-envs", action="store_true",
                        help="let the master's config import a `module:Class` env or wrappers on this machine")
    return parser


def worker_command(argv: list[str]) -> int:
    args = build_worker_parser().parse_args(argv)
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous import RendezvousError

    try:
        host, port = parse_endpoint(args.master)
        config = _config_from_store(connect_store(host, port), f"the master at {host}:{port}",
                                    args.allow_custom_envs)
        token = resolve_token(args.token, generate=False)
        extra = ["--allow-custom-envs"] if args.allow_custom_envs else []
        print(f"Joining the run at {host}:{port} ({ranks_wanted(config, args.nproc)} processes)", flush=True)
        print(f"note: {ENCRYPTION_NOTE}", flush=True)
        _launch(extra, ranks_wanted(config, args.nproc), config.min_nodes, config.max_nodes, config.max_restarts,
                store_get(connect_store(host, port), "run_id"), host, port, token or "", local_address(host, port))
    except (ConfigError, RefusedError, RendezvousError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except ChildFailedError as error:
        print(f"error: this worker's ranks failed: {str(error).strip()[:2000]}", file=sys.stderr)
        return EXIT_FAILED
    except (SignalException, KeyboardInterrupt) as error:
        print(f"worker: stopped by {_signal_name(error)}; the master carries on without this machine "
              f"(start the worker again to rejoin at the next re-formation)", file=sys.stderr)
        return EXIT_INTERRUPTED
    print("worker: the run has finished")
    return EXIT_OK


def _config_from_store(store, source: str, allow_custom_code: bool):
    from trainer.config import config_from_dict, require_code_permission
    from trainer.safe_yaml import load_yaml_text

    config = config_from_dict(load_yaml_text(store_get(store, "config"), source))
    require_code_permission(config, allow_custom_code, source, "--allow-custom-envs on the worker")
    return config


def formation_line(formation: int, world_size: int, restart: int, max_restarts: int, resume: bool) -> str:
    """What the master's log says each time the ranks (re-)form. The formation count is the
    run's own (the writer adds one in the store each time): whichever agent noticed a failure
    first, only it counts a restart (`max_restarts` is per agent), while an agent that sees a
    node waiting re-forms without counting one, so the agent's count alone can read 0."""
    if formation == 1:
        return f"world: {world_size} ranks{', resuming the run in its folder' if resume else ''}"
    return (f"Re-formed (formation {formation}): world {world_size} ranks"
            f"{', resuming from the newest checkpoint' if resume else ', starting again: no checkpoint yet'}; "
            f"this machine's restarts: {restart} of {max_restarts}")


def rank_command(argv: list[str]) -> int:
    """One rank, started by an elastic agent (never by hand)."""
    parser = argparse.ArgumentParser(prog="python -m trainer _rank")
    parser.add_argument("--store", required=True)
    parser.add_argument("--allow-custom-envs", action="store_true")
    args = parser.parse_args(argv)
    from trainer.distributed import continues_its_run, setup_distributed, shutdown_distributed
    from trainer.events import LogSink
    from trainer.loop import train
    from trainer.setup import device_type

    host, port = parse_endpoint(args.store, "--store")
    store = connect_store(host, port)
    writer = os.environ.get(WRITER_ENV) == "1"
    config = _config_from_store(store, f"the master at {host}:{port}", writer or args.allow_custom_envs)
    run_dir = Path(store_get(store, "run_dir"))
    context = setup_distributed(config.backend, device_type(config))   # None in a world of one rank
    resume = continues_its_run(context, run_dir, config)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    sinks = []
    if context is None or context.is_main:
        sinks.append(LogSink(stream=sys.stdout, log_interval=config.log_interval, timestamps=False))
        print(formation_line(store.add(KEY + "formations", 1), context.world_size if context else 1, restart,
                             config.max_restarts, resume), flush=True)
    from trainer.signals import StopRequest

    stop = StopRequest()   # the agent forwards SIGTERM / SIGINT: the ranks agree to stop after this update
    stop.install_signals()
    stop.watch_parent()    # and an agent that dies without a word (kill -9) stops them too
    try:
        train(config, run_dir, sinks=sinks, should_stop=stop, resume=resume, preflight=False)
    except KeyboardInterrupt:   # a second Ctrl-C: abort at once; the agent reports it
        return EXIT_INTERRUPTED
    except RuntimeError as error:
        if not _a_peer_left(error):
            raise
        # A rank or machine left: its agent, or ours, re-forms the ranks; one line is enough
        # (the writer's train.log has the traceback).
        print(f"rank {os.environ.get('RANK', '?')}: a peer left ({str(error).splitlines()[0][:300]}); the elastic "
              f"agents re-form the ranks", file=sys.stderr, flush=True)
        return EXIT_FAILED
    finally:
        shutdown_distributed()
    return EXIT_OK


def _a_peer_left(error: RuntimeError) -> bool:
    """A collective failed because another rank is gone (gloo / nccl say so in these words)."""
    text = str(error)
    return any(words in text for words in ("Connection closed by peer", "Connection reset by peer",
                                           "Connection refused", "Broken pipe", "Timed out waiting",
                                           "timed out", "NCCL communicator was aborted"))


def _signal_name(error: BaseException) -> str:
    sigval = getattr(error, "sigval", None)
    return sigval.name if sigval is not None else "Ctrl-C"

