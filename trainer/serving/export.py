"""ONNX export: a trained policy as a file any game engine can run, without PyTorch.

    python -m trainer export runs/<run_id> --onnx agent.onnx [--with-details] [--with-mask] [--force]

    from trainer.serving.export import export_onnx
    export_onnx("runs/<run_id>/flappy_bird_ppo_final.pth", "agent.onnx")

The model takes `obs`: a float32 batch of *raw* observations (batch, *obs_shape), with a dynamic
batch dimension. Observation normalisation (norm_obs) and the CNN's 0..255 scaling are folded into
the graph, so a game feeds what the env observes. With `with_mask=True` (`--with-mask`; discrete
actions) the graph has a second input, `action_mask`: bool (batch, n), True where the action is
allowed; a forbidden action gets probability 0 and is never the `action` (for an env that masks
actions: Snake in absolute mode, a Gymnasium env's info["action_mask"]). Two plain inputs rather
than one with a default, because onnxruntime hides an input that has a default from
`get_inputs()` and warns on every session it opens. Outputs:

    action   discrete: int64 (batch,), the most likely action
             continuous: float32 (batch, dim), the mean, clipped to the action bounds
  with `with_details=True` also
    probs    discrete: float32 (batch, n), pi(a|obs)     (sample from these for a stochastic agent)
    mean     continuous: float32 (batch, dim), unclipped mean; `log_std` in the metadata
    value    float32 (batch,), V(obs)

The file's metadata (`onnx.ModelProto.metadata_props`) names the env the model was trained on
and its env_kwargs (from the checkpoint's config), the observation shape, the action space, the
training step and the output names, so a program can check it is feeding the right game. The
CLI refuses to replace an existing file or symbolic link at the output path without --force. `onnx` and `onnxruntime` are optional extras
(`pip install -r requirements-export.txt`); the studio and trainer run without them.
"""

from __future__ import annotations

import copy
import io
import json
import os
import warnings
from pathlib import Path

import torch
from torch import Tensor, nn

from trainer.nets.normalization import CLIP, EPSILON
from trainer.run.checkpoint import TrainedModel, load_model
from trainer.run.files import atomic_write
from trainer.run.layout import find_final_model, latest_checkpoint_path

# 17 is run by every onnxruntime since 1.14 (2023) and by the engines' ONNX plugins
# (Unity Sentis / Barracuda, Unreal NNE) that lag behind the newest opsets.
OPSET = 17
INSTALL_HINT = "pip install -r requirements-export.txt  (onnx and onnxruntime)"


class ExportError(Exception):
    """The model cannot be exported (or the export tools are missing); the message says why."""


def resolve_model_path(run_or_pth: str | Path) -> Path:
    """A .pth file as it is; a run folder -> its final model, else its newest checkpoint."""
    path = Path(run_or_pth)
    if path.is_file():
        return path
    if path.is_dir():
        found = find_final_model(path)
        if found is None:
            try:
                found = latest_checkpoint_path(path)
            except Exception:  # noqa: BLE001 - no readable config.yaml: treated as "no model"
                found = None
        if found is None:
            raise ExportError(
                f"{path} has no final model (*_final.pth) and no checkpoint yet; train it further or pass a .pth file"
            )
        return found
    raise ExportError(f"{path}: no such file or run folder; pass a .pth written by the trainer or a run folder")


class ExportablePolicy(nn.Module):
    """raw observations -> action (and probs / mean and value): the graph that is exported.

    The normalisation is the trainer's (`RunningMeanStd.normalize`) with its statistics turned
    into float32 constants; the networks are the policy's own modules."""

    def __init__(self, model: TrainedModel, with_details: bool = False):
        super().__init__()
        self.policy = copy.deepcopy(model.policy).cpu()  # the caller's model stays where it is
        self.with_details = with_details
        normalizer = self.policy.obs_normalizer
        self.normalize = normalizer is not None
        if normalizer is not None:
            self.register_buffer("shift", normalizer.mean.float().clone())
            self.register_buffer("scale", (normalizer.var + EPSILON).rsqrt().float())

    def forward(self, obs: Tensor, *inputs: Tensor) -> tuple[Tensor, ...]:
        """inputs: (state_h, state_c) of a recurrent policy, then the action mask, as given."""
        if self.normalize:
            obs = ((obs - self.shift) * self.scale).clamp(-CLIP, CLIP)
        return (
            self.policy.exported(obs, *inputs[:2], self.with_details, *inputs[2:])
            if self.policy.recurrent
            else (self.policy.exported(obs, self.with_details, *inputs))
        )


