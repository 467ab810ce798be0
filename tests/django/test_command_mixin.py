"""SemaphoreCommandMixin: real ``manage.py`` processes of tests/testapp, and call_command().

The ``limited`` command (limit 2) logs its start and end with ``time.monotonic_ns()``, which
is one clock for every process on the machine, so overlaps are measured, not guessed.
"""

from __future__ import annotations

import io
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from django_redis_locks import Semaphore
from django_redis_locks.core import Backend
from django_redis_locks.inspection import force_release, get_semaphore
from django_redis_locks.signals import hold_released
from tests.harness.servers import wait_until
from tests.testapp.runner import (
    Manage,
    finish,
    intervals,
    manage_processes,
    peak,
    read_log,
    records_of,
    sigint_ignored,
)

LIMITED = "command:limited"


@pytest.fixture
def manage(redis_server: Any, namespace: str) -> Iterator[Manage]:
    with manage_processes(redis_server.url, namespace) as manage:
        yield manage


@pytest.fixture
def locks_namespace(namespace: str) -> Iterator[str]:
    """In-process commands use the test's namespace (the one of ``backend``)."""
    with override_settings(DJANGO_REDIS_LOCKS={"CACHE_ALIAS": "locks", "NAMESPACE": namespace}):
        yield namespace


def holders(backend: Backend, name: str = LIMITED) -> int:
    info = get_semaphore(name, client=backend)
    return 0 if info is None else info.count


def waiting(backend: Backend, name: str = LIMITED) -> int:
    info = get_semaphore(name, client=backend)
    return 0 if info is None else info.waiting


def started(log: Path, count: int) -> bool:
    return len(records_of(log, "S")) >= count


# -- six copies at once -------------------------------------------------------------------
def test_six_copies_that_wait_run_in_turn_never_more_than_two_at_once(
    manage: Manage, backend: Backend, tmp_path: Path
) -> None:
    log, gate = tmp_path / "runs.log", tmp_path / "gate"
    args = ("limited", "--log", str(log), "--gate", str(gate), "--sleep", "0.2")
    copies = [manage.start(*args, "--semaphore-wait", "30") for _ in range(6)]
    # Two run (held at the gate), four queue for a slot.
    wait_until(lambda: started(log, 2) and waiting(backend) == 4, timeout=30, what="2 in, 4 queued")
    info = get_semaphore(LIMITED, client=backend)
    assert info is not None and (info.limit, info.count) == (2, 2)
    pids = {copy.pid for copy in copies}
    for holder in info.holders:
        assert holder.label == "manage.py limited"
        assert holder.pid in pids
        assert holder.metadata["argv"][:2] == ["manage.py", "limited"]
        assert "--semaphore-wait" in holder.metadata["argv"]
    gate.touch()
    results = [finish(copy) for copy in copies]
    assert [code for code, _, _ in results] == [0] * 6, results
    spans = intervals(log)
    assert set(spans) == pids  # every copy ran, one after another
    assert peak(list(spans.values())) == 2
    assert holders(backend) == 0


@pytest.mark.parametrize(
    ("policy", "code", "message"),
    [
        ("skip", 0, "manage.py limited: skipped: 2 copies already running (limit 2)"),
        (
            "fail",
            1,
            "CommandError: manage.py limited: not running: 2 copies already running (limit 2)",
        ),
    ],
)
def test_six_copies_four_find_no_slot_and_do_not_run(
    manage: Manage, backend: Backend, tmp_path: Path, policy: str, code: int, message: str
) -> None:
    log, gate = tmp_path / "runs.log", tmp_path / "gate"
    args: tuple[str, ...] = ("limited", "--log", str(log), "--gate", str(gate))
    if policy != "skip":  # skip is the command's default
        args += ("--semaphore-policy", policy)
    copies = [manage.start(*args) for _ in range(6)]

    def four_done() -> bool:
        return sum(copy.poll() is not None for copy in copies) == 4

    wait_until(lambda: four_done() and started(log, 2), timeout=30, what="4 turned away, 2 in")
    refused = [copy for copy in copies if copy.poll() is not None]
    ran = [copy for copy in copies if copy.poll() is None]
    gate.touch()
    for copy in refused:
        returncode, _, stderr = finish(copy)
        assert returncode == code, stderr
        assert message in stderr
    for copy in ran:
        assert finish(copy)[0] == 0
    spans = intervals(log)
    assert set(spans) == {copy.pid for copy in ran}  # the refused ones never ran
    assert peak(list(spans.values())) == 2


