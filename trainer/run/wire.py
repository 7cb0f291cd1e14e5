"""Python values between ranks without pickle: a JSON skeleton and one buffer of raw tensor bytes.

`torch.distributed.broadcast_object_list` unpickles what the sending rank sends, so a rank that
lies about being the sender runs code on every other. `broadcast_value` sends only JSON and
bytes; a receiver rebuilds dicts, lists, tuples, numbers, strings, tensors and numpy arrays and
nothing else, so the worst a bad peer can send is wrong numbers.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch
from torch import Tensor

# Tags of the skeleton: a container or an array is a one-key dict; plain JSON values stand for themselves.
DICT, LIST, TUPLE, TENSOR, ARRAY = "d", "l", "t", "T", "A"


def pack(value: Any) -> tuple[str, bytes]:
    """(JSON skeleton, the bytes of every tensor and array in it, back to back)."""
    chunks: list[bytes] = []
    offset = [0]

    def raw(tensor: Tensor) -> dict:
        data = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        chunks.append(data)
        entry = {
            "dtype": str(tensor.dtype).removeprefix("torch."),
            "shape": list(tensor.shape),
            "at": offset[0],
            "bytes": len(data),
        }
        offset[0] += len(data)
        return entry

    def walk(item: Any) -> Any:
        if item is None or isinstance(item, (bool, int, float, str)):
            return item
        if isinstance(item, Tensor):
            return {TENSOR: raw(item)}
        if isinstance(item, np.ndarray):
            return {ARRAY: raw(torch.from_numpy(np.ascontiguousarray(item)))}
        if isinstance(item, np.generic):
            return item.item()
        if isinstance(item, dict):
            return {DICT: [[walk(key), walk(entry)] for key, entry in item.items()]}
        if isinstance(item, (list, tuple)):
            return {TUPLE if isinstance(item, tuple) else LIST: [walk(entry) for entry in item]}
        raise TypeError(
            f"cannot send a {type(item).__name__} between ranks (only numbers, strings, lists, "
            f"tuples, dicts, tensors and numpy arrays)"
        )

    skeleton = json.dumps(walk(value))
    return skeleton, b"".join(chunks)


def unpack(skeleton: str, blob: bytes) -> Any:
    """The value `pack` described; raises ValueError for anything it would not have written."""
    buffer = torch.frombuffer(bytearray(blob), dtype=torch.uint8) if blob else torch.empty(0, dtype=torch.uint8)

    def tensor(entry: dict) -> Tensor:
        dtype = getattr(torch, str(entry["dtype"]), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"unknown tensor dtype {entry['dtype']!r}")
        start, size = int(entry["at"]), int(entry["bytes"])
        if start < 0 or size < 0 or start + size > len(blob):
            raise ValueError("a tensor lies outside the bytes that came with it")
        return buffer[start : start + size].clone().view(dtype).reshape([int(n) for n in entry["shape"]])

    def walk(item: Any) -> Any:
        if not isinstance(item, dict):
            return item
        if len(item) != 1:
            raise ValueError("not a skeleton written by trainer.run.wire.pack")
        ((tag, body),) = item.items()
        if tag == DICT:
            return {walk(key): walk(entry) for key, entry in body}
        if tag in (LIST, TUPLE):
            items = [walk(entry) for entry in body]
            return tuple(items) if tag == TUPLE else items
        if tag == TENSOR:
            return tensor(body)
        if tag == ARRAY:
            return tensor(body).numpy()
        raise ValueError(f"unknown tag {tag!r} in a skeleton")

    return walk(json.loads(skeleton))


def broadcast_value(value: Any, src: int, rank: int, device: torch.device | str = "cpu") -> Any:
    """`value` from rank `src` on every rank (three collectives: sizes, skeleton, bytes)."""
    import torch.distributed as dist

    sending = rank == src
    skeleton, blob = pack(value) if sending else ("", b"")
    text = skeleton.encode()
    sizes = torch.tensor([len(text), len(blob)] if sending else [0, 0], dtype=torch.int64, device=device)
    dist.broadcast(sizes, src=src)
    received = []
    for data, size in ((text, int(sizes[0])), (blob, int(sizes[1]))):
        if size == 0:
            received.append(b"")
            continue
        part = (
            torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)
            if sending
            else torch.empty(size, dtype=torch.uint8, device=device)
        )
        dist.broadcast(part, src=src)
        received.append(bytes(part.cpu().numpy()))
    if sending:
        return value
    return unpack(received[0].decode(), received[1])