MASK_INPUT = "action_mask"
STATE_INPUTS = ("state_h", "state_c")  # a recurrent policy's state in, (1, batch, size) each; out as *_out


def input_names(model: TrainedModel, with_mask: bool = False) -> list[str]:
    """The graph's inputs: `obs`, a recurrent policy's state (`state_h`, `state_c`), and with_mask
    `action_mask` (ExportError for continuous actions)."""
    names = ["obs", *(STATE_INPUTS if model.policy.recurrent else ())]
    if not with_mask:
        return names
    if not model.policy.discrete:
        raise ExportError("--with-mask is for discrete actions; this policy's actions are continuous")
    return [*names, MASK_INPUT]


def output_names(model: TrainedModel, with_details: bool) -> list[str]:
    return model.policy.export_names(with_details)


def model_metadata(model: TrainedModel, with_details: bool, with_mask: bool = False) -> dict[str, str]:
    """What the .onnx file says about itself (strings, as ONNX metadata must be). The env is the
    one the model was trained on, as its checkpoint's config names it, with its options."""
    config = model.config or {}
    metadata = {
        "producer": "rl-studio",
        "env_name": str(config.get("env_name") or "unknown"),
        "env_kwargs": json.dumps(config.get("env_kwargs") or {}, sort_keys=True, default=str),
        "model_type": str(model.spec["model_type"]),
        "obs_shape": json.dumps(list(model.observation_shape)),
        "action_space": json.dumps(model.spec["action"]),
        "global_step": str(model.global_step),
        "inputs": json.dumps(input_names(model, with_mask)),
        "outputs": json.dumps(output_names(model, with_details)),
        "norm_obs_folded_in": str(bool(model.spec.get("norm_obs"))).lower(),
    }
    if model.policy.recurrent:  # zeros at the start of every episode; then each step's *_out
        metadata["state_shape"] = json.dumps([1, "batch", model.policy.state_size])
    if isinstance(getattr(model.policy, "log_std", None), torch.nn.Parameter):  # PPO's state-independent std
        metadata["log_std"] = json.dumps([float(x) for x in model.policy.log_std.detach().cpu()])
    return metadata


def onnx_bytes(model: TrainedModel, with_details: bool = False, with_mask: bool = False) -> bytes:
    """The serialised ONNX model (checked by onnx.checker), with its metadata."""
    try:
        import onnx
    except ImportError:
        raise ExportError(f"ONNX export needs the optional onnx package: {INSTALL_HINT}") from None
    wrapper = ExportablePolicy(model, with_details).eval()
    example = (torch.zeros((2, *model.observation_shape), dtype=torch.float32),)
    inputs = input_names(model, with_mask)
    if model.policy.recurrent:
        example += (torch.zeros((1, 2, model.policy.state_size)),) * 2
    if with_mask:
        example += (torch.ones((2, model.policy.action_size), dtype=torch.bool),)
    names = output_names(model, with_details)
    buffer = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        # The TorchScript exporter: the torch.export one needs onnxscript, one more dependency,
        # and these graphs (no control flow) come out the same.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            wrapper,
            example,
            buffer,
            dynamo=False,
            opset_version=OPSET,
            input_names=inputs,
            output_names=names,
            dynamic_axes={name: {1 if name.startswith("state_") else 0: "batch"} for name in (*inputs, *names)},
        )
    proto = onnx.load_from_string(buffer.getvalue())
    for key, value in model_metadata(model, with_details, with_mask).items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    proto.doc_string = (
        f"RL Studio policy for {model.env_name}: input obs float32 (batch, "
        f"{', '.join(map(str, model.observation_shape))}) raw observations"
        + (
            f", inputs state_h, state_c float32 (1, batch, {model.policy.state_size}): zeros at an episode's "
            f"start, then the last step's state_h_out, state_c_out"
            if model.policy.recurrent
            else ""
        )
        + (
            f", input {MASK_INPUT} bool (batch, {model.policy.action_size}), True where the action is allowed"
            if with_mask
            else ""
        )
        + f"; outputs {', '.join(names)}"
    )
    onnx.checker.check_model(proto)
    return proto.SerializeToString()


