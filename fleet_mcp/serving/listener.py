"""The HTTP listening socket, bound before anything is served so a bind failure is one start-up line."""

from __future__ import annotations

import errno
import socket

from .preflight import StartupError

__all__ = ["bind_failure", "listen"]


def bind_failure(exc: OSError, host: str, port: int) -> str:
    """One line naming why host:port cannot be listened on, and the fix."""
    if exc.errno == errno.EADDRINUSE:
        why = (f"port {port} is already in use: stop the other server (`ss -ltnp 'sport = :{port}'` "
               "shows it) or pick another --port")
    elif exc.errno == errno.EACCES:
        why = f"no permission to use port {port}: pick a port above 1023 with --port"
    elif exc.errno == errno.EADDRNOTAVAIL:
        why = f"{host} is not an address of this machine: use 127.0.0.1 or one of its interfaces' addresses"
    else:
        why = f"{exc.strerror or exc}: check --host and --port"
    return f"cannot listen on {host}:{port}: {why}"


def listen(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A socket listening on host:port, or `StartupError` naming the cause and the fix."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        raise StartupError(f"cannot listen on {host}:{port}: --host {host} is not an address of this machine; "
                           "use 127.0.0.1, or an address or name of one of its interfaces") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: restart without waiting
        sock.bind(address)
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise StartupError(bind_failure(exc, host, port)) from None
    sock.setblocking(False)
    return sock
