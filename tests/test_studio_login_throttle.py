"""Wrong passwords are throttled per (client address, user name), on the real Gradio login route
and on the studio's /metrics alike: one throttle, which parallel guesses cannot outrun."""

import asyncio
import base64
import urllib.error
import urllib.parse
import urllib.request

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from studio.throttle import LoginThrottle
from test_studio_helpers import guarded_app

AUTH = ("alice", "s3cret")


def post_login(url: str, password: str, user: str = "alice", multipart: bool = False) -> int:
    """POST /login as gradio_client does (url-encoded) or as the browser's login page does (FormData)."""
    fields = {"username": user, "password": password}
    if multipart:
        boundary = "----rlstudio-test"
        body = (
            "".join(
                f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
                for name, value in fields.items()
            )
            + f"--{boundary}--\r\n"
        )
        request = urllib.request.Request(
            url + "/login", data=body.encode(), headers={"Content-Type": f"multipart/form-data; boundary={boundary}"}
        )
    else:
        request = urllib.request.Request(url + "/login", data=urllib.parse.urlencode(fields).encode())
    return _status(request)


def get_metrics(url: str, user: str, password: str) -> tuple[int, dict]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    request = urllib.request.Request(url + "/metrics", headers={"Authorization": f"Basic {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers)


def _status(request) -> int:
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.fixture
def studio_url(tmp_path):
    """A Gradio app launched the studio's way (launch_options, the /metrics route), --auth alice:s3cret,
    with a second user bob:hunter2 sharing the client address 127.0.0.1."""
    with guarded_app(tmp_path, [AUTH, ("bob", "hunter2")]) as url:
        yield url


def test_repeated_wrong_passwords_lock_the_user_out_even_for_the_right_one(studio_url):
    assert post_login(studio_url, "s3cret") == 200
    codes = [post_login(studio_url, f"wrong{i}") for i in range(8)]
    assert codes[:5] == [400] * 5, codes  # Gradio's own answer to a wrong password
    assert set(codes[5:]) == {429}, codes  # then alice waits
    assert post_login(studio_url, "s3cret") == 429  # even with the right password, until the lockout ends


def test_one_users_typos_do_not_lock_out_another_user_at_the_same_address(studio_url):
    assert [post_login(studio_url, f"typo{i}") for i in range(6)][-1] == 429  # alice is locked out
    assert post_login(studio_url, "hunter2", user="bob", multipart=True) == 200  # the browser's form, as bob
    assert post_login(studio_url, "hunter2", user="bob") == 200
    assert post_login(studio_url, "s3cret") == 429


def test_metrics_guesses_are_throttled_with_the_logins(studio_url):
    assert get_metrics(studio_url, "alice", "s3cret")[0] == 200
    codes = [get_metrics(studio_url, "alice", f"guess{i}")[0] for i in range(7)]
    assert codes[:5] == [401] * 5 and set(codes[5:]) == {429}, codes
    status, headers = get_metrics(studio_url, "alice", "s3cret")
    assert status == 429 and int(headers["retry-after"]) >= 1
    assert post_login(studio_url, "s3cret") == 429  # one throttle: the page waits too
    assert get_metrics(studio_url, "bob", "wrong")[0] == 401  # another user name is counted on its own


def test_guesses_at_login_and_metrics_add_up(studio_url):
    assert [post_login(studio_url, f"wrong{i}") for i in range(3)] == [400] * 3
    assert [get_metrics(studio_url, "alice", f"wrong{i}")[0] for i in range(2)] == [401] * 2
    assert post_login(studio_url, "s3cret") == 429


# ---------------------------------------------------------------------------------------------
# The throttle on its own (a stand-in login route; no Gradio)


def stand_in(delay: float = 0.0, **limits) -> tuple[LoginThrottle, list]:
    """LoginThrottle over a /login that accepts any user with password 'ok' (after `delay` s)."""
    reached = []

    async def login(request):
        form = await request.form()
        reached.append(form.get("username"))
        await asyncio.sleep(delay)
        ok = form.get("password") == "ok"
        return JSONResponse({"success": ok}, status_code=200 if ok else 400)

    return LoginThrottle(Starlette(routes=[Route("/login", login, methods=["POST"])]), **limits), reached


async def attempts(app, pairs: list[tuple[str, str]], parallel: bool = False) -> list[int]:
    transport = httpx.ASGITransport(app=app, client=("10.0.0.1", 1234))
    async with httpx.AsyncClient(transport=transport, base_url="http://studio") as client:

        async def one(user, password):
            return (await client.post("/login", data={"username": user, "password": password})).status_code

        if parallel:
            return list(await asyncio.gather(*(one(*pair) for pair in pairs)))
        return [await one(*pair) for pair in pairs]


def test_one_address_cannot_try_user_name_after_user_name():
    throttle, _ = stand_in(max_failures=3, address_factor=4)  # 12 failures per address
    codes = asyncio.run(attempts(throttle, [(f"user{i}", "guess") for i in range(15)]))
    assert codes[:12] == [400] * 12 and set(codes[12:]) == {429}, codes
    assert asyncio.run(attempts(throttle, [("someone-new", "ok")])) == [429]  # the whole address waits now


def test_parallel_guesses_cannot_outrun_the_count():
    throttle, reached = stand_in(delay=0.2, max_failures=5)
    codes = asyncio.run(attempts(throttle, [("alice", f"guess{i}") for i in range(40)], parallel=True))
    assert len(reached) <= 5, f"{len(reached)} guesses reached the password check"
    assert codes.count(429) >= 35


def test_lockout_ends_doubles_and_a_success_clears_the_record():
    now = [0.0]
    throttle, _ = stand_in(max_failures=3, window_seconds=60, lockout_seconds=10, clock=lambda: now[0])
    assert asyncio.run(attempts(throttle, [("alice", "guess")] * 4)) == [400, 400, 400, 429]
    assert throttle.users.wait_left(("10.0.0.1", "alice")) == 10
    now[0] = 11  # the lockout is over
    assert asyncio.run(attempts(throttle, [("alice", "guess")] * 4)) == [400, 400, 400, 429]
    assert throttle.users.wait_left(("10.0.0.1", "alice")) == 20  # the second one is twice as long
    assert asyncio.run(attempts(throttle, [("bob", "guess"), ("bob", "ok")])) == [400, 200]  # bob is not alice
    now[0] = 40
    assert asyncio.run(attempts(throttle, [("alice", "guess"), ("alice", "ok"), ("alice", "guess")])) == [400, 200, 400]
    assert throttle.users.wait_left(("10.0.0.1", "alice")) == 0  # the success cleared alice's failures


def test_memory_is_bounded_however_many_user_names_are_tried():
    throttle, _ = stand_in(max_failures=3, max_clients=100, address_factor=10**6)
    codes = asyncio.run(attempts(throttle, [(f"user{i}", "guess") for i in range(1000)]))
    assert set(codes) == {400}
    assert len(throttle.users.records) <= 100 and len(throttle.addresses.records) <= 100
    assert throttle.in_flight == {}
