"""The least-privilege Redis ACL user of django-redis-locks, and the suite's ACL mode.

The library needs, on keys under its namespace and on its wake-up channel only:

- from the client: ``EVALSHA`` (every operation), ``SCRIPT LOAD`` (after a ``NOSCRIPT``),
  ``SUBSCRIBE`` (the wake-up listener), ``PING`` (redis-py's health checks, when
  ``health_check_interval`` is set), ``WAIT`` and ``ROLE`` (``wait_for_replicas``), and
  ``TIME`` once per process and server (the clock acquire deadlines are counted in; granted
  with the script commands, which call it too);
- inside its scripts (Redis 7 checks script calls against the ACL too): the commands listed in
  :data:`SCRIPT_COMMANDS`, read from ``redis.call`` in ``scripts/*.lua`` and ``scripts/lib``.

``AUTH`` and ``HELLO`` need no permission. redis-py also sends ``CLIENT SETINFO`` on connect
and ignores a refusal (Redis 7.0 does not know the command, and ACL rules cannot name it
there), so it is left out of the rule and its refusals are not counted as denials.

With ``DRL_TEST_ACL=1`` the harness starts every server with this user (``--user``, so a
restart keeps it), keys and channels of every namespace's shape (``~*:{*}:*``,
``&*:wake*``: the suite uses many namespaces), and hands out URLs that log in as it: the
Django caches, the ``backend`` fixture and worker processes then run as the user, while
``server.client()``, ``redis_client`` and the harness's own probes stay on the unrestricted
default user. The session server's ``ACL LOG`` is read after each test, a private server's
before it stops: a refusal of the library's user is an error of the test that caused it.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "CLIENT_COMMANDS",
    "CLUSTER_COMMANDS",
    "SCRIPT_COMMANDS",
    "UNIQUE_TASK_COMMANDS",
    "AclUser",
    "acl_mode",
    "denials",
    "deployment_rule",
    "library_user",
    "namespace_user",
    "silent_channel",
    "unrestricted_url",
]

#: What the library sends outside its scripts.
CLIENT_COMMANDS = ("evalsha", "script|load", "subscribe", "ping", "wait", "role", "info")
#: What its scripts call, in the order the rule lists them.
SCRIPT_COMMANDS = (
    "time",
    "hget",
    "hmget",
    "hgetall",
    "hlen",
    "hset",
    "hdel",
    "del",
    "exists",
    "pexpire",
    "pttl",
    "zadd",
    "zcount",
    "zrange",
    "zrangebylex",
    "zrangebyscore",
    "zrank",
    "zrem",
    "zscore",
    "publish",
)
#: What unique tasks send on top, outside scripts: their ticket records (plain STRING keys).
UNIQUE_TASK_COMMANDS = ("get", "set", "getdel")
#: What redis-py's cluster clients need on top: the slot map and the command table.
CLUSTER_COMMANDS = ("cluster|slots", "command")
#: Refusals that are no denial of the library (redis-py ignores them; see the module doc).
IGNORED_DENIALS = frozenset({"client|setinfo"})

#: The environment variable that turns the ACL mode on.
ENV = "DRL_TEST_ACL"
#: The library user's name, in the suite and in the documented rule.
USER = "drl"


@dataclass(frozen=True)
class AclUser:
    """One ACL user: name, password, key and channel patterns, and the commands it may run."""

    name: str
    password: str
    key_patterns: tuple[str, ...]
    channel_patterns: tuple[str, ...]
    commands: tuple[str, ...] = CLIENT_COMMANDS + SCRIPT_COMMANDS
    _extra: tuple[str, ...] = field(default=(), repr=False)

    def rule(self) -> list[str]:
        """The ``ACL SETUSER <name>`` arguments: everything reset, then exactly these rights."""
        return [
            "reset",
            "on",
            f">{self.password}",
            *(f"~{pattern}" for pattern in self.key_patterns),
            "resetchannels",  # reset may grant all channels (acl-pubsub-default allchannels)
            *(f"&{pattern}" for pattern in self.channel_patterns),
            *(f"+{command}" for command in (*self.commands, *self._extra)),
        ]

    def config_args(self) -> list[str]:
        """``redis-server`` arguments that create the user at start (and at every restart)."""
        return ["--user", self.name, *self.rule()]

    def for_cluster(self) -> AclUser:
        """The same user with what a cluster client needs on top."""
        return replace(self, _extra=CLUSTER_COMMANDS)

    def credentials(self) -> str:
        """``user:password@`` for a URL."""
        return f"{self.name}:{self.password}@"


def acl_mode() -> bool:
    """Whether this run uses the ACL mode (``DRL_TEST_ACL=1``)."""
    return os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes")


_SESSION_PASSWORD = secrets.token_hex(16)


def library_user() -> AclUser | None:
    """The user the library logs in as in ACL mode (keys and channels of any namespace, and
    the documented addition for unique tasks), or None outside it."""
    if not acl_mode():
        return None
    return AclUser(
        USER,
        _SESSION_PASSWORD,
        key_patterns=("*:{*}:*",),
        channel_patterns=("*:wake*",),
        commands=CLIENT_COMMANDS + SCRIPT_COMMANDS + UNIQUE_TASK_COMMANDS,
    )


def namespace_user(namespace: str, password: str, name: str = USER) -> AclUser:
    """The user of a deployment whose locks use ``namespace``: ``~<ns>:*`` and ``&<ns>:*``."""
    return AclUser(
        name, password, key_patterns=(f"{namespace}:*",), channel_patterns=(f"{namespace}:*",)
    )


def deployment_rule(namespace: str = "drl", password: str = "<password>") -> str:
    """The documented ``ACL SETUSER`` line for ``namespace`` (docs/reference.md shows it)."""
    return " ".join(["ACL SETUSER", USER, *namespace_user(namespace, password).rule()])


def denials(entries: Sequence[dict[str, Any]], user: AclUser) -> list[str]:
    """The ``ACL LOG`` entries that refused ``user`` something, described one per line."""
    found = []
    for entry in entries:
        if entry.get("username") != user.name or entry.get("object") in IGNORED_DENIALS:
            continue
        found.append(
            f"{entry.get('reason')} {entry.get('object')!r} ({entry.get('context')}, "
            f"{entry.get('count')}x)"
        )
    return found


def unrestricted_url(url: str) -> str:
    """``url`` without its login: in the harness, the unrestricted default user, for test-side
    reads and writes next to the library's client (the same URL outside ACL mode)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=netloc))


def silent_channel(backend: Any) -> str:
    """A wake-up channel of ``backend``'s namespace that nobody listens on, for waiters that
    tests queue with raw script calls (the ACL mode allows the namespace's channels only)."""
    return f"{backend.keys.channel}:nobody"
