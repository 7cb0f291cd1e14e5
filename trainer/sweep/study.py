"""The Optuna study behind a sweep: its storage (SQLite in the sweep folder, or a database URL such
as postgresql://user@host/db shared by several sweep workers), the sampler and pruner the sweep
file names, which trials count toward --trials, the trials of a sweep that stopped or died, and
best.yaml.

A trial a sweep worker runs carries that worker (host, pid, start time) and a heartbeat. When the
worker stops (Ctrl-C, SIGTERM) or dies (SIGKILL, a lost machine), its unfinished trials are
*interrupted*: each is marked failed and requeued once with the same values (Optuna moves a trial
out of RUNNING for one process only, so two workers never requeue it twice), and the requeued
trial resumes the same run folders. Interrupted trials do not count toward --trials; their
requeued copies do, so no trial is lost and none runs twice.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from trainer.run.files import atomic_write
from trainer.run.layout import best_config_path, study_path
from trainer.run.processes import process_alive, process_started
from trainer.sweep.search import build_pruner, build_sampler
from trainer.sweep.space import Param, Sweep

WORKER = "sweep:worker"  # system attrs of a trial: who runs it, ...
HEARTBEAT = "sweep:heartbeat"  # ... when it last said so,
INTERRUPTED = "sweep:interrupted"  # ... why it was failed and requeued,
SURPLUS = "sweep:surplus"  # ... asked past --trials by one of two racing workers (failed, not run),
CONFIG = "sweep:config"  # ... and its full config (best.yaml)
DEFINITION = "sweep"  # the study's user attr: what a continued study must share
HEARTBEAT_SECONDS = 30.0
STALE_SECONDS = 300.0  # a trial of another host without a heartbeat this long: its worker is gone
UNCLAIMED_SECONDS = 10.0  # a worker claims the trial it asked within milliseconds


class StudyError(Exception):
    """The study cannot be opened or continued (storage, driver, another sweep under the name)."""


def storage_url(given: str | None, sweep_dir: Path) -> str:
    """`--storage`, else SQLite in the sweep folder (absolute: any working folder opens it)."""
    return given or f"sqlite:///{study_path(sweep_dir).resolve()}"


def shown_url(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - an unparsable URL is shown cut, never with a secret
        return url.split("@")[-1]


def open_storage(url: str) -> Any:
    """Optuna's RDBStorage on `url`; StudyError says what is missing (a driver, the server)."""
    import optuna

    engine = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {"pool_pre_ping": True}
    try:
        for attempt in range(3):
            try:
                return optuna.storages.RDBStorage(_with_driver(url), engine_kwargs=engine)
            except ImportError:
                raise
            except Exception:  # noqa: BLE001 - two workers making the tables at once: one loses, looks again
                if attempt == 2:
                    raise
                time.sleep(0.5 + attempt)
    except ImportError:
        raise StudyError(
            f"--storage {shown_url(url)} needs its database driver: python -m pip install 'psycopg[binary]' "
            f"(PostgreSQL), or the driver the URL names (postgresql+psycopg2://, mysql+pymysql://, ...)"
        ) from None
    except Exception as error:  # noqa: BLE001 - sqlalchemy's errors: a wrong URL, no server, no rights
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise StudyError(f"cannot open the study storage {shown_url(url)}: {first}") from None


def _with_driver(url: str) -> str:
    """`postgresql://` with the driver that is installed: psycopg (3), else psycopg2 (SQLAlchemy's
    own default differs by version)."""
    import importlib.util

    if url.startswith("postgresql://"):
        for module, dialect in (("psycopg", "postgresql+psycopg://"), ("psycopg2", "postgresql+psycopg2://")):
            if importlib.util.find_spec(module) is not None:
                return dialect + url.removeprefix("postgresql://")
    return url


def open_study(sweep: Sweep, name: str, storage: Any, seeds: int) -> Any:
    """Create the study, or continue it when it exists with the same definition; StudyError if
    it was started from another sweep file (a different base, budget, space, objective or seeds)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the sweep prints its own lines
    try:
        trials_so_far = len(storage.get_all_trials(storage.get_study_id_from_name(name), deepcopy=False))
    except KeyError:
        trials_so_far = 0
    study = optuna.create_study(
        storage=storage,
        study_name=name,
        direction=sweep.objective.direction,
        sampler=build_sampler(sweep.sampler, trials_so_far),
        pruner=build_pruner(sweep.pruner),
        load_if_exists=True,
    )
    definition = json.loads(json.dumps(sweep.definition() | {"seeds": seeds}))
    stored = study.user_attrs.get(DEFINITION)
    if stored is None:
        study.set_user_attr(DEFINITION, definition)
    elif stored != definition:
        differs = sorted(part for part in definition if definition[part] != stored.get(part))
        raise StudyError(
            f"the study {name!r} was started from another sweep (its {', '.join(differs)} differ from "
            f"{sweep.path} with --seeds {seeds}); give --name NEW for a new study, or restore the file"
        )
    return study


def trial_id(study: Any, storage: Any, number: int) -> int:
    return storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(study.study_name), number)


def counted(trials: list) -> list:
    """The trials that count toward --trials: all but the interrupted (requeued) and surplus ones."""
    return [trial for trial in trials if INTERRUPTED not in trial.system_attrs and SURPLUS not in trial.system_attrs]


def tally(study: Any, target: int) -> str:
    """`5 of 40 trials done (3 finished, 1 pruned, 1 failed)`: the trials that count."""
    from optuna.trial import TrialState

    trials = counted(study.get_trials(deepcopy=False))
    states = {state: sum(trial.state == state for trial in trials) for state in TrialState}
    done = states[TrialState.COMPLETE] + states[TrialState.PRUNED] + states[TrialState.FAIL]
    return (
        f"{done} of {target} trials done ({states[TrialState.COMPLETE]} finished, "
        f"{states[TrialState.PRUNED]} pruned, {states[TrialState.FAIL]} failed)"
    )


def more_wanted(study: Any, target: int) -> bool:
    """Another trial should start: fewer than `target` count, or a requeued one waits."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    return len(counted(trials)) < target or any(trial.state == TrialState.WAITING for trial in trials)


