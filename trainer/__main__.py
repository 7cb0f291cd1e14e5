"""Command line:

    python -m trainer --config configs/cartpole.yaml [--set key=value ...] [--runs-dir runs | --run-dir DIR]
    python -m trainer --resume runs/<run_id> [--set total_timesteps=2_000_000]
    python -m trainer evaluate runs/<run_id>/cartpole_ppo_final.pth --episodes 100 [--gif play.gif]
    python -m trainer export runs/<run_id> --onnx agent.onnx [--with-details]
    python -m trainer serve runs/<run_id> [--host 127.0.0.1] [--port 8000] [--api-key KEY]
    python -m trainer --config configs/cartpole.yaml --nproc 2      (torch's elastic launcher)
    python -m trainer master --config cluster.yaml / worker --master HOST:54321  (docs/cluster.md)
    python -m trainer --config impala.yaml --actors 2     (a learner and 2 actors: docs/cluster.md)
    python -m trainer sweep --space sweep.yaml --trials 40 --jobs 2  (Optuna, docs/sweeps.md)
    torchrun --nproc_per_node 2 -m trainer --config configs/cartpole.yaml

Ctrl-C stops after the current update and saves a checkpoint and the final model (press it
again to abort at once). On a terminal a progress bar shows steps, FPS, mean return and ETA
beside the log lines; piped to a file, only the log lines are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
SUBCOMMANDS = """other commands (each has its own --help):
  python -m trainer evaluate MODEL.pth   play a trained model; mean and std of return and score
  python -m trainer export RUN_DIR       write the policy as ONNX (--onnx agent.onnx)
  python -m trainer serve RUN_DIR        serve the policy over HTTP (FastAPI)
  python -m trainer master --config F    host an elastic cluster run (docs/cluster.md)
  python -m trainer worker --master H:P  join a cluster run
  python -m trainer sweep --space F      tune config keys with Optuna (docs/sweeps.md)"""


def build_train_parser() -> argparse.ArgumentParser:
    from trainer.algos.registry import ALGORITHMS
    from trainer.serving.metrics_server import METRICS_KEY_ENV

    parser = argparse.ArgumentParser(
        prog="python -m trainer",
        description=f"Train an agent ({', '.join(name.upper() for name in ALGORITHMS)}) from a YAML config.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=SUBCOMMANDS,
    )
    parser.add_argument(
        "--config",
        "-c",
        help="YAML config file, e.g. configs/cartpole.yaml (a shipped config "
        "also by its bare name from any folder: cartpole.yaml)",
    )
    parser.add_argument(
        "--set",
        "-s",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value (repeatable), e.g. --set learning_rate=1e-3 --set checkpoint.interval=20",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--runs-dir", default="runs", help="folder for new run directories (default: runs)")
    where.add_argument("--run-dir", help="use exactly this run directory")
    parser.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue the run in RUN_DIR from its newest checkpoint (its config.yaml is used "
        "unless --config is given; --set still applies)",
    )
    parser.add_argument(
        "--allow-custom-envs",
        action="store_true",
        help="let --resume import a `module:Class` env or wrappers named in the run's config.yaml "
        "(a run folder is data: without this flag such code is refused)",
    )
    parser.add_argument(
        "--nproc",
        type=int,
        default=None,
        help="training processes on this machine, started through torch's elastic launcher (default: nproc_per_node)",
    )
    parser.add_argument(
        "--actors",
        type=int,
        default=None,
        help="algo impala / appo / dqn / sac: a learner and this many actor processes on this machine "
        "(default: local_actors; docs/cluster.md)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar, even on a terminal")
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics while training (rank 0; off by default)",
    )
    parser.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        help="address for --metrics-port (default 127.0.0.1: this machine only; any other "
        "address, e.g. 0.0.0.0, needs --metrics-key)",
    )
    parser.add_argument(
        "--metrics-key",
        default=os.environ.get(METRICS_KEY_ENV),
        metavar="KEY",
        help=f"scrapes must send 'Authorization: Bearer KEY' (default: ${METRICS_KEY_ENV}, "
        f"which keeps the key out of the process list)",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="print nothing but errors (train.log has it all)")
    return parser


def build_evaluate_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m trainer evaluate",
        description="Play a trained model and print the mean and std of return and score.",
    )
    parser.add_argument("model", help="a .pth written by the trainer (final model or checkpoint)")
    parser.add_argument("--episodes", "-n", type=int, default=10, help="episodes to play (default 10)")
    parser.add_argument("--gif", help="also write the first episode as an animated GIF here")
    parser.add_argument("--num-envs", type=int, default=None, help="envs played in parallel (default: up to 64)")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N or auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stochastic", action="store_true", help="sample actions instead of taking the most likely")
    parser.add_argument(
        "--max-episode-steps", type=int, default=100_000, help="cut an episode after this many steps (default 100000)"
    )
    parser.add_argument(
        "--env",
        help="the environment to play (default: the one the model was trained on, "
        "if it is a built-in or a registered Gymnasium id)",
    )
    parser.add_argument(
        "--allow-custom-envs",
        action="store_true",
        help="let a `module:Class` env or wrappers saved in the model's config be imported "
        "(a .pth is data: without this flag such code is refused)",
    )
    parser.add_argument(
        "--env-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one of the env's options for this evaluation, over those the model was trained with "
        "(repeatable; the value is read as YAML), e.g. --env-option max_steps=36024: Flappy Bird up to 1,000 pipes",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the figures as one JSON object (per-episode lists too)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "evaluate":
        return evaluate_command(argv[1:])
    if argv and argv[0] in ("export", "serve"):
        import importlib  # each one's parser and command live beside the code it runs

        return importlib.import_module(f"trainer.serving.{argv[0]}").command(argv[1:])
    if argv and argv[0] == "_rank":  # one rank of an elastic run, started by its agent: trainer/cluster/rank.py
        from trainer.cluster.rank import rank_command

        return rank_command(argv[1:])
    if argv and argv[0] in ("master", "worker"):  # the elastic cluster: trainer/cluster/commands.py
        from trainer.cluster import commands

        return getattr(commands, f"{argv[0]}_command")(argv[1:])
    if argv and argv[0] == "sweep":  # Optuna studies over the config keys: trainer/sweep/command.py
        from trainer.sweep.command import command

        return command(argv[1:])
    if argv and argv[0] == "train":
        argv = argv[1:]
    return train_command(argv)


def evaluate_command(argv: list[str]) -> int:
    args = build_evaluate_parser().parse_args(argv)
    from envs.errors import EnvError
    from trainer.config.checks import ConfigError
    from trainer.config.loading import parse_override
    from trainer.run.checkpoint import CheckpointError, load_model
    from trainer.serving.evaluate import choose_env, evaluate

    try:
        model = load_model(args.model, device=args.device)
        # Refused here with the CLI's flag in the message; evaluate() checks the same again.
        choice = choose_env(model, args.env, None, args.allow_custom_envs, args.model, "--allow-custom-envs")
        options = dict(parse_override(text, "--env-option", "max_steps=36024") for text in args.env_option)
        result = evaluate(
            model,
            episodes=args.episodes,
            num_envs=args.num_envs,
            device=args.device,
            seed=args.seed,
            deterministic=not args.stochastic,
            gif_path=args.gif,
            max_episode_steps=args.max_episode_steps,
            env_name=args.env,
            env_kwargs={**choice.kwargs, **options} if options else None,
            allow_custom_code=args.allow_custom_envs,
        )
    except (CheckpointError, ConfigError, EnvError, ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps({"model": args.model, **result.as_dict()}))
        return EXIT_OK
    print(f"model:    {args.model}")
    print(result.summary())
    return EXIT_OK


def train_command(argv: list[str]) -> int:
    parser = build_train_parser()
    args = parser.parse_args(argv)
    from trainer.config.checks import ConfigError
    from trainer.config.defaults import load_config
    from trainer.config.permissions import require_code_permission
    from trainer.config.preflight import check_run_fits, check_writable_folder
    from trainer.run import layout

    if args.metrics_port is not None:  # before any folder is made: a refused start leaves nothing behind
        from trainer.serving.bind import PublicBindError
        from trainer.serving.metrics_server import check_metrics_bind

        try:
            check_metrics_bind(args.metrics_host, args.metrics_key)
        except PublicBindError as error:
            print(f"error: {error}", file=sys.stderr)
            return EXIT_USAGE
    config_path = args.config
    if args.resume:
        run_dir = Path(args.resume)
        if not run_dir.is_dir():
            print(f"error: --resume {args.resume}: no such run directory", file=sys.stderr)
            return EXIT_USAGE
        if config_path is None:
            config_path = layout.config_path(run_dir)
            if not config_path.is_file():
                print(
                    f"error: {config_path} is missing, so the run's config is unknown; pass --config too",
                    file=sys.stderr,
                )
                return EXIT_USAGE
    elif config_path is None and not args.overrides:
        parser.print_usage(sys.stderr)
        print(
            "error: give --config FILE.yaml (e.g. configs/cartpole.yaml), --set KEY=VALUE, or --resume RUN_DIR",
            file=sys.stderr,
        )
        return EXIT_USAGE
    from trainer.config.defaults import shipped_config_file
    from trainer.run.resume import ResumeError, refuse_finished_run

    config_path = shipped_config_file(config_path)

    try:
        config = load_config(config_path, args.overrides)
        if args.nproc and args.nproc != config.ranks_per_node():  # --nproc is nproc_per_node: validated as one
            config = load_config(config_path, [*(args.overrides or []), f"nproc_per_node={args.nproc}"])
        if args.actors is not None and args.actors != config.local_actors:  # --actors is local_actors, likewise
            if args.actors < 0:
                raise ConfigError(f"--actors must be 0 or more, got {args.actors}")
            config = load_config(config_path, [*(args.overrides or []), f"local_actors={args.actors}"])
        if args.resume and args.config is None:  # the run folder's config.yaml is data, not the user's
            require_code_permission(config, args.allow_custom_envs, str(config_path), "--allow-custom-envs")
        if args.resume:  # a finished run continues only to a larger total_timesteps
            refuse_finished_run(Path(args.resume), config.total_timesteps)
        # Before any folder exists (train() would do it too, after taking the folder): a bad
        # env_kwargs key or a run too big for this machine leaves nothing behind.
        for warning in check_run_fits(config):  # a run that starts, but likely not as meant
            print(f"warning: {warning}", file=sys.stderr)
        if not args.resume:
            check_writable_folder(Path(args.run_dir or args.runs_dir), "--run-dir" if args.run_dir else "--runs-dir")
    except (ConfigError, ResumeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE

    if config.local_actors:  # a learner and actor processes: trainer/cluster/learner.py
        from trainer.cluster.learner import launch_actor_learner_here

        try:
            return launch_actor_learner_here(config, args, config.local_actors)
        except ConfigError as error:
            print(f"error: {error}", file=sys.stderr)
            return EXIT_USAGE
    from trainer.cluster.launch import launch_here, launched_by_elastic, ranks_wanted

    if ranks_wanted(config, args.nproc) > 1 and not launched_by_elastic():
        return launch_here(config, args, ranks_wanted(config, args.nproc))
    from trainer.run.layout import create_run_dir
    from trainer.run.loop import train
    from trainer.run.owner import RunOwnedError
    from trainer.run.ranks import continues_its_run, setup_distributed, shutdown_distributed
    from trainer.run.setup import device_type

    context = setup_distributed(config.backend, device_type(config))
    is_main = context is None or context.is_main
    if args.resume:
        run_dir = Path(args.resume).resolve()
    elif args.run_dir:
        run_dir = Path(args.run_dir).resolve()
    else:
        run_dir = create_run_dir(config, args.runs_dir) if is_main else None
    if context is not None:
        run_dir = Path(context.broadcast_value(str(run_dir)))

    sinks = []
    if is_main and not args.quiet:
        from trainer.run.sinks import LogSink, ProgressBarSink

        if sys.stdout.isatty() and not args.no_progress:
            sinks.append(ProgressBarSink(total=config.total_timesteps, log_interval=config.log_interval))
        else:
            sinks.append(LogSink(stream=sys.stdout, log_interval=config.log_interval, timestamps=False))
    metrics_server = None
    if is_main and args.metrics_port is not None:
        from trainer.serving.metrics_server import serve_trainer_metrics

        try:
            metrics_sink, metrics_server = serve_trainer_metrics(
                args.metrics_port, args.metrics_host, run_dir.parent, args.metrics_key
            )
        except (OSError, OverflowError, ValueError) as error:
            print(f"error: {error}", file=sys.stderr)
            return EXIT_USAGE
        sinks.append(metrics_sink)
    from trainer.cluster.signals import StopRequest

    stop = StopRequest()
    stop.install_signals()
    try:
        # torchrun / a restarted PyTorchJob pod reruns the same command: continue the run (distributed.py).
        resume = bool(args.resume) or (
            bool(args.run_dir) and "TORCHELASTIC_RUN_ID" in os.environ and continues_its_run(context, run_dir, config)
        )
        result = train(config, run_dir, sinks=sinks, should_stop=stop, resume=resume, preflight=False)
    except (ConfigError, ResumeError, RunOwnedError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("aborted", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 - reported as an event and in train.log already
        from trainer.run.storage import failure_message

        print(
            f"error: training failed: {failure_message(error, run_dir)} (details in {layout.log_path(run_dir)})",
            file=sys.stderr,
        )
        return EXIT_FAILED
    finally:
        if context is not None:
            shutdown_distributed()
        if metrics_server is not None:
            metrics_server.close()
    if is_main and not args.quiet and result.final_model is not None:
        print(f"Run directory: {result.run_dir}")
        print(
            f"Use the model:  from trainer import load_model; "
            f"model = load_model({str(result.final_model)!r}); action, _ = model.predict(obs)"
        )
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
