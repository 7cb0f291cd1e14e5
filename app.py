"""RL Studio: train game-playing agents in your browser.

    python app.py                        # http://127.0.0.1:7860
    python app.py --host 0.0.0.0 --auth alice:secret --runs-dir /data/runs

Flags are documented in docs/studio.md and by `python app.py --help`.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.machinery
import os
import signal
import socket
import sys
import tempfile
from pathlib import Path

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def parse_auth(text: str | None) -> tuple[str, str] | None:
    """'user:password' -> ('user', 'password'); None or '' -> None."""
    if not text:
        return None
    user, colon, password = text.partition(":")
    if not colon or not user or not password:
        raise argparse.ArgumentTypeError(f"--auth expects user:password (e.g. --auth alice:s3cret), got {text!r}")
    return user, password


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def upload_size(text: str) -> int:
    """--max-upload-size: '200mb' -> bytes (studio/uploads.py reads the units)."""
    from studio.uploads import parse_size

    try:
        return parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("--max-upload-size ")) from None


def port_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is a number from 1 to 65535, got {text!r}")
    return value


class StartupError(Exception):
    """The studio cannot start as asked; the message is the one line `python app.py` prints."""


def check_runs_dir(runs_dir: str) -> None:
    """The runs folder exists (or can be made) and this process can write into it."""
    path = Path(runs_dir).expanduser()
    if path.exists() and not path.is_dir():
        raise StartupError(f"--runs-dir {runs_dir}: that is a file, not a folder; pass a folder for the runs")
    try:
        path.mkdir(parents=True, exist_ok=True)
        descriptor, probe = tempfile.mkstemp(prefix=".write-test-", dir=path)
        os.close(descriptor)
        os.unlink(probe)
    except OSError as error:
        raise StartupError(
            f"--runs-dir {runs_dir}: cannot write there ({error.strerror or error}); pass a folder "
            "you can write to, or fix its permissions"
        ) from None


def check_port_free(host: str, port: int) -> None:
    """Fail before building the page (seconds) when another program already listens on the port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((host, port))
    except OSError as error:
        raise StartupError(
            f"cannot listen on {host}:{port} ({error.strerror or error}); is another studio "
            "running? Pick another --port"
        ) from None


def exposure_warning(host: str, auth: tuple[str, str] | None) -> str | None:
    """The warning printed when the studio listens beyond this machine without a login."""
    if host in LOCAL_HOSTS or auth is not None:
        return None
    return (
        f"WARNING: listening on {host} without --auth: anyone who can reach this machine can "
        "start runs on it (using its CPU/GPU) and download its models. Add --auth user:password "
        "(or set RL_STUDIO_AUTH=user:password)."
    )


def build_parser() -> argparse.ArgumentParser:
    from studio.uploads import DEFAULT_MAX_UPLOAD
    from trainer.cluster.nodes import DEFAULT_PORT

    parser = argparse.ArgumentParser(
        # `rl-studio` (pyproject.toml's console script) or `python app.py`: the usage names how it was started
        prog="rl-studio" if Path(sys.argv[0]).name == "rl-studio" else "python app.py",
        description="RL Studio: configure, launch and watch reinforcement-learning runs in the browser.",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only; "
        "0.0.0.0 opens it to the network, use --auth then)",
    )
    parser.add_argument("--port", type=port_number, default=7860, help="port (default 7860)")
    parser.add_argument("--runs-dir", default="runs", help="folder of run directories (default ./runs)")
    parser.add_argument(
        "--auth",
        type=parse_auth,
        default=os.environ.get("RL_STUDIO_AUTH") or None,
        metavar="USER:PASSWORD",
        help="require this login (default: the RL_STUDIO_AUTH environment variable, if set)",
    )
    parser.add_argument(
        "--max-concurrent-runs",
        type=positive_int,
        default=16,
        metavar="N",
        help="how many runs this studio holds at once, training or queued; one more is refused (default 16)",
    )
    parser.add_argument(
        "--slots",
        type=positive_int,
        default=None,
        metavar="N",
        help="how many runs train at once in the runs folder, the studio's and any sweep's together; "
        "the others wait, queued (default: one per GPU, else one per usable CPU core)",
    )
    parser.add_argument(
        "--allow-custom-envs",
        action="store_true",
        help="accept package.module:Class environments and wrappers from the web form "
        "(this imports and runs that code on the server)",
    )
    parser.add_argument(
        "--cluster-host",
        default="127.0.0.1",
        metavar="ADDRESS",
        help="address a run that accepts workers (max_nodes > 1) listens on for them "
        "(default 127.0.0.1: workers on this machine only; give this machine's "
        "address on a private network to let others join)",
    )
    parser.add_argument(
        "--cluster-port",
        type=port_number,
        default=DEFAULT_PORT,
        help=f"admission port of that run (default {DEFAULT_PORT}, the guide's); its store listens on the next port",
    )
    parser.add_argument(
        "--max-upload-size",
        type=upload_size,
        default=DEFAULT_MAX_UPLOAD,
        metavar="SIZE",
        help=f"largest upload (a .yaml config, a .pth to evaluate) the page accepts, e.g. 50mb "
        f"(default {DEFAULT_MAX_UPLOAD})",
    )
    parser.add_argument(
        "--poll-seconds", type=float, default=1.0, help="how often an open page refreshes a running run (default 1 s)"
    )
    return parser


