"""The cluster's security pieces one by one: token rules, the admission gate's proofs and
throttle, the signed rendezvous state, values between ranks without pickle, and the node table
after SIGSTOP / SIGCONT. (tests/test_cluster_intruder.py plays the whole attack on real agents.)"""

import base64
import os
import pickle
import random
import subprocess
import sys

import numpy as np
import pytest
import torch

from trainer.cluster.admission import (
    AdmissionGate,
    RefusedError,
    check_token,
    mac,
    new_token,
    request_admission,
    resolve_token,
    token_bits,
)
from trainer.cluster.nodes import LOST_AFTER_SECONDS, NodeMonitor, run_key
from trainer.cluster.rendezvous import SignedBackend, state_key
from trainer.config.checks import ConfigError
from trainer.run.wire import pack, unpack
from trainer.serving.throttle import FailureThrottle


class DictStore:
    """The few TCPStore calls these pieces make, in memory."""

    def __init__(self):
        self.values: dict[str, bytes] = {}

    def set(self, key, value):
        self.values[key] = value.encode() if isinstance(value, str) else value

    def get(self, key):
        return self.values[key]

    def check(self, keys):
        return all(key in self.values for key in keys)

    def compare_set(self, key, expected, desired):
        current = self.values.get(key)
        expected = expected.encode() if isinstance(expected, str) else expected
        desired = desired.encode() if isinstance(desired, str) else desired
        if (current is None and expected == b"") or current == expected:
            self.values[key] = desired
            return desired
        return current if current is not None else expected


@pytest.mark.parametrize(
    "token, bad",
    [
        ("t", True),
        ("sesame", True),
        ("a" * 40, True),
        ("abcabcabcabcabcabcabcabc", True),
        ("correct horse battery staple", False),
        (new_token(), False),
    ],
    ids=["one-letter", "word", "one-letter-repeated", "pattern-repeated", "passphrase", "generated"],
)
def test_weak_tokens_are_refused_with_how_to_make_one(token, bad):
    if bad:
        with pytest.raises(ConfigError, match="too easy to guess") as refused:
            check_token(token)
        assert "secrets.token_urlsafe(16)" in str(refused.value)
    else:
        assert check_token(token) == token


def test_generated_tokens_have_128_bits_and_the_environment_is_checked_too(monkeypatch):
    tokens = {new_token() for _ in range(200)}
    assert len(tokens) == 200 and all(len(token) == 22 and token_bits(token) >= 64 for token in tokens)
    monkeypatch.setenv("RL_STUDIO_TOKEN", "hunter2")
    with pytest.raises(ConfigError, match="RL_STUDIO_TOKEN: the token is too easy"):
        resolve_token(None, generate=True)


def _gate(token, admitted):
    return AdmissionGate(
        token,
        {"config": "env_name: cartpole\n", "run_id": "r" * 32},
        lambda request, address: admitted.append((request["node"], address)),
        lambda line: None,
        FailureThrottle(max_failures=3, lockout_seconds=30),
    )


def _join(gate, token, address="10.0.0.9", node="n1"):
    challenge = gate.challenge()["challenge"]
    return challenge, gate.join(
        {
            "challenge": challenge,
            "nonce": "c",
            "node": node,
            "host": address,
            "hostname": "h",
            "nproc": 1,
            "proof": mac(token, "join", challenge, "c", node),
        },
        address,
    )


def test_the_gate_shares_the_run_only_after_a_proof_and_proves_itself_back():
    token, admitted = new_token(), []
    gate = _gate(token, admitted)
    challenge, (status, answer) = _join(gate, token)
    assert status == 200 and admitted == [("n1", "10.0.0.9")]
    assert answer["run"]["run_id"] == "r" * 32
    from trainer.cluster.admission import digest

    assert answer["proof"] == mac(token, "master", challenge, "c", digest(answer["run"]))
    replay = gate.join(
        {
            "challenge": challenge,
            "nonce": "c",
            "node": "n1",
            "host": "x",
            "hostname": "h",
            "nproc": 1,
            "proof": mac(token, "join", challenge, "c", "n1"),
        },
        "10.0.0.9",
    )
    assert replay[0] == 403  # a challenge is good once


def test_wrong_proofs_are_throttled_per_address_and_say_nothing_of_the_run():
    token, admitted = new_token(), []
    gate = _gate(token, admitted)
    statuses = [_join(gate, new_token(), "10.0.0.66")[1] for _ in range(4)]
    assert [status for status, _ in statuses] == [403, 403, 403, 429]
    assert all("cartpole" not in str(answer) and "run" not in answer for _, answer in statuses)
    assert "try again in 30 s" in statuses[-1][1]["detail"]
    assert _join(gate, token, "10.0.0.66")[1][0] == 429  # locked, even with the right token
    assert _join(gate, token, "10.0.0.7")[1][0] == 200  # another address is not
    assert gate.join({"challenge": 5}, "10.0.0.8")[0] == 422


