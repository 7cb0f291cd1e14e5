"""Wrong passwords are throttled per client address on the real Gradio login route."""
import urllib.error
import urllib.parse
import urllib.request

import gradio as gr

from studio.throttle import LoginThrottle
from studio.ui import launch_options
from test_studio_helpers import free_port


def post_login(url: str, password: str) -> int:
    body = urllib.parse.urlencode({"username": "alice", "password": password}).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url + "/login", data=body), timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_repeated_wrong_passwords_lock_the_address_out_even_for_the_right_one(tmp_path):
    port = free_port()
    with gr.Blocks() as demo:
        gr.Markdown("hello")
    options = launch_options("127.0.0.1", port, ("alice", "s3cret"), [str(tmp_path)], "1mb")
    demo.launch(prevent_thread_lock=True, **options)
    url = f"http://127.0.0.1:{port}"
    try:
        assert post_login(url, "s3cret") == 200
        codes = [post_login(url, f"wrong{i}") for i in range(8)]
        assert codes[:5] == [400] * 5, codes       # Gradio's own answer to a wrong password
        assert set(codes[5:]) == {429}, codes        # then the address waits
        assert post_login(url, "s3cret") == 429      # even the right password, until the lockout ends
    finally:
        demo.close()


def test_lockout_ends_doubles_and_a_success_clears_the_record():
    now = [0.0]
    throttle = LoginThrottle(app=None, max_failures=3, window_seconds=60, lockout_seconds=10, clock=lambda: now[0])
    for _ in range(3):
        throttle._count("10.0.0.1", 400, now[0])
    assert throttle.records["10.0.0.1"].locked_until == 10
    now[0] = 11
    for _ in range(3):
        throttle._count("10.0.0.1", 400, now[0])
    assert throttle.records["10.0.0.1"].locked_until == 11 + 20   # second lockout is twice as long
    throttle._count("10.0.0.2", 400, now[0])
    assert "10.0.0.2" in throttle.records and throttle.records["10.0.0.2"].locked_until == 0  # others unaffected
    throttle._count("10.0.0.1", 200, now[0])
    assert "10.0.0.1" not in throttle.records
