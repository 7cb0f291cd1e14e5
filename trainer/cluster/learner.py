"""The master of an actor-learner run: the admission gate and the run's store (as for the
synchronous cluster, trainer/cluster/launch.py), one learner process that trains with the actors'
batches, `--actors N` local actor processes, and the learner's restarts.

    python -m trainer master --config impala.yaml [--actors 2]      # algo: impala, appo, dqn or sac
    python -m trainer --config impala.yaml --actors 2               # one machine
    python -m trainer worker --master HOST:54321 --role actor       # more actors, anywhere

The learner (`learner_process`, a spawned process) runs the one training loop with a LearnerHub
(trainer/cluster/learner_hub.py) as its experience source; each start is a new generation in the
store, which actors (trainer/cluster/actor.py) watch to reconnect. A learner that dies is started
again from its newest checkpoint, up to `max_restarts` times; actors and the gate stay up.
"""

from __future__ import annotations

import multiprocessing
import os
import secrets
import signal
import sys
from pathlib import Path

from trainer.cluster.admission import AdmissionGate, RefusedError, request_admission, resolve_token
from trainer.cluster.launch import (
    ENCRYPTION_NOTE,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    config_from_setup,
    custom_code_line,
    free_port,
)
from trainer.cluster.nodes import connect_store, host_store, local_address, parse_endpoint, pin_collectives_to, run_key
from trainer.config.checks import ConfigError

MODE = "actor-learner"  # the run's `mode` the gate hands out (absent: the synchronous cluster)
ACTORS_STOP_SECONDS = 15.0


def learns_from_actors(config) -> bool:
    """The config's algorithm takes actors' batches: its metrics report the experience source's
    queue (trainer/algos/impala_settings.py SOURCE_METRICS: IMPALA and APPO; DQN and SAC fed
    Ape-X style, trainer/algos/replay_feed.py)."""
    from trainer.config.algorithm_keys import ALGORITHM_TABLE

    entry = ALGORITHM_TABLE.get(config.algo)
    return entry is not None and entry.actors


def require_actor_learner(config, flag: str) -> None:
    if not learns_from_actors(config):
        from trainer.config.algorithm_keys import actor_algorithms

        raise ConfigError(
            f"{flag}: algo {config.algo} learns from its own rollouts; actors feed algo "
            f"{', '.join(actor_algorithms())} (--set algo=impala), or train on several processes with --nproc"
        )


def host_actor_learner(
    config,
    run_dir: Path,
    host: str,
    port: int,
    token: str | None,
    actors: int,
    notes: list[str] = (),
    say=print,
    allow_custom_envs: bool = False,
    store_port: int | None = None,
) -> int:
    """Serve the gate and the store, start `actors` local actors, run the learner (restarted from
    its newest checkpoint after a crash, up to max_restarts times) until the run ends."""
    from trainer.config.loading import to_yaml
    from trainer.serving.http_server import ServerHandle

    token = resolve_token(token, generate=True)
    run_id = secrets.token_hex(16)
    store_port = store_port or (port + 1 if port else free_port(host))
    store = host_store(host, store_port)
    config_yaml = to_yaml(config)
    run = {"config": config_yaml, "run_id": run_id, "store": f"{host}:{store_port}", "run_dir": str(run_dir)}
    run["mode"] = MODE
    gate = ServerHandle(
        AdmissionGate(token, run, lambda request, address: None, say).app(),
        host,
        port,
        what="the master",
        error_type=ConfigError,
        port_flag="--port",
        host_flag="--host",
    )
    master = f"{host}:{gate.port}"
    for note in notes:
        say(f"note: {note}")
    say(custom_code_line(allow_custom_envs, "--allow-custom-envs"))
    say(
        f"Learner's master listening on {master}: start actors with `python -m trainer worker --master "
        f"{master} --role actor --token {token}` (or RL_STUDIO_TOKEN={token})"
    )
    say(f"note: {ENCRYPTION_NOTE}")
    spawn = multiprocessing.get_context("spawn")
    setup = {"config": config_yaml, "run_id": run_id, "store": run["store"], "run_dir": str(run_dir)}
    setup.update(master=master, host=host, allow_custom_envs=allow_custom_envs)
    local = [
        spawn.Process(target=local_actor, args=(master, token, allow_custom_envs), name=f"actor-{n + 1}")
        for n in range(actors)
    ]
    for process in local:
        process.start()
    stopping: list[str] = []
    learner = None

    def on_signal(signum, frame) -> None:
        stopping.append(signal.Signals(signum).name)
        if learner is not None and learner.pid is not None:
            os.kill(learner.pid, signal.SIGTERM)  # the learner saves and ends after its update

    handlers = {name: signal.signal(name, on_signal) for name in (signal.SIGINT, signal.SIGTERM)}
    code, restarts = EXIT_OK, 0
    try:
        while True:
            generation = store.add(run_key(run_id, "learner/generation"), 1)
            learner = spawn.Process(target=learner_process, args=({**setup, "generation": generation},))
            learner.start()
            learner.join()
            if learner.exitcode == EXIT_INTERRUPTED and not stopping:  # SIGTERM to the learner alone
                stopping.append("SIGTERM to the learner")
            if learner.exitcode == EXIT_OK or stopping:
                code = EXIT_INTERRUPTED if stopping else EXIT_OK
                break
            if restarts >= config.max_restarts:
                say(f"error: the learner failed (exit code {learner.exitcode}) after {restarts} restarts")
                code = EXIT_FAILED
                break
            restarts += 1
            say(
                f"Learner lost (exit code {learner.exitcode}): restarting it from its newest checkpoint "
                f"(restart {restarts} of {config.max_restarts}); the actors reconnect"
            )
    finally:
        for name, handler in handlers.items():
            signal.signal(name, handler)
        store.set(run_key(run_id, "finished"), "1")
        for process in local:
            process.join(ACTORS_STOP_SECONDS)
            if process.is_alive():
                process.terminate()
                process.join(5)
        gate.stop()
    if stopping:
        say(
            f"master: stopped by {stopping[0]}; continue with `python -m trainer master --config ... --resume {run_dir}`"
        )
    say(f"Run directory: {run_dir}")
    return code


