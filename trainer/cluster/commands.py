"""The cluster's commands: `python -m trainer master` and `python -m trainer worker`, their
argument parsers and what they do before handing this machine's ranks to the elastic launcher
(trainer/cluster/launch.py: `host_run` for the master, `run_agent` for a worker).

    python -m trainer master --config cluster.yaml [--host 192.168.1.100] [--port 54321] [--token T]
    python -m trainer worker --master 192.168.1.100:54321 [--token T] [--nproc 2]

With `algo: impala`, `appo`, `dqn` or `sac` the master runs an actor-learner run instead (trainer/cluster/learner.py):
one learner, `--actors N` local actors, and workers that join with `--role actor`.
"""

from __future__ import annotations

import argparse
import sys

from trainer.cluster.admission import RefusedError, request_admission, resolve_token
from trainer.cluster.launch import (
    ENCRYPTION_NOTE,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    config_from_setup,
    custom_code_line,
    host_run,
    ranks_wanted,
    run_agent,
    run_dir_for,
    signal_name,
)
from trainer.cluster.learner import MODE, host_actor_learner, join_as_actor, learns_from_actors, require_actor_learner
from trainer.cluster.nodes import (
    DEFAULT_PORT,
    connect_store,
    local_address,
    parse_endpoint,
    split_cluster_file,
    start_heartbeat,
)
from trainer.config.checks import ConfigError


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
    parser.add_argument(
        "--actors",
        type=int,
        default=0,
        help="algo impala / appo / dqn / sac: actor processes started on this machine beside the learner (default 0)",
    )
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
        if args.actors < 0:
            raise ConfigError(f"--actors must be 0 or more, got {args.actors}")
        actors = args.actors or config.local_actors  # the flag, else the config's key
        if actors or learns_from_actors(config):
            require_actor_learner(config, "--actors")
            return host_actor_learner(
                config,
                run_dir_for(config, args.resume, args.run_dir, args.runs_dir),
                host,
                port,
                args.token,
                actors,
                cluster.notes,
                allow_custom_envs=args.allow_custom_envs,
                store_port=args.store_port,
            )
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
        "--role",
        choices=("ranks", "actor"),
        default="ranks",
        help="ranks: training processes of a synchronous run (default); actor: play for an actor-learner "
        "run's learner (algo impala / appo / dqn / sac)",
    )
    parser.add_argument(
        "--allow-custom-envs",
        action="store_true",
        help="let the master's config import a `module:Class` env or wrappers on this machine",
    )
    return parser


def worker_command(argv: list[str]) -> int:
    args = build_worker_parser().parse_args(argv)
    if args.role == "actor":
        return join_as_actor(args.master, args.token, args.allow_custom_envs)
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
        if run.get("mode") == MODE:
            raise ConfigError(f"the master at {host}:{port} runs an actor-learner run: join it with --role actor")
        config = config_from_setup(
            run["config"], args.allow_custom_envs, f"the master at {host}:{port}", "--allow-custom-envs on the worker"
        )
        store_host, store_port = parse_endpoint(run["store"], "the run's store")
        start_heartbeat(connect_store(store_host, store_port), run["run_id"], node)
        print(f"Joining the run at {host}:{port} ({ranks_wanted(config, args.nproc)} processes)", flush=True)
        print(custom_code_line(args.allow_custom_envs, "--allow-custom-envs"), flush=True)
        print(f"note: {ENCRYPTION_NOTE}", flush=True)
        run_agent(
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
            f"worker: stopped by {signal_name(error)}; the master carries on without this machine "
            f"(start the worker again to rejoin at the next re-formation)",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    print("worker: the run has finished")
    return EXIT_OK
