"""A private OpenSSH server for the peer benchmarks (bench.peers): Debian's sshd (package
`openssh-server`) on a loopback port with its own config, host key and client key, all in a temp
dir, run by pid and stopped afterwards. The machine's own sshd config, its host keys and the
user's ~/.ssh are never read or written: the server gets `-f` with our config, every client
`-F` with ours (which also makes ssh skip /etc/ssh/ssh_config and creating ~/.ssh).

Key auth only, for one unprivileged login user: `user`, the account E2B templates have
(packaging/add-user), when the bench runs as root; else the user running it, the only one an
unprivileged sshd can serve. PAM is on, as in Debian's default config.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from pathlib import Path

from bench.peer_procs import ServerProcess, stop_process, wait_for_port
from tests.envd_process import DIE_WITH_PARENT, free_port

SSHD = "/usr/sbin/sshd"  # absolute: sshd re-executes itself by this path
SFTP_SERVER = "/usr/lib/openssh/sftp-server"
PRIVSEP_DIR = Path("/run/sshd")  # sshd running as root refuses to start without it
HOST = "bench"  # the Host alias in the client config
FAST_CIPHER = "aes128-gcm@openssh.com"


class SshServer(ServerProcess):
    """sshd -D on a free loopback port; `command()` builds client command lines for it."""

    def __init__(self, directory: Path, login_user: str) -> None:
        if not os.access(SSHD, os.X_OK) or not os.access(SFTP_SERVER, os.X_OK):
            raise RuntimeError("OpenSSH server missing: apt-get install openssh-server")
        self.dir = directory
        self.port = free_port()
        self.client_config = directory / "ssh_config"
        self.login_user = login_user
        self._made_privsep_dir = False
        self._keys()
        self._write_configs()
        if os.geteuid() == 0 and not PRIVSEP_DIR.exists():
            PRIVSEP_DIR.mkdir(mode=0o755)
            self._made_privsep_dir = True
        subprocess.run([SSHD, "-t", "-f", str(directory / "sshd_config")], check=True)
        log = open(directory / "sshd.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [*DIE_WITH_PARENT, SSHD, "-D", "-e", "-f", str(directory / "sshd_config")],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        super().__init__("sshd", proc)
        try:
            wait_for_port(self.port, proc, directory / "sshd.log")
        except BaseException:
            self.stop()
            raise

    def _keys(self) -> None:
        for name in ("host_key", "client_key"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.dir / name)],
                check=True,
            )
        shutil.copy(self.dir / "client_key.pub", self.dir / "authorized_keys")
        self.dir.chmod(0o755)  # sshd reads authorized_keys as the login user
        host_pub = (self.dir / "host_key.pub").read_text().split()
        (self.dir / "known_hosts").write_text(
            f"[127.0.0.1]:{self.port} {host_pub[0]} {host_pub[1]}\n"
        )

    def _write_configs(self) -> None:
        user = self.login_user
        (self.dir / "sshd_config").write_text(
            f"Port {self.port}\n"
            "ListenAddress 127.0.0.1\n"
            f"HostKey {self.dir}/host_key\n"
            f"PidFile {self.dir}/sshd.pid\n"
            f"AuthorizedKeysFile {self.dir}/authorized_keys\n"
            f"AllowUsers {user}\n"
            "PermitRootLogin no\n"
            "PubkeyAuthentication yes\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "UsePAM yes\n"
            "StrictModes no\n"
            "PrintMotd no\n"
            "X11Forwarding no\n"
            "MaxStartups 100\n"
            "LogLevel ERROR\n"
            f"Subsystem sftp {SFTP_SERVER}\n"
        )
        self.client_config.write_text(
            f"Host {HOST}\n"
            "  HostName 127.0.0.1\n"
            f"  Port {self.port}\n"
            f"  User {user}\n"
            f"  IdentityFile {self.dir}/client_key\n"
            "  IdentitiesOnly yes\n"
            "  IdentityAgent none\n"
            f"  UserKnownHostsFile {self.dir}/known_hosts\n"
            "  GlobalKnownHostsFile /dev/null\n"
            "  StrictHostKeyChecking yes\n"
            "  UpdateHostKeys no\n"
            "  BatchMode yes\n"
            "  LogLevel ERROR\n"
        )

    def command(self, tool: str, *args: str, cipher: str | None = None) -> list[str]:
        """`ssh`, `sftp` or `scp` with our client config (and a cipher, when given)."""
        cipher_args = ["-o", f"Ciphers={cipher}"] if cipher else []
        return [tool, "-F", str(self.client_config), *cipher_args, *args]

    def stop(self) -> None:
        super().stop()
        if self._made_privsep_dir:
            with contextlib.suppress(OSError):
                PRIVSEP_DIR.rmdir()  # only if still empty: another sshd may have started since


class ControlMaster:
    """A master connection (`ssh -M -N`, in the foreground, run by pid) that later `ssh`
    commands reuse through its socket."""

    def __init__(self, server: SshServer) -> None:
        self.socket = server.dir / "control.sock"
        self._server = server
        self._proc = subprocess.Popen(
            server.command("ssh", "-M", "-N", "-S", str(self.socket), HOST),
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 15
        while not self.socket.exists():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("ssh ControlMaster did not come up")
            time.sleep(0.02)

    def command(self, *args: str) -> list[str]:
        return self._server.command("ssh", "-S", str(self.socket), HOST, *args)

    def stop(self) -> None:
        stop_process(self._proc)
