"""Local-first security: where the server may bind, and who may call it."""

from __future__ import annotations

import hmac
import ipaddress
import socket

from mlx_sdm.errors import MlxSdmError

LOOPBACK_NAMES = {"localhost", "ip6-localhost", "ip6-loopback"}


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and the names that resolve only to them (``localhost``)."""
    host = host.strip().strip("[]")
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:  # a host name: loopback only when every address it resolves to is
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


def check_bind(host: str, api_key: str | None) -> None:
    """Refuse to listen beyond this machine without an API key."""
    if not is_loopback(host) and not api_key:
        raise MlxSdmError(
            f"--host {host} would let other machines reach the model; give --api-key KEY "
            "(or set MLX_SDM_API_KEY), or keep the default --host 127.0.0.1"
        )


def authorized(header: str | None, api_key: str | None) -> bool:
    """``Authorization: Bearer KEY`` matches (constant-time); everything passes when no key is set."""
    if not api_key:
        return True
    if not header or not header.lower().startswith("bearer "):
        return False
    return hmac.compare_digest(header[7:].strip().encode("utf-8"), api_key.encode("utf-8"))
