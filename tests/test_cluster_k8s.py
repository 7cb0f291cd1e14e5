"""Every Kubernetes manifest under deploy/k8s parses, every command line in it is one the
trainer (or torchrun, or the studio) accepts, every document is valid for the Kubernetes version
below (kubernetes-validate's bundled schemas, strict: an unknown field is an error) and the
PyTorchJob for the Kubeflow training operator's own CRD schema (deploy/k8s/schemas/): a renamed
flag or a typo'd field fails here, not in a cluster.

Needs `pip install kubernetes-validate` (it bundles the Kubernetes JSON schemas; no network)."""

import copy
import json
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = sorted((ROOT / "deploy" / "k8s").glob("*.yaml"))
KUBERNETES_VERSION = "1.33"  # the schemas every manifest is checked against
PYTORCHJOB_SCHEMA = ROOT / "deploy" / "k8s" / "schemas" / "kubeflow.org_pytorchjobs.v1.schema.yaml"
DEFINITIONS_ID = "https://kubernetes.io/api/_definitions.json"  # kubernetes-validate's shared $defs
LEARNER_PORTS = {54321, 54322}  # the admission gate (master port) and the run's store


def documents(path: Path) -> list[dict]:
    return [document for document in yaml.safe_load_all(path.read_text()) if document]


def containers(document: dict) -> list[dict]:
    if document.get("kind") == "PyTorchJob":
        return [
            container
            for replica in document["spec"]["pytorchReplicaSpecs"].values()
            for container in replica["template"]["spec"]["containers"]
        ]
    if document.get("kind") in ("Deployment", "StatefulSet"):
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
    if rest and rest[0] == "master":
        master_config(build_master_parser().parse_args(rest[1:]))
    elif rest and rest[0] == "worker":
        build_worker_parser().parse_args(rest[1:])
    else:
        args = build_train_parser().parse_args(rest)
        from trainer.config.defaults import load_config

        load_config(ROOT / args.config if args.config else None, args.overrides)  # every --set key exists


def master_config(args):
    """The config a `python -m trainer master` command trains (its file's training keys, then its
    --set): every --set key exists and the whole is valid, as the master itself would read it."""
    from trainer.cluster.nodes import split_cluster_file
    from trainer.config.loading import merge_settings, parse_override, read_yaml_mapping
    from trainer.config.validation import config_from_dict

    train_raw, _ = split_cluster_file(read_yaml_mapping(ROOT / args.config))
    return config_from_dict(merge_settings(train_raw, dict(parse_override(text) for text in args.overrides)))


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


# ----------------------------------------------------------------------------- actor-learner


def test_the_actor_learner_manifest_has_one_gpu_learner_and_autoscaled_actors_that_can_reach_it():
    from trainer.cluster.commands import build_master_parser, build_worker_parser
    from trainer.cluster.learner import learns_from_actors

    manifest = {
        (doc["kind"], doc["metadata"]["name"]): doc for doc in documents(ROOT / "deploy/k8s/actor-learner.yaml")
    }
    learner = manifest["Deployment", "rl-studio-learner"]
    assert learner["spec"]["replicas"] == 1
    (container,) = containers(learner)
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["resources"]["requests"]["nvidia.com/gpu"] == 1
    master = build_master_parser().parse_args(container["command"][4:])
    assert learns_from_actors(master_config(master))  # an actor-learner algo, or the actors have no learner
    assert {master.port, master.store_port} == LEARNER_PORTS
    env = {item["name"]: item["valueFrom"] for item in container["env"] if "valueFrom" in item}
    assert master.token is None and "secretKeyRef" in env["RL_STUDIO_TOKEN"]  # never a token in the manifest
    # the master binds the pod's address and tells actors the store's on it (127.0.0.1 reaches no one)
    assert master.host == "$(POD_IP)" and env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    studio_claim = next(
        doc["metadata"]["name"]
        for doc in documents(ROOT / "deploy/k8s/studio.yaml")
        if doc["kind"] == "PersistentVolumeClaim"
    )
    claims = [volume["persistentVolumeClaim"]["claimName"] for volume in learner["spec"]["template"]["spec"]["volumes"]]
    assert claims == [studio_claim] and master.run_dir.startswith("/runs/")  # the studio sees the run

    service = manifest["Service", "rl-studio-learner"]
    assert service["spec"]["selector"] == learner["spec"]["template"]["metadata"]["labels"]
    assert {port["port"] for port in service["spec"]["ports"]} == LEARNER_PORTS

    actors = manifest["Deployment", "rl-studio-actor"]
    (actor,) = containers(actors)
    worker = build_worker_parser().parse_args(actor["command"][4:])
    assert worker.role == "actor" and worker.master == f"rl-studio-learner:{master.port}"
    assert "secretKeyRef" in {item["name"]: item["valueFrom"] for item in actor["env"]}["RL_STUDIO_TOKEN"]
    assert "cpu" in actor["resources"]["requests"]  # what the autoscaler's utilization is a share of

    autoscaler = manifest["HorizontalPodAutoscaler", "rl-studio-actor"]
    assert autoscaler["apiVersion"] == "autoscaling/v2"
    assert autoscaler["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "rl-studio-actor",
    }
    assert (autoscaler["spec"]["minReplicas"], autoscaler["spec"]["maxReplicas"]) == (2, 10)
    assert [metric["resource"]["name"] for metric in autoscaler["spec"]["metrics"]] == ["cpu"]


