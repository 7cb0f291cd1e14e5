"""One rank of an elastic run, `python -m trainer _rank`, started by an elastic agent
(trainer/cluster/launch.py), never by hand: it takes the run's config, folder and custom-code permission from its own agent's
environment (RANK_SETUP_ENV), never from the network, joins the process group, resumes from the
newest checkpoint when the run already has one (an elastic restart or re-formation) and trains.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from trainer.cluster.launch import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, RANK_SETUP_ENV, config_from_setup
from trainer.cluster.nodes import connect_store, parse_endpoint, run_key


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
    from trainer.run.loop import train
    from trainer.run.ranks import continues_its_run, setup_distributed, shutdown_distributed
    from trainer.run.setup import device_type
    from trainer.run.sinks import LogSink

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