# -- signals ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("signum", "returncode"),
    [(signal.SIGTERM, 143), (signal.SIGINT, -signal.SIGINT)],  # a shell shows 143 and 130
    ids=["SIGTERM", "SIGINT"],
)
def test_a_signal_gives_the_slot_back_at_once(
    manage: Manage, backend: Backend, tmp_path: Path, signum: int, returncode: int
) -> None:
    log, gate = tmp_path / "runs.log", tmp_path / "gate"
    common = ("--log", str(log), "--semaphore-limit", "1", "--semaphore-timeout", "30")
    first = manage.start("limited", *common, "--gate", str(gate))
    wait_until(lambda: started(log, 1), timeout=30, what="the first copy to run")
    second = manage.start("limited", *common, "--semaphore-wait", "30")
    wait_until(lambda: waiting(backend) == 1, timeout=30, what="the second copy to queue")
    sent = time.monotonic_ns()
    first.send_signal(signum)
    code, _, stderr = finish(first)
    assert code == returncode, stderr
    name = signal.Signals(signum).name
    assert f"manage.py limited: stopped by {name}; its slot was given back" in stderr
    assert finish(second)[0] == 0
    [_, second_start] = sorted(r.ns for r in records_of(log, "S"))
    latency = (second_start - sent) / 1e9
    print(f"{name}: the waiting copy ran {latency * 1000:.0f} ms after the signal (TTL 30 s)")
    assert latency < 1.0
    assert [r.pid for r in records_of(log, "E")] == [second.pid]  # the first never finished
    assert holders(backend) == 0


@pytest.mark.parametrize(
    ("signum", "returncode"),
    [(signal.SIGTERM, 143), (signal.SIGINT, -signal.SIGINT)],
    ids=["SIGTERM", "SIGINT"],
)
def test_a_signal_decides_the_exit_even_when_another_error_is_raised_over_it(
    manage: Manage, backend: Backend, tmp_path: Path, signum: int, returncode: int
) -> None:
    """On Python 3.13 a signal that lands inside ``threading.Event.wait()`` can come out as
    ``RuntimeError: release unlocked lock`` raised over the signal's exception (cpython#118433;
    measured: 4 of 3,000 interrupted waits). The run still exits as the signal says."""
    log, gate = tmp_path / "runs.log", tmp_path / "gate"
    run = manage.start(
        "limited",
        *("--log", str(log), "--semaphore-limit", "1", "--semaphore-timeout", "30"),
        *("--gate", str(gate), "--raise-on-unwind"),
    )
    wait_until(lambda: started(log, 1), timeout=30, what="the copy to run")
    run.send_signal(signum)
    code, _, stderr = finish(run)
    assert code == returncode, stderr
    name = signal.Signals(signum).name
    assert f"manage.py limited: stopped by {name}; its slot was given back" in stderr
    assert "RuntimeError: release unlocked lock" in stderr  # logged, not lost
    assert holders(backend) == 0


def test_a_command_started_with_sigint_ignored_keeps_ignoring_it(
    manage: Manage, backend: Backend, tmp_path: Path
) -> None:
    """Started by ``nohup`` or as a shell's background job, a run ignores Ctrl-C as it was
    told to (the mixin installs no handler for an ignored signal); SIGTERM still gives its
    slot back."""
    log, gate = tmp_path / "runs.log", tmp_path / "gate"
    run = manage.start(
        "limited",
        *("--log", str(log), "--semaphore-limit", "1", "--semaphore-timeout", "30"),
        *("--gate", str(gate)),
        preexec_fn=sigint_ignored,
    )
    wait_until(lambda: started(log, 1), timeout=30, what="the copy to run")
    run.send_signal(signal.SIGINT)
    with pytest.raises(subprocess.TimeoutExpired):
        run.wait(timeout=1.0)  # still running a second after the SIGINT: ignored
    assert holders(backend) == 1
    run.send_signal(signal.SIGTERM)
    code, _, stderr = finish(run)
    assert code == 143, stderr
    assert "manage.py limited: stopped by SIGTERM; its slot was given back" in stderr
    assert holders(backend) == 0


