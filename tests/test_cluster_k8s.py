"""Every Kubernetes manifest under deploy/k8s parses, and every command line in it is one the
trainer (or torchrun, or the studio) accepts: a renamed flag fails here, not in a cluster."""

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = sorted((ROOT / "deploy" / "k8s").glob("*.yaml"))


def containers(document: dict) -> list[dict]:
    if document.get("kind") == "PyTorchJob":
        return [
            container
            for replica in document["spec"]["pytorchReplicaSpecs"].values()
            for container in replica["template"]["spec"]["containers"]
        ]
    if document.get("kind") == "Deployment":
        return document["spec"]["template"]["spec"]["containers"]
    return []


def check_command(command: list[str]) -> None:
    """Parse the command with the parser of what it runs; argparse exits (SystemExit) on a bad flag."""
    assert command[0] == "python", command
    if command[1:3] == ["-m", "torch.distributed.run"]:
        from torch.distributed.run import get_args_parser

        torchrun = get_args_parser().parse_args(command[3:])
        assert torchrun.module and torchrun.training_script == "trainer", command
        command = ["python", "-m", "trainer", *torchrun.training_script_args]
    if command[1] == "app.py":
        import app

        app.build_parser().parse_args(command[2:])
        return
    assert command[1:3] == ["-m", "trainer"], command
    from trainer.__main__ import build_train_parser
    from trainer.cluster.commands import build_master_parser, build_worker_parser

    rest = command[3:]
    parsers = {"master": build_master_parser, "worker": build_worker_parser}
    if rest and rest[0] in parsers:
        parsers[rest[0]]().parse_args(rest[1:])
    else:
        args = build_train_parser().parse_args(rest)
        from trainer.config.defaults import load_config

        load_config(ROOT / args.config if args.config else None, args.overrides)  # every --set key exists


def test_there_are_manifests_for_the_job_and_the_studio():
    kinds = {document["kind"] for path in MANIFESTS for document in yaml.safe_load_all(path.read_text())}
    assert {"PyTorchJob", "Deployment", "Service", "PersistentVolumeClaim"} <= kinds


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: path.name)
def test_every_command_and_flag_is_accepted(path):
    for document in yaml.safe_load_all(path.read_text()):
        if document.get("kind") == "PyTorchJob":
            policy = document["spec"]["elasticPolicy"]
            assert policy["rdzvBackend"] == "c10d" and policy["minReplicas"] <= policy["maxReplicas"]
            for container in containers(document):  # a fixed folder on the volume: a restarted pod
                assert "--run-dir" in container["command"]  # continues it (test_trainer_distributed.py)
        for container in containers(document):
            check_command(container["command"])


def test_a_bad_flag_is_caught():
    with pytest.raises(SystemExit):
        check_command(["python", "-m", "trainer", "--no-such-flag"])
