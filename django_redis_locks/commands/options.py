"""The ``--semaphore-*`` options of a semaphore-limited management command, and the settings
of one run they resolve to.

``add_semaphore_options`` adds the options to the command's parser; ``resolve_config`` turns
the class attributes and the options given into a checked :class:`SemaphoreConfig`, raising
CommandError that names the option (or attribute) with a bad value; ``shorten_argv`` bounds
the command line a run's slot records in its metadata.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from django.core.management.base import CommandError, CommandParser

from django_redis_locks.core.errors import InvalidArgument, InvalidArgumentType
from django_redis_locks.core.semaphore import check_limit
from django_redis_locks.core.validation import check_bool, check_name, check_ttl, check_wait

__all__ = [
    "POLICIES",
    "Policy",
    "SemaphoreConfig",
    "add_semaphore_options",
    "resolve_config",
    "shorten_argv",
]

Policy = Literal["wait", "skip", "fail"]
#: What a run does when every slot is taken.
POLICIES: tuple[Policy, ...] = ("wait", "skip", "fail")
#: Longest argv recorded in a slot's metadata (arguments, and characters per argument).
_MAX_ARGV_ITEMS = 32
_MAX_ARG_CHARS = 64
#: ... and in all, as JSON: half of the slot's 4 KB of metadata (non-ASCII and control
#: characters take up to 12 bytes each there, so the counts above alone do not bound it).
_MAX_ARGV_JSON_BYTES = 2048


@dataclass(frozen=True, slots=True)
class SemaphoreConfig:
    """The semaphore settings of one run: class attributes, overridden by options."""

    name: str
    limit: int
    timeout: float
    policy: Policy
    wait: float | None
    using: str | None
    abort_on_loss: bool


def add_semaphore_options(
    parser: CommandParser, *, policy: Policy, limit: int, timeout: float
) -> None:
    """Add the ``--semaphore-*`` options; the defaults given are the ones their help shows."""
    group = parser.add_argument_group(
        "semaphore", "at most --semaphore-limit copies of this command run at once"
    )
    group.add_argument(
        "--semaphore-wait",
        type=float,
        default=None,
        metavar="SECONDS",
        help="Wait up to SECONDS for a free slot (implies --semaphore-policy wait).",
    )
    group.add_argument(
        "--semaphore-policy",
        choices=POLICIES,
        default=None,
        help=(
            f"When every slot is taken: wait, skip (exit 0) or fail (exit 1). Default: {policy}."
        ),
    )
    group.add_argument(
        "--semaphore-limit",
        type=int,
        default=None,
        metavar="N",
        help=f"How many copies may run at once. Default: {limit}.",
    )
    group.add_argument(
        "--semaphore-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help=(
            "TTL of this run's slot; it is renewed while the run lives, so this is how "
            f"long a killed run blocks its slot. Default: {timeout:g}."
        ),
    )


def resolve_config(
    options: Mapping[str, Any],
    *,
    name: str,
    limit: int,
    timeout: float,
    policy: Policy,
    wait: float | None,
    using: str | None,
    abort_on_loss: bool,
) -> SemaphoreConfig:
    """A run's settings: the class attributes' values (``name`` without ``command:``), with
    the options applied.

    Raises CommandError naming the option (or attribute) for a bad value.
    """
    wait_option = options.get("semaphore_wait")
    policy_option = options.get("semaphore_policy")
    chosen = policy_option if policy_option is not None else policy
    if wait_option is not None:
        if policy_option is not None and policy_option != "wait":
            raise CommandError(
                f"--semaphore-wait makes a run wait for a slot; it cannot be combined "
                f"with --semaphore-policy {policy_option}"
            )
        chosen = "wait"
    if chosen not in POLICIES:
        source = "--semaphore-policy" if policy_option is not None else "semaphore_policy"
        raise CommandError(f"{source} must be one of {', '.join(POLICIES)} (got {chosen!r})")
    return SemaphoreConfig(
        name=_option("semaphore_name", check_name, f"command:{name}"),
        limit=_resolve(options, "--semaphore-limit", check_limit, limit, kind=int),
        timeout=_resolve(options, "--semaphore-timeout", check_ttl, timeout),
        policy=chosen,
        wait=_resolve(options, "--semaphore-wait", check_wait, wait),
        using=_option("semaphore_using", _check_using, using),
        abort_on_loss=_option(
            "semaphore_abort_on_loss",
            lambda value: check_bool(value, "semaphore_abort_on_loss"),
            abort_on_loss,
        ),
    )


def shorten_argv(argv: list[str]) -> list[str]:
    """``argv`` as a slot records it: at most 32 arguments of 64 characters, 2 KB as JSON."""
    shortened = [
        arg if len(arg) <= _MAX_ARG_CHARS else arg[: _MAX_ARG_CHARS - 3] + "..."
        for arg in argv[:_MAX_ARGV_ITEMS]
    ]
    while shortened and len(json.dumps(shortened)) > _MAX_ARGV_JSON_BYTES:
        shortened.pop()
    if len(argv) > len(shortened):
        shortened.append(f"... ({len(argv) - len(shortened)} more)")
    return shortened


def _resolve(
    options: Mapping[str, Any],
    option: str,
    check: Callable[[Any], Any],
    default: Any,
    *,
    kind: type = float,
) -> Any:
    """An option's value (converting text from call_command), else the class attribute's."""
    key = option.lstrip("-").replace("-", "_")
    value = options.get(key)
    source = option
    if value is None:
        value, source = default, key
    elif isinstance(value, str):
        try:
            value = kind(value)
        except ValueError:
            raise CommandError(f"{option} must be a number (got {value!r})") from None
    return _option(source, check, value)


def _option(attribute: str, check: Callable[[Any], Any], value: Any) -> Any:
    """``check(value)``; a bad value becomes CommandError naming ``attribute`` (an option
    or a class attribute)."""
    try:
        return check(value)
    except (InvalidArgument, InvalidArgumentType) as exc:
        raise CommandError(f"{attribute} {str(exc).partition(': ')[2]}") from None


def _check_using(value: object) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise InvalidArgumentType("using", f"must be a cache alias or None, not {value!r}")
    return value