def test_sigterm_while_waiting_for_a_slot_leaves_the_queue(
    manage: Manage, backend: Backend, tmp_path: Path
) -> None:
    holder = Semaphore(LIMITED, 1, client=backend)
    assert holder.acquire(blocking=False)
    log = tmp_path / "runs.log"
    waiter = manage.start(
        "limited", "--log", str(log), "--semaphore-limit", "1", "--semaphore-wait", "30"
    )
    wait_until(lambda: waiting(backend) == 1, timeout=30, what="the copy to queue")
    waiter.send_signal(signal.SIGTERM)
    code, _, stderr = finish(waiter)
    assert code == 143, stderr
    assert stderr.strip() == "manage.py limited: stopped by SIGTERM"
    assert waiting(backend) == 0 and holders(backend) == 1
    assert not read_log(log)
    holder.release()


def test_a_sigkilled_copy_frees_its_slot_only_after_its_ttl(
    manage: Manage, backend: Backend, tmp_path: Path
) -> None:
    ttl = 1.5
    log, gate = tmp_path / "runs.log", tmp_path / "gate"
    common = ("--log", str(log), "--semaphore-limit", "1", "--semaphore-timeout", str(ttl))
    first = manage.start("limited", *common, "--gate", str(gate))
    wait_until(lambda: started(log, 1), timeout=30, what="the first copy to run")
    second = manage.start("limited", *common, "--semaphore-wait", "30")
    wait_until(lambda: waiting(backend) == 1, timeout=30, what="the second copy to queue")
    killed = time.monotonic_ns()
    first.send_signal(signal.SIGKILL)
    assert finish(first)[0] == -signal.SIGKILL
    assert finish(second)[0] == 0
    [_, second_start] = sorted(r.ns for r in records_of(log, "S"))
    delay = (second_start - killed) / 1e9
    print(f"SIGKILL: the waiting copy ran {delay:.3f} s after the kill (TTL {ttl} s)")
    # The heartbeat had renewed the TTL at most a third of it before the kill.
    assert ttl * 2 / 3 - 0.1 < delay < ttl + 1.0


# -- exceptions ---------------------------------------------------------------------------
def test_an_exception_in_handle_gives_the_slot_back(manage: Manage, backend: Backend) -> None:
    done = manage.run("failing")
    assert done.returncode == 1
    assert "RuntimeError: failing on purpose" in done.stderr
    assert get_semaphore("command:failing", client=backend) is None
    done = manage.run("failing", "--command-error")
    assert (done.returncode, done.stderr.strip()) == (1, "CommandError: failing on purpose")
    assert get_semaphore("command:failing", client=backend) is None


@pytest.mark.usefixtures("locks_namespace")
def test_an_exception_in_handle_gives_the_slot_back_in_process(backend: Backend) -> None:
    with pytest.raises(RuntimeError, match="failing on purpose"):
        call_command("failing")
    assert get_semaphore("command:failing", client=backend) is None
    with pytest.raises(CommandError, match="failing on purpose"):
        call_command("failing", command_error=True)
    assert get_semaphore("command:failing", client=backend) is None


# -- call_command -------------------------------------------------------------------------
@pytest.mark.usefixtures("locks_namespace")
def test_call_command_takes_a_slot_and_respects_the_limit(backend: Backend) -> None:
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    others = [Semaphore(LIMITED, 2, client=backend, timeout=10) for _ in range(2)]
    for other in others:
        assert other.acquire(blocking=False)
    stderr = io.StringIO()
    assert call_command("limited", output="ran", stderr=stderr) is None
    assert stderr.getvalue() == "manage.py limited: skipped: 2 copies already running (limit 2)\n"
    with pytest.raises(CommandError, match=r"not running: 2 copies already running \(limit 2\)"):
        call_command("limited", semaphore_policy="fail")
    started_at = time.monotonic()
    with pytest.raises(CommandError, match=r"waited 0.3 s for a slot of 'command:limited'"):
        call_command("limited", semaphore_wait=0.3)
    assert time.monotonic() - started_at >= 0.3
    others[0].release()
    stdout = io.StringIO()
    assert call_command("limited", "--ensure", output="ran", stdout=stdout) == "ran"
    start, end = stdout.getvalue().splitlines()[:2]
    assert start.startswith("S ") and end.startswith("E ")
    assert holders(backend) == 1  # the slot was given back
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == handlers
    others[1].release()


