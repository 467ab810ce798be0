"""A private PostgreSQL server on a free loopback port, from Debian's ``postgresql`` package
(``.ci/run`` installs it), for the tests of holds that follow the database transaction.

PostgreSQL refuses to run as root: when the tests run as root, the server runs as the
package's ``postgres`` user (``runuser``), in a directory of its own.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Self

from .servers import HarnessError, free_port

__all__ = ["PostgresServer", "postgres_bin"]


def postgres_bin() -> Path | None:
    """The newest installed PostgreSQL's bin directory (Debian's layout), or None."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda path: int(Path(path).parent.parent.name),
    )
    return Path(found[-1]).parent if found else None


class PostgresServer:
    """``initdb`` in a temporary directory, then ``postgres`` on a free port (fsync off: a
    test server); trust authentication for the ``postgres`` user on loopback only."""

    def __init__(self) -> None:
        bin_dir = postgres_bin()
        if bin_dir is None:
            raise HarnessError("PostgreSQL is not installed (apt-get install postgresql)")
        self.bin = bin_dir
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="drl-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self._as: list[str] = []
        if os.geteuid() == 0:
            self._as = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.dir, "postgres", "postgres")

    @property
    def settings(self) -> dict[str, object]:
        """A ``DATABASES`` entry for the server's ``postgres`` database."""
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": "postgres",
            "USER": "postgres",
            "HOST": "127.0.0.1",
            "PORT": str(self.port),
        }

    def _run(self, *args: str, timeout: float = 60) -> None:
        done = subprocess.run(
            [*self._as, *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise HarnessError(f"{args[0]} failed: {done.stdout}{done.stderr}{log}")

    def start(self) -> Self:
        self._run(
            str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
            "--auth=trust", "-E", "UTF8", "--no-sync",
        )  # fmt: skip
        options = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off"
        )
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
            "-o", options, "-w", "-t", "60", "start",
        )  # fmt: skip
        return self

    def stop(self) -> None:
        if self.data.exists():
            subprocess.run(
                [*self._as, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                 "-w", "stop"],
                capture_output=True, timeout=60, check=False,
            )  # fmt: skip
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
