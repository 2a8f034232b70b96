"""Debian's coturn (`turnserver`) as a test's child process, on a host of its own (a netns.Lab).

    turn = Coturn(lab, "198.18.0.2", log=ARTIFACTS / "x-coturn.log")
    turn.start(secret)        # use-auth-secret with static-auth-secret=secret, TCP and UDP on 3478
    turn.restart(other)       # the same with another secret (a server minting with the old one
                              # now gets 401 for every credential)
    turn.stop()

Plain TURN (no TLS, no DTLS), realm `minato`, the REST credential scheme Minato mints for
(username "<unix expiry>:<id>", password base64(HMAC-SHA1(secret, username))). Peers may be any
address of 198.18.0.0/15 and nothing else; the CLI, the Prometheus exporter and RFC 5780 are off.
Its log (verbose: every allocation, permission and 401) goes to `log`. The system coturn service
is never used (scripts/interop-setup.sh leaves it disabled).
"""
from __future__ import annotations

import ipaddress

import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

from waiting import WaitTimeout, wait_until

TURNSERVER = "/usr/bin/turnserver"



TEST_NET = ipaddress.ip_network("198.18.0.0/15")   # the only addresses the tests use


def peer_rules() -> list[str]:
    """coturn relays only to the test network: every IPv4 address below and above TEST_NET is
    denied (a relay is never an open proxy, even in a namespace that has no route out)."""
    first, last = TEST_NET.network_address, TEST_NET.broadcast_address
    lowest, highest = ipaddress.ip_address(0), ipaddress.ip_address(2**32 - 1)
    return [f"--allowed-peer-ip={first}-{last}",
            f"--denied-peer-ip={lowest}-{first - 1}", f"--denied-peer-ip={last + 1}-{highest}"]

class Coturn:
    def __init__(self, lab, addr: str, *, log: Path, port: int = 3478,
                 relay_ports: tuple[int, int] = (49160, 49260)) -> None:
        self.lab, self.addr, self.port, self.relay_ports, self.log_path = lab, addr, port, relay_ports, log
        self.proc: Optional[subprocess.Popen] = None
        self._tmp: Optional[str] = None
        self._log = None

    def command(self, secret: str) -> list[str]:
        tmp = Path(self._tmp or ".")
        return [
            TURNSERVER, "-n",                                   # no config file: all of it is here
            "--listening-ip", self.addr, "--relay-ip", self.addr, "--listening-port", str(self.port),
            "--min-port", str(self.relay_ports[0]), "--max-port", str(self.relay_ports[1]),
            "--use-auth-secret", f"--static-auth-secret={secret}", "--realm", "minato",
            "--fingerprint", "--no-tls", "--no-dtls", "--no-cli", "--no-rfc5780",
            "--no-multicast-peers", *peer_rules(),
            "--userdb", str(tmp / "turndb"), "--pidfile", str(tmp / "turnserver.pid"),
            "--log-file", "stdout", "--simple-log", "--verbose",
        ]

    def start(self, secret: str, timeout: float = 10.0) -> None:
        if not Path(TURNSERVER).exists():
            import pytest
            pytest.fail(f"{TURNSERVER} not found: run scripts/interop-setup.sh (installs Debian's coturn)", pytrace=False)
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix="minato-coturn-")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self._log.write(b"$ turnserver (static-auth-secret not shown) on " + self.addr.encode() + b"\n")
        self._log.flush()
        self.proc = self.lab.popen(self.command(secret), stdout=self._log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)

        def listening() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"turnserver exited with {self.proc.returncode}; see {self.log_path}")
            try:
                with socket.create_connection((self.addr, self.port), timeout=0.5):
                    return True
            except OSError:
                return False
        try:
            wait_until(listening, timeout, f"coturn listening on {self.addr}:{self.port}/tcp", interval=0.05)
        except WaitTimeout:
            self.stop()
            raise

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None
        if self._log:
            self._log.close()
            self._log = None

    def restart(self, secret: str) -> None:
        self.stop()
        self.start(secret)

    def close(self) -> None:
        self.stop()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""