@pytest.mark.usefixtures("locks_namespace")
def test_call_command_from_another_thread(backend: Backend, tmp_path: Path) -> None:
    log, gate = tmp_path / "runs.log", tmp_path / "gate"
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    failures: list[BaseException] = []

    def run() -> None:
        try:
            call_command("limited", log=str(log), gate=str(gate))
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=run, name="command-thread")
    thread.start()
    try:
        wait_until(lambda: started(log, 1) or bool(failures), timeout=10, what="the run")
    except BaseException:
        gate.touch()
        thread.join(timeout=10)
        raise
    assert not failures
    # The slot is the thread's, and is shown as such.
    info = get_semaphore(LIMITED, client=backend)
    assert info is not None and info.count == 1
    [holder] = info.holders
    assert holder.holder_id == read_log(log)[0].holder_id
    assert holder.label == "manage.py limited"
    assert holder.thread is not None and holder.thread.startswith("command-thread")
    assert holder.metadata["argv"] == ["call_command", "limited"]
    # No signal handler was installed from that thread; the limit holds for the others.
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == handlers
    other = Semaphore(LIMITED, 2, client=backend)
    assert other.acquire(blocking=False)
    with pytest.raises(CommandError, match=r"2 copies already running"):
        call_command("limited", semaphore_policy="fail")
    gate.touch()
    thread.join(timeout=10)
    assert not thread.is_alive() and not failures
    assert holders(backend) == 1
    other.release()


@pytest.mark.usefixtures("locks_namespace")
def test_a_command_that_does_not_cooperate_is_still_limited(backend: Backend) -> None:
    # "bare": add_arguments() and handle() call no super(), handle() ignores the semaphore.
    holder = Semaphore("command:bare", 1, client=backend)
    assert holder.acquire(blocking=False)
    stdout = io.StringIO()
    with pytest.raises(CommandError, match=r"not running: 1 copy already running \(limit 1\)"):
        call_command("bare", stdout=stdout)
    assert stdout.getvalue() == ""
    holder.release()
    call_command("bare", "hello", stdout=stdout)
    assert stdout.getvalue() == "hello\n"
    assert get_semaphore("command:bare", client=backend) is None


# -- heartbeat and loss -------------------------------------------------------------------
def test_the_heartbeat_keeps_a_slot_whose_ttl_is_shorter_than_the_run(
    manage: Manage, backend: Backend, tmp_path: Path
) -> None:
    log = tmp_path / "runs.log"
    args = ("--log", str(log), "--semaphore-limit", "1", "--semaphore-timeout", "1")
    run = manage.start("limited", *args, "--sleep", "3", "--ensure")
    wait_until(lambda: started(log, 1), timeout=30, what="the command to run")
    semaphore = Semaphore(LIMITED, 1, client=backend, timeout=5)
    # Twice the TTL: the slot would have expired twice without heartbeats.
    assert not semaphore.acquire(timeout=2.2)
    code, _, stderr = finish(run)
    assert code == 0, stderr
    assert "lost" not in stderr
    [(start, end)] = intervals(log).values()
    assert (end - start) / 1e9 >= 3
    assert semaphore.acquire(timeout=5)
    semaphore.release()