def check_out_path(out_path: Path, overwrite: bool) -> None:
    """ExportError for an output path that is a folder, or (unless `overwrite`) that already holds
    a file or a symbolic link (a dangling one too): an export never replaces what it was not
    told to. Replacing is atomic_write's os.replace, which swaps the link itself, never its target."""
    if out_path.suffix.lower() != ".onnx":
        raise ExportError(f"--onnx {out_path}: the file name must end in .onnx")
    if out_path.is_dir() and not out_path.is_symlink():
        raise ExportError(f"--onnx {out_path} is a folder; give a file name such as {out_path / 'agent.onnx'}")
    if not overwrite and os.path.lexists(out_path):
        what = (
            "a symbolic link (--force replaces the link itself, never what it points to)"
            if out_path.is_symlink()
            else "a file"
        )
        raise ExportError(
            f"--onnx {out_path}: there is {what} at this path already; pass --force to replace it, "
            f"or choose another name"
        )


def export_onnx(
    run_or_pth: str | Path | TrainedModel,
    out_path: str | Path,
    with_details: bool = False,
    overwrite: bool = True,
    with_mask: bool = False,
) -> Path:
    """Write the policy of a .pth (or a run folder's newest model) as ONNX to `out_path`, atomically
    (a temporary file in the same folder, then os.replace). overwrite=False (the CLI without
    --force) refuses an existing file or symbolic link at `out_path`. with_mask: a second input,
    `action_mask` (discrete actions)."""
    model = run_or_pth if isinstance(run_or_pth, TrainedModel) else load_model(resolve_model_path(run_or_pth))
    out_path = Path(out_path)
    check_out_path(out_path, overwrite)
    data = onnx_bytes(model, with_details, with_mask)
    check_out_path(out_path, overwrite)  # again: the export took a moment
    return atomic_write(out_path, data)


# ---------------------------------------------------------------------------------------------
# python -m trainer export


def model_parser(prog: str, description: str):
    """A subcommand parser whose first argument is a model (.pth or run folder, see resolve_model_path)."""
    import argparse

    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument(
        "model", help="a .pth written by the trainer, or a run folder (its final model, else its newest checkpoint)"
    )
    return parser


def build_parser():
    parser = model_parser(
        "python -m trainer export",
        "Write a trained policy as an ONNX model (raw observations "
        "in, actions out; observation normalisation folded in).",
    )
    parser.add_argument("--onnx", required=True, metavar="OUT.onnx", help="where to write the ONNX model")
    parser.add_argument(
        "--with-details",
        action="store_true",
        help="also output action probabilities (discrete) or means (continuous) and the value",
    )
    parser.add_argument(
        "--with-mask",
        action="store_true",
        help="discrete actions: a second input, action_mask bool (batch, n), True where the action is allowed",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace a file or symbolic link already at OUT.onnx (the link itself is replaced, "
        "atomically; what it points to is never written)",
    )
    return parser


def command(argv: list[str]) -> int:
    """The `export` subcommand: 0 on success, 2 with a message on stderr otherwise."""
    import sys

    from trainer.run.checkpoint import CheckpointError

    args = build_parser().parse_args(argv)
    try:
        model = load_model(resolve_model_path(args.model))
        path = export_onnx(
            model, args.onnx, with_details=args.with_details, overwrite=args.force, with_mask=args.with_mask
        )
    except (ExportError, CheckpointError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    names = ", ".join(output_names(model, args.with_details))
    inputs = f" and {MASK_INPUT} bool (batch, {model.policy.action_size})" if args.with_mask else ""
    if model.policy.recurrent:  # the state goes in and comes out: the caller carries it
        inputs = f", state_h, state_c float32 (1, batch, {model.policy.state_size}){inputs}"
    print(
        f"wrote {path}: input obs float32 (batch, {', '.join(map(str, model.observation_shape))}) raw "
        f"observations{inputs} -> {names}; env {model.env_name}, step {model.global_step}"
    )
    return 0