def is_surplus(study: Any, number: int, target: int) -> bool:
    """A fresh trial asked past `target` (two workers asked at once): the later numbers yield."""
    numbers = sorted(trial.number for trial in counted(study.get_trials(deepcopy=False)))
    return number in numbers and numbers.index(number) >= target


def claim(storage: Any, trial_id_: int) -> None:
    """Mark the trial as this process's, with a first heartbeat."""
    pid = os.getpid()
    worker = {"host": socket.gethostname(), "pid": pid, "started": process_started(pid)}
    storage.set_trial_system_attr(trial_id_, WORKER, worker)
    storage.set_trial_system_attr(trial_id_, HEARTBEAT, time.time())


def orphans(study: Any) -> list:
    """Running trials whose worker is gone: on this host its process is dead (or its pid reused);
    on another host, no heartbeat for STALE_SECONDS; unclaimed (asked by a worker that died before
    it said so) for UNCLAIMED_SECONDS."""
    from optuna.trial import TrialState

    gone = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = trial.system_attrs.get(WORKER)
        if worker is None:
            alive = _age(trial) < UNCLAIMED_SECONDS
        elif worker.get("host") == socket.gethostname():
            started = process_started(int(worker["pid"])) if process_alive(int(worker["pid"])) else None
            alive = started is not None and (worker.get("started") is None or abs(started - worker["started"]) < 2.0)
        else:
            alive = time.time() - float(trial.system_attrs.get(HEARTBEAT) or 0) < STALE_SECONDS
        if not alive:
            gone.append(trial)
    return gone


def unclaimed(study: Any) -> list:
    """Running trials asked less than UNCLAIMED_SECONDS ago that no worker has claimed yet."""
    from optuna.trial import TrialState

    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    return [trial for trial in running if WORKER not in trial.system_attrs and _age(trial) < UNCLAIMED_SECONDS]


def _age(trial: Any) -> float:
    return time.time() - trial.datetime_start.timestamp() if trial.datetime_start else float("inf")


def requeue(study: Any, storage: Any, trial: Any, reason: str) -> bool:
    """Fail an interrupted trial and queue it again with the same values and run folders; False
    when another worker did it first (or the trial had ended)."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    number_id = trial_id(study, storage, trial.number)
    try:
        storage.set_trial_system_attr(number_id, INTERRUPTED, reason)
        if not storage.set_trial_state_values(number_id, state=TrialState.FAIL):
            return False
    except UpdateFinishedTrialError:
        return False
    retry_of = trial.user_attrs.get("retry_of", trial.number)
    user_attrs = {"retry_of": retry_of, "run_dirs": trial.user_attrs.get("run_dirs")}
    study.enqueue_trial(trial.params, user_attrs={k: v for k, v in user_attrs.items() if v is not None})
    return True


def fail(study: Any, trial: Any, message: str) -> None:
    """A trial that cannot run or failed: told FAIL, with the reason in its `error` user attr."""
    from optuna.trial import TrialState

    trial.set_user_attr("error", message[:2000])
    study.tell(trial, state=TrialState.FAIL)


def best_values(sweep: Sweep, trial: Any) -> dict:
    """The swept values of a finished trial (a list choice back from its JSON text)."""
    import optuna

    fixed = optuna.trial.FixedTrial(trial.params)
    return {param.name: param.suggest(fixed) for param in sweep.params if param.name in trial.params}


def describe(params: dict, swept: tuple[Param, ...]) -> str:
    def shown(value: Any) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    return ", ".join(f"{param.name}={shown(params[param.name])}" for param in swept if param.name in params)


def write_best(study: Any, sweep: Sweep, sweep_dir: Path) -> tuple[Path, Any] | None:
    """best.yaml: the best finished trial's full config; None while no trial has finished."""
    from trainer.config.safe_yaml import dump_yaml

    try:
        best = study.best_trial
    except ValueError:
        return None
    config = best.system_attrs.get(CONFIG) or sweep.trial_config(best_values(sweep, best)).to_dict()
    header = (
        f"# The best trial ({best.number}) of the sweep {study.study_name!r} ({sweep.path}): "
        f"{sweep.objective.metric} {best.value:.6g}, {sweep.objective.direction}d over its trials.\n"
        f"# {describe(best_values(sweep, best), sweep.params)}\n# Train it: python -m trainer --config THIS_FILE\n"
    )
    return atomic_write(best_config_path(sweep_dir), header + dump_yaml(config)), best