def test_a_lost_slot_is_reported_and_the_run_goes_on(
    manage: Manage, backend: Backend, tmp_path: Path
) -> None:
    log, gate = tmp_path / "runs.log", tmp_path / "gate"
    args = ("--log", str(log), "--gate", str(gate), "--semaphore-timeout", "1")
    run = manage.start("limited", *args)
    wait_until(lambda: started(log, 1), timeout=30, what="the command to run")
    [start] = records_of(log, "S")
    evicted = time.monotonic_ns()
    assert force_release(LIMITED, start.holder_id, kind="semaphore", client=backend)
    wait_until(lambda: bool(records_of(log, "L")), timeout=5, what="the command to learn it")
    [learnt] = records_of(log, "L")
    print(f"loss noticed {(learnt.ns - evicted) / 1e6:.0f} ms after the forced release (TTL 1 s)")
    assert (learnt.ns - evicted) / 1e9 < 1.0  # within a renewal period (a third of the TTL)
    gate.touch()
    code, _, stderr = finish(run)
    assert code == 0, stderr  # without semaphore_abort_on_loss the run finishes
    assert (
        "LOG ERROR django_redis_locks.commands: command: manage.py limited LOST its slot of "
        f"'command:limited' (holder {start.holder_id}): it was force-released" in stderr
    )
    assert (
        "manage.py limited: lost its slot of 'command:limited': it was force-released; "
        "another copy may run at the same time" in stderr
    )
    assert [r.kind for r in read_log(log)] == ["S", "L", "E"]


def test_with_abort_on_loss_a_lost_slot_stops_the_run(
    manage: Manage, backend: Backend, tmp_path: Path
) -> None:
    log, gate = tmp_path / "runs.log", tmp_path / "gate"
    args = ("--log", str(log), "--gate", str(gate), "--semaphore-timeout", "1")
    run = manage.start("limited_abort", *args)
    wait_until(lambda: started(log, 1), timeout=30, what="the command to run")
    [start] = records_of(log, "S")
    evicted = time.monotonic()
    assert force_release("command:limited_abort", start.holder_id, kind="semaphore", client=backend)
    code, _, stderr = finish(run, timeout=10)
    stopped_after = time.monotonic() - evicted
    print(f"abort on loss: the run stopped {stopped_after * 1000:.0f} ms after the forced release")
    assert code == 1, stderr
    assert "CommandError: manage.py limited_abort lost its slot: it was force-released" in stderr
    assert "LOG ERROR django_redis_locks.commands" in stderr
    assert "manage.py limited_abort: lost its slot" in stderr and "; stopping the run" in stderr
    assert not records_of(log, "E")  # stopped before the gate opened
    assert stopped_after < 2.0


@pytest.mark.usefixtures("locks_namespace")
def test_ensure_held_in_handle_turns_a_loss_into_a_command_error(
    backend: Backend, tmp_path: Path
) -> None:
    log, gate = tmp_path / "runs.log", tmp_path / "gate"
    failures: list[BaseException] = []

    def run() -> None:
        try:
            call_command("limited", "--ensure", log=str(log), gate=str(gate), stderr=io.StringIO())
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        wait_until(lambda: started(log, 1), timeout=10, what="the command to run")
        [start] = records_of(log, "S")
        assert force_release(LIMITED, start.holder_id, kind="semaphore", client=backend)
    finally:
        gate.touch()  # the run goes on to ensure_held(), which finds the slot gone
        thread.join(timeout=10)
    [failure] = failures
    assert isinstance(failure, CommandError)
    assert str(failure).startswith("manage.py limited lost its slot: ")


@pytest.mark.usefixtures("locks_namespace")
def test_abort_on_loss_outside_the_main_thread_fails_the_run_when_it_ends(
    backend: Backend, tmp_path: Path
) -> None:
    log, gate = tmp_path / "runs.log", tmp_path / "gate"
    stderr = io.StringIO()
    failures: list[BaseException] = []

    def run() -> None:
        try:
            call_command(
                "limited_abort", log=str(log), gate=str(gate), semaphore_timeout=1, stderr=stderr
            )
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        wait_until(lambda: started(log, 1), timeout=10, what="the command to run")
        [start] = records_of(log, "S")
        assert force_release(
            "command:limited_abort", start.holder_id, kind="semaphore", client=backend
        )
        wait_until(lambda: bool(records_of(log, "L")), timeout=5, what="the command to learn it")
    finally:
        gate.touch()  # nothing could interrupt the thread: it runs to its end
        thread.join(timeout=10)
    assert [r.kind for r in read_log(log)] == ["S", "L", "E"]
    [failure] = failures
    assert isinstance(failure, CommandError)
    assert str(failure) == "manage.py limited_abort lost its slot: it was force-released"
    assert "; the run fails when it ends" in stderr.getvalue()