def learner_process(setup: dict) -> None:
    """The learner: the run's one training loop, its batches from the actors (a spawned process)."""
    from trainer.cluster.learner_hub import LearnerHub
    from trainer.cluster.signals import StopRequest
    from trainer.run.layout import holds_a_run
    from trainer.run.loop import train
    from trainer.run.sinks import LogSink

    stop = StopRequest()
    stop.install_signals()
    stop.watch_parent()
    config = config_from_setup(
        setup["config"], setup["allow_custom_envs"], "the run's config", "--allow-custom-envs on the master"
    )
    run_dir = Path(setup["run_dir"])
    pin_collectives_to(setup["host"])
    address = parse_endpoint(setup["store"], "the run's store")
    hub = LearnerHub(
        lambda: connect_store(*address), setup["run_id"], setup["generation"], config, run_dir, setup["master"], stop
    )
    sinks = [LogSink(stream=sys.stdout, log_interval=config.log_interval, timestamps=False)]
    try:
        result = train(
            config, run_dir, sinks, stop, holds_a_run(run_dir, config), preflight=False, experience=hub.start()
        )
        connect_store(*address).set(run_key(setup["run_id"], "finished"), "1")  # the actors end, not wait
    finally:
        hub.close()
    # Done, and everything written: leave without the interpreter's teardown, which would destroy
    # gloo's threads of pairs still closing (std::terminate, a false "Learner lost"). A stopped run
    # (SIGTERM, also while it waited for a batch) says so: the master then restarts nothing.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_OK if result.status == "finished" else EXIT_INTERRUPTED)


def join_as_actor(master: str, token: str | None, allow_custom_envs: bool, say=print, stop=None) -> int:
    """Be admitted by the master at HOST:PORT with the token and act until the run is over."""
    from trainer.cluster.actor import Actor

    try:
        host, port = parse_endpoint(master)
        token = resolve_token(token, generate=False)
        if token is None:
            raise ConfigError(
                "an actor needs the run's token: --token TOKEN or RL_STUDIO_TOKEN (the master printed it)"
            )
        address = local_address(host, port)
        _, run = request_admission(f"{host}:{port}", token, address, 1)
        if run.get("mode") != MODE:
            raise ConfigError(f"the master at {master} runs a synchronous cluster: join it without --role actor")
        config = config_from_setup(run["config"], allow_custom_envs, f"the master at {master}", "--allow-custom-envs")
        say(custom_code_line(allow_custom_envs, "--allow-custom-envs"))
        pin_collectives_to(address)
        store = connect_store(*parse_endpoint(run["store"], "the run's store"))
        actor = Actor(config, store, run["run_id"], address, say, stop)
    except (ConfigError, RefusedError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    batches = actor.run()
    say(f"Actor {actor.number}: the run has finished ({batches} batches, {actor.steps} steps sent)")
    return EXIT_OK


def local_actor(master: str, token: str, allow_custom_envs: bool) -> None:
    """One of `--actors N` (a spawned process beside the learner): an actor like any other."""
    from trainer.cluster.signals import StopRequest

    stop = StopRequest()
    stop.install_signals()
    stop.watch_parent()
    sys.exit(join_as_actor(master, token, allow_custom_envs, lambda line: print(line, flush=True), stop))


def launch_actor_learner_here(config, args, actors: int) -> int:
    """`python -m trainer --config X.yaml --actors N`: the learner and N actors on this machine."""
    from trainer.cluster.launch import host_here

    require_actor_learner(config, "--actors")
    return host_here(host_actor_learner, config, args, actors)
