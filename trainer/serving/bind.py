"""Who may reach a server this project starts: the one rule for the policy server
(`python -m trainer serve`) and the trainer's `--metrics-port`.

A loopback address serves this machine only and needs no key. Any other address (0.0.0.0, a
LAN address, a host name) is reachable from other machines, so the server must be given a key
and clients must send it as `Authorization: Bearer KEY` (or `X-API-Key: KEY`), compared in
constant time.
"""

from __future__ import annotations

import hmac
import ipaddress


class PublicBindError(ValueError):
    """A server was asked to listen beyond this machine without a key; the message names the flags."""


def is_loopback(host: str) -> bool:
    """True for localhost, 127.0.0.0/8 and ::1; a host name other than localhost may resolve to anything."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def require_key_for_public_bind(
    host: str, key: str | None, *, what: str, host_flag: str, key_flag: str, key_env: str, key_name: str = "a key"
) -> None:
    """Refuse (PublicBindError) a non-loopback `host` without `key`: anyone who reaches it could use it.

    what: the server, for people ("the policy server"); host_flag / key_flag / key_env: where the
    user sets the address and the key, named in the message so that it says how to fix it."""
    if not is_loopback(host) and not key:
        raise PublicBindError(
            f"{host_flag} {host} makes {what} reachable from other machines, so it needs {key_name}: pass "
            f"{key_flag} KEY (or set {key_env}); clients then send 'Authorization: Bearer KEY'. Use "
            f"{host_flag} 127.0.0.1 to serve this machine only."
        )


def presented_key(authorization: str | None, x_api_key: str | None = None) -> str:
    """The key a client sent: `Authorization: Bearer KEY`, else `X-API-Key: KEY`, else ''."""
    scheme, _, credentials = (authorization or "").strip().partition(" ")
    if scheme.lower() == "bearer":
        return credentials.strip()
    return (x_api_key or "").strip()


def key_matches(given: str, key: str) -> bool:
    """`given == key` in constant time (no timing hint of how much of a guess was right)."""
    return hmac.compare_digest(given.encode(), key.encode())