def test_a_server_that_cannot_prove_the_token_is_not_believed(monkeypatch):
    import trainer.cluster.admission as admission

    answers = iter([(200, {"challenge": "c1"}), (200, {"run": {"config": "env_name: x:Evil\n"}, "proof": "0" * 64})])
    monkeypatch.setattr(admission, "_post", lambda url, body, timeout: next(answers))
    with pytest.raises(RefusedError, match="did not prove this run's token"):
        request_admission("10.0.0.1:54321", new_token(), "10.0.0.2", 1)


def test_an_unsigned_rendezvous_state_is_never_unpickled_and_is_replaced(tmp_path):
    marker = tmp_path / "ran"
    refused, store, token = [], DictStore(), new_token()
    backend = SignedBackend(store, "run", state_key(token, "run"), refused.append)
    good = pickle.dumps({"round": 1})
    state, store_token, written = backend.set_state(good)
    assert (state, written) == (good, True)
    assert backend.get_state()[0] == good
    evil = pickle.dumps(type("Evil", (), {"__reduce__": lambda self: (os.system, (f"touch {marker}",))})())
    store.set("torch.rendezvous.run", base64.b64encode(evil).decode())  # planted by an intruder
    state, intruder_token = backend.get_state()
    assert state == good and not marker.exists() and len(refused) == 1 and "not admitted" in refused[0]
    assert backend.set_state(pickle.dumps({"round": 2}), intruder_token)[2]  # our next write replaces it
    other = SignedBackend(store, "run", state_key(new_token(), "run"), refused.append)  # a wrong token
    other.get_state()
    assert len(refused) == 2


def test_values_cross_between_ranks_as_json_and_bytes_not_pickle():
    payload = {
        "policy": {"w": torch.randn(3, 4), "mask": torch.tensor([True, False])},
        7: [1, 2.5, None, "x"],
        "rng": random.getstate(),
        "np": np.random.default_rng(1).random(5).astype(np.float32),
        "empty": torch.zeros(0),
        "half": torch.ones(2, dtype=torch.bfloat16),
    }
    skeleton, blob = pack(payload)
    back = unpack(skeleton, blob)
    assert torch.equal(back["policy"]["w"], payload["policy"]["w"]) and back["policy"]["mask"].dtype == torch.bool
    assert back[7] == [1, 2.5, None, "x"] and back["rng"] == payload["rng"]  # tuples stay tuples
    assert np.array_equal(back["np"], payload["np"]) and back["half"].dtype == torch.bfloat16
    random.setstate(back["rng"])
    assert b"\x80" not in skeleton.encode()  # no pickle in it
    with pytest.raises(ValueError, match="unknown tag"):
        unpack('{"R": ["os.system", "touch x"]}', b"")
    with pytest.raises(ValueError, match="outside the bytes"):
        unpack('{"T": {"dtype": "float32", "shape": [9], "at": 0, "bytes": 36}}', b"1234")
    with pytest.raises(TypeError, match="cannot send a"):
        pack({"x": object()})


def test_a_node_stopped_and_continued_is_lost_then_back(tmp_path):
    store, lines = DictStore(), []
    monitor = NodeMonitor(store, "run", tmp_path, 1, 2, lines.append, "127.0.0.1:54321")
    assert monitor.admit({"node": "w", "hostname": "h", "nproc": 1}, "10.0.0.2") is None
    store.set(run_key("run", "alive/w"), "1")
    monitor.poll()
    monitor.nodes["w"].last_beat -= LOST_AFTER_SECONDS + 1  # SIGSTOP: no beat for longer than that
    monitor.poll()
    assert monitor.nodes["w"].lost and lines[-1] == "Worker lost: 10.0.0.2"
    store.set(run_key("run", "alive/w"), "2")  # SIGCONT: it beats again
    monitor.poll()
    assert not monitor.nodes["w"].lost and lines[-1].startswith("Worker back: 10.0.0.2")
    monitor.write_table()
    import json

    assert json.loads((tmp_path / "nodes.json").read_text())["nodes"][0]["lost"] is False


def test_a_full_run_refuses_one_more_node(tmp_path):
    lines = []
    monitor = NodeMonitor(DictStore(), "run", tmp_path, 1, 1, lines.append, "127.0.0.1:54321")
    assert monitor.admit({"node": "a", "hostname": "h", "nproc": 1}, "10.0.0.2") is None
    assert "max_nodes" in monitor.admit({"node": "b", "hostname": "h", "nproc": 1}, "10.0.0.3")


def test_a_weak_master_token_is_refused_before_anything_listens(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer",
            "master",
            "--config",
            "configs/cluster.yaml",
            "--token",
            "t",
            "--runs-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert done.returncode == 2 and "too easy to guess" in done.stderr and "secrets.token_urlsafe" in done.stderr
    assert not any(tmp_path.iterdir())  # no run folder made


def test_generated_tokens_never_start_with_a_dash_so_the_printed_commands_parse():
    """`--token T` with T = "-x..." is read as an option; 1 urlsafe token in 64 starts with "-"."""
    import argparse

    from trainer.cluster.admission import new_token

    parser = argparse.ArgumentParser()
    parser.add_argument("--token")
    tokens = [new_token() for _ in range(2000)]
    assert not any(token.startswith("-") for token in tokens)
    assert all(parser.parse_args(["--token", token]).token == token for token in tokens[:200])