# -- options ------------------------------------------------------------------------------
@pytest.mark.usefixtures("locks_namespace")
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"semaphore_limit": 0}, "--semaphore-limit must be from 1 to 10000 (got 0)"),
        ({"semaphore_limit": "two"}, "--semaphore-limit must be a number (got 'two')"),
        ({"semaphore_wait": -1}, "--semaphore-wait must not be negative (got -1)"),
        ({"semaphore_wait": float("nan")}, "--semaphore-wait must be a number of seconds"),
        ({"semaphore_timeout": 0}, "--semaphore-timeout must be at least 0.001 seconds"),
        ({"semaphore_policy": "later"}, "--semaphore-policy must be one of wait, skip, fail"),
        (
            {"semaphore_policy": "skip", "semaphore_wait": 5},
            "--semaphore-wait makes a run wait for a slot; it cannot be combined with "
            "--semaphore-policy skip",
        ),
    ],
)
def test_bad_option_values_are_command_errors(
    backend: Backend, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(CommandError) as caught:
        call_command("limited", **options)
    assert message in str(caught.value)
    assert get_semaphore(LIMITED, client=backend) is None


@pytest.mark.usefixtures("locks_namespace")
def test_bad_option_text_is_a_command_error() -> None:
    with pytest.raises(CommandError, match="argument --semaphore-limit: invalid int value"):
        call_command("limited", "--semaphore-limit", "x")
    with pytest.raises(CommandError, match="argument --semaphore-policy: invalid choice"):
        call_command("limited", "--semaphore-policy", "later")


def test_a_bad_option_value_exits_1_from_manage_py(manage: Manage) -> None:
    done = manage.run("limited", "--semaphore-limit", "0")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "CommandError: --semaphore-limit must be from 1 to 10000 (got 0)"
    )


@pytest.mark.usefixtures("locks_namespace")
def test_a_limit_that_differs_from_the_running_copies_is_explained(backend: Backend) -> None:
    running = Semaphore(LIMITED, 3, client=backend)
    assert running.acquire(blocking=False)
    with pytest.raises(CommandError) as caught:
        call_command("limited")
    assert str(caught.value) == (
        "manage.py limited: 'command:limited' is in use with limit 3 by runs that are still "
        "going; this run asks for 2. Every copy must use the same limit: pass "
        "--semaphore-limit 3, or wait until those runs ended (the new limit then takes over)"
    )
    call_command("limited", semaphore_limit=3, stdout=io.StringIO())  # agrees: runs
    assert holders(backend) == 1
    running.release()


@pytest.mark.usefixtures("locks_namespace")
def test_a_renewal_in_flight_when_the_run_gives_its_slot_back_is_no_loss(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The heartbeat sent a renewal; the run ends and gives its slot back before the renewal
    reaches Redis, which then finds no slot: that is the end of the run, not a loss."""
    renewing, gate, renewed = threading.Event(), threading.Event(), threading.Event()
    run_many = Backend.run_many

    def held_back(self: Backend, calls: Any) -> list[Any]:
        renewal = any(call.script.name == "sem_refresh" for call in calls)
        if renewal and not gate.is_set():
            renewing.set()
            gate.wait(5)  # in flight until the slot was given back
        try:
            return run_many(self, calls)
        finally:
            if renewal and gate.is_set():
                renewed.set()

    def on_released(sender: Any, **kwargs: Any) -> None:
        gate.set()  # the renewal goes on now, and finds the slot gone...
        renewed.wait(2)  # ...before the run's give-back returns

    log, start_gate = tmp_path / "runs.log", tmp_path / "gate"

    def open_the_gate() -> None:
        if renewing.wait(10):
            start_gate.touch()

    threading.Thread(target=open_the_gate).start()
    monkeypatch.setattr(Backend, "run_many", held_back)
    hold_released.connect(on_released)
    stderr = io.StringIO()
    try:
        call_command(
            "limited_abort",
            log=str(log),
            gate=str(start_gate),
            semaphore_timeout=0.6,
            stderr=stderr,
        )  # raised CommandError ("lost its slot") after giving it back
    finally:
        hold_released.disconnect(on_released)
    assert renewed.is_set(), "the renewal in flight was not applied after the release"
    assert [r.kind for r in read_log(log)] == ["S", "E"]
    assert "lost" not in stderr.getvalue()