def _stop_like_ctrl_c(signum, frame) -> None:
    raise KeyboardInterrupt


class _NoGradioStubWriting(importlib.abc.MetaPathFinder):
    """At import, Gradio parses the source of each of its ~80 component classes and rewrites their
    .pyi type stubs (gradio/component_meta.py `create_or_modify_pyi`): a third of its import time,
    for files only an editor reads (the wheel ships them). This finder lets gradio.component_meta
    load as usual, then makes that one function do nothing; it is gone from sys.meta_path after."""

    def find_spec(self, name, path, target=None):
        if name != "gradio.component_meta":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_without_stub_writing(module) -> None:
            exec_module(module)
            if hasattr(module, "create_or_modify_pyi"):
                module.create_or_modify_pyi = lambda *args, **kwargs: None

        spec.loader.exec_module = exec_without_stub_writing
        return spec


class _NoIPython(importlib.abc.MetaPathFinder):
    """Gradio imports IPython where it is installed, for notebook magics and to ask whether it runs
    in a notebook (`python app.py` never does): a sixth of its import time, and more at launch.
    In the studio's process `import IPython` fails as if IPython were not installed; Gradio expects
    that (it catches the ImportError)."""

    def find_spec(self, name, path, target=None):
        if name == "IPython" or name.startswith("IPython."):
            raise ModuleNotFoundError(f"No module named {name!r} (not imported by the studio)", name=name)
        return None


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0.2 <= args.poll_seconds <= 2.0:
        parser.error(f"--poll-seconds must be between 0.2 and 2, got {args.poll_seconds}")
    try:
        check_runs_dir(args.runs_dir)
        check_port_free(args.host, args.port)
    except StartupError as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        sys.exit(2)
    warning = exposure_warning(args.host, args.auth)
    if warning:
        print(warning, file=sys.stderr)
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

    # SIGTERM (docker stop, systemd, kill) ends the studio like Ctrl-C does: running trainers are
    # asked to stop and save their models before the studio exits.
    signal.signal(signal.SIGTERM, _stop_like_ctrl_c)

    if "gradio" not in sys.modules:  # a cold start: about half as long (see the two finders)
        sys.meta_path.insert(0, _NoGradioStubWriting())
        if "IPython" not in sys.modules:
            sys.meta_path.insert(0, _NoIPython())
    # The studio's own temp folder (removed at exit) holds Gradio's uploads too: pointed there
    # before gradio is imported, since some of its routes read GRADIO_TEMP_DIR at import.
    from studio.scratch import ScratchFolder
    from studio.uploads import keep_uploads_in

    scratch = ScratchFolder()
    keep_uploads_in(scratch)

    # Imported here, not at the top: spawned trainer processes re-import __main__, and must not
    # pay for (or start) gradio.
    from studio.ui import launch

    launch(
        host=args.host,
        port=args.port,
        runs_dir=args.runs_dir,
        auth=args.auth,
        max_concurrent_runs=args.max_concurrent_runs,
        slots=args.slots,
        allow_custom_envs=args.allow_custom_envs,
        poll_seconds=args.poll_seconds,
        cluster_host=args.cluster_host,
        cluster_port=args.cluster_port,
        max_upload_size=args.max_upload_size,
        scratch=scratch,
    )


if __name__ == "__main__":
    main()