# ----------------------------------------------------------------------------- schemas


def validate_standard(document: dict) -> None:
    """kubernetes-validate's strict schemas (additionalProperties false) for KUBERNETES_VERSION."""
    import kubernetes_validate

    kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)


def kubernetes_definitions() -> dict:
    import kubernetes_validate
    from kubernetes_validate.utils import all_versions

    version = [full for full in all_versions() if full.startswith(f"{KUBERNETES_VERSION}.")][0]
    folder = resources.files(kubernetes_validate) / "kubernetes-json-schema" / f"v{version}-local-strict"
    return json.loads((folder / "_definitions.json").read_text())


def strict(schema: dict) -> dict:
    """The CRD's structural schema with unknown fields refused (kubectl's --validate=strict), and
    its left-out Kubernetes types (`x-rl-studio-kubernetes-definition`) and the object's metadata
    (which the API server checks as ObjectMeta for every kind) as kubernetes-validate's strict ones."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "x-rl-studio-kubernetes-definition" in schema:
        return {"$ref": f"{DEFINITIONS_ID}#/$defs/{schema['x-rl-studio-kubernetes-definition']}"}
    schema = {key: strict(value) for key, value in schema.items()}
    if "properties" in schema and "additionalProperties" not in schema:
        if not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema["additionalProperties"] = False
    return schema


def pytorchjob_validator() -> jsonschema.protocols.Validator:
    from referencing import Registry, Resource

    schema = strict(yaml.safe_load(PYTORCHJOB_SCHEMA.read_text()))
    schema["properties"]["metadata"] = {
        "$ref": f"{DEFINITIONS_ID}#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    }
    jsonschema.Draft202012Validator.check_schema(schema)
    registry = Registry().with_resource(DEFINITIONS_ID, Resource.from_contents(kubernetes_definitions()))
    return jsonschema.Draft202012Validator(schema, registry=registry)


def validate(document: dict) -> None:
    if document["apiVersion"].startswith("kubeflow.org/"):
        assert (document["apiVersion"], document["kind"]) == ("kubeflow.org/v1", "PyTorchJob"), "no schema for it"
        pytorchjob_validator().validate(document)
    else:
        validate_standard(document)


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: path.name)
def test_every_document_is_valid_for_its_schema(path):
    for document in documents(path):
        validate(document)


def typo(document: dict, *path: str | int) -> dict:
    """A copy of `document` whose field at `path` is misspelt (its last letter doubled)."""
    copied = copy.deepcopy(document)
    parent = copied
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1] + path[-1][-1]] = parent.pop(path[-1])
    return copied


def test_a_typod_field_fails_validation():
    job = next(doc for doc in documents(ROOT / "deploy/k8s/pytorchjob-elastic.yaml") if doc["kind"] == "PyTorchJob")
    learner = next(doc for doc in documents(ROOT / "deploy/k8s/actor-learner.yaml") if doc["kind"] == "Deployment")
    autoscaler = next(
        doc for doc in documents(ROOT / "deploy/k8s/actor-learner.yaml") if doc["kind"] == "HorizontalPodAutoscaler"
    )
    container = ("spec", "template", "spec", "containers", 0)
    replica = ("spec", "pytorchReplicaSpecs", "Worker", "template", "spec", "containers", 0)
    bad = [
        typo(learner, *container, "command"),  # a Kubernetes kind, deep inside its pod template
        typo(learner, "spec", "strategy"),
        typo(autoscaler, "spec", "maxReplicas"),
        typo(job, "spec", "elasticPolicy", "maxReplicas"),  # the CRD's own fields
        typo(job, "spec", "pytorchReplicaSpecs", "Worker", "restartPolicy"),
        typo(job, *replica, "volumeMounts"),  # the CRD's pod template
        typo(job, "metadata", "name"),
    ]
    for document in bad:
        with pytest.raises(jsonschema.ValidationError):  # an unknown field, or a required one missing
            validate(document)
    wrong_type = copy.deepcopy(job)
    wrong_type["spec"]["elasticPolicy"]["maxRestarts"] = "three"
    with pytest.raises(jsonschema.ValidationError, match="not of type"):
        validate(wrong_type)
    for document in (job, learner, autoscaler):
        validate(document)  # the typos made the copies bad, nothing else
