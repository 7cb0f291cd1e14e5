"""Drive the policy server from plain HTTP (the standard library only: no torch, no RL Studio),
as a game engine would: send the observation, get the action back.

    python -m trainer serve runs/<cartpole run> --port 8000
    python examples/http_client.py --url http://127.0.0.1:8000 [--episodes 3] [--api-key KEY]

It plays Gymnasium's CartPole-v1 with the served model. Any language does the same:

    POST /v1/act   {"obs": [0.01, -0.02, 0.03, 0.04], "deterministic": true}   ->   {"actions": [1]}
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request


def call(url: str, path: str, payload: dict | None = None, api_key: str | None = None) -> dict:
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(url.rstrip("/") + path, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:  # the server says what was wrong in "detail"
        raise SystemExit(f"{path}: HTTP {error.code}: {json.load(error).get('detail')}") from None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--api-key", help="the server's --api-key, if it has one")
    args = parser.parse_args()

    info = call(args.url, "/v1/model", api_key=args.api_key)
    print(
        f"serving {info['env_name']} ({info['model_type']}), trained {info['global_step']} steps, "
        f"observations {info['observation_space']['shape']}, actions {info['action_space']}"
    )

    import gymnasium

    env = gymnasium.make("CartPole-v1")
    returns = []
    for episode in range(args.episodes):
        obs, _ = env.reset(seed=episode)
        total, done = 0.0, False
        while not done:
            action = call(args.url, "/v1/act", {"obs": obs.tolist(), "deterministic": True}, args.api_key)["actions"][0]
            obs, reward, terminated, truncated, _ = env.step(action)
            total += reward
            done = terminated or truncated
        returns.append(total)
        print(f"episode {episode + 1}: return {total:.0f}")
    print(f"mean return {sum(returns) / len(returns):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
