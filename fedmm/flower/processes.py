"""A deployment on one machine: a SuperLink, one SuperNode per client and ``flwr run``, each its own process.

What separate parties run, on localhost: every party an operating-system process of its own, talking
to the others over the network only, in plain HTTP or in HTTPS under a certificate authority made here
for the run (:func:`self_signed_certificates`). :class:`LocalDeployment` starts the processes, runs
fedmm's app (:mod:`fedmm.flower.app`) through ``flwr run``, can kill a SuperNode mid-fit, and stops
every process it started, by its id. ``fedmm flower-demo --processes`` and
``tests/test_flower_processes.py`` run it.

Flower starts a new ClientApp process for every message a SuperNode receives, and the SuperNodes and
the server poll for messages every 3 seconds, so one query costs seconds (about 10 with three clients on
two cores), not the milliseconds of one process: FedGrEM's defaults (about 100 queries) take about a
quarter of an hour.
"""

import datetime
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from .app import PYPROJECT

__all__ = ["LocalDeployment", "self_signed_certificates"]

#: The loopback address every process listens on and connects to.
HOST = "127.0.0.1"
#: Seconds between Flower's SuperExec looks for a task to launch (flwr's default 1; the environment's own value wins).
TASK_POLL_INTERVAL = 0.1


def self_signed_certificates(folder):
    """A certificate authority and a server certificate it signs for ``127.0.0.1`` and ``localhost``:
    ``(ca_certificate, server_certificate, server_key)`` paths in ``folder`` (PEM)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)

    def certificate(subject, key, issuer, issuer_key, ca):
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                   .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(HOST))]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = certificate("fedmm test CA", ca_key, "fedmm test CA", ca_key, ca=True)
    server = certificate(HOST, server_key, "fedmm test CA", ca_key, ca=False)
    paths = folder / "ca.crt", folder / "server.crt", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(server_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
    return paths


def _free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class LocalDeployment:
    """A SuperLink and one SuperNode per data file, each a process of its own on this machine.

    Use it as a context manager: the processes start on entry and every one of them is stopped on exit
    (:meth:`stop`), whatever happened in between.

    Parameters
    ----------
    workdir : path
        Where the app project, Flower's home, the certificates and the logs go.
    data_paths : sequence of paths
        One client's rows per file (:func:`fedmm.flower.client.load_from_config`); client ``k`` is named
        ``k`` (``client-id`` in its node config).
    tls : bool
        HTTPS under a certificate authority made for the run; plain HTTP (Flower's ``--insecure``) if False.

    Attributes
    ----------
    processes : dict
        ``{"superlink": Popen, "supernode-0": Popen, ...}``, every process started.
    log_path : Path
        The SuperLink's and SuperNodes' output.
    """

    def __init__(self, workdir, data_paths, *, tls=False):
        self.work = Path(workdir)
        self.data_paths = [Path(p) for p in data_paths]
        self.tls = tls
        self.processes = {}
        self.log_path = self.work / "processes.log"

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def _security(self, node):
        """The command-line options of a SuperLink (``node=False``) or SuperNode in this deployment's mode."""
        if not self.tls:
            return ["--insecure"]
        if node:
            return ["--root-certificates", str(self.certificates[0])]
        ca, cert, key = self.certificates
        return ["--ssl-ca-certfile", str(ca), "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)]

    def start(self):
        """Start the SuperLink, then the SuperNodes, and write the ``flwr`` configuration that reaches them."""
        for folder in ("app", "home"):
            (self.work / folder).mkdir(parents=True, exist_ok=True)
        self.certificates = self_signed_certificates(self.work / "certificates") if self.tls else None
        (self.work / "app" / "pyproject.toml").write_text(PYPROJECT)
        port = _free_port()
        connection = f'root-certificates = "{self.certificates[0]}"' if self.tls else "insecure = true"
        (self.work / "home" / "config.toml").write_text(
            f'[superlink]\ndefault = "deployment"\n\n[superlink.deployment]\naddress = "{HOST}:{port}"\n'
            f"{connection}\n")
        bin_dir = Path(sys.executable).parent
        # Flower's SuperExec looks for a task to launch every second by default; 0.1 s takes about a second off
        # every query (measured 6 s -> 4.7 s for a minimal app; docs/flower.md). The other two waits of a query
        # (the server's and the SuperNode's 3-second polls) are fixed in flwr 1.42.
        self.env = {"FLWR_SUPEREXEC_TASK_POLL_INTERVAL": str(TASK_POLL_INTERVAL), **os.environ,
                    "FLWR_HOME": str(self.work / "home"), "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
        self._log = open(self.log_path, "a")
        # The apps run in this environment, where fedmm is installed (no per-run environment to build).
        self._spawn("superlink", [bin_dir / "flower-superlink", "--host", HOST, "--port", str(port),
                                  "--disable-runtime-dependency-installation", *self._security(node=False)])
        for k, path in enumerate(self.data_paths):
            self._spawn(f"supernode-{k}", [bin_dir / "flower-supernode", "--superlink", f"{HOST}:{port}",
                                           "--host", HOST, "--port", str(_free_port()), *self._security(node=True),
                                           "--node-config", f"data-path='{path}' client-id={k}"])
        return self

    def _spawn(self, name, command):
        # A session of its own: stopping a party stops the processes it started (its ClientApps).
        self.processes[name] = subprocess.Popen([str(c) for c in command], env=self.env, stdout=self._log,
                                                stderr=subprocess.STDOUT, start_new_session=True)

    def run(self, run_config, *, timeout=1800, on_line=None):
        """``flwr run`` fedmm's app with ``run_config`` (:mod:`fedmm.flower.app`'s keys), streaming its output
        to ``on_line(line)`` line by line; returns the path of the fitted estimator (``out``).

        Raises RuntimeError if ``flwr run`` fails or writes no estimator, TimeoutError after ``timeout``
        seconds.
        """
        out = Path(run_config["out"])
        out.unlink(missing_ok=True)
        overrides = " ".join(f"{key}={_toml(value)}" for key, value in run_config.items())
        run_log = self.work / "flwr-run.log"
        with open(run_log, "w") as sink:  # its output goes to a file of its own, read back as it grows
            run = self.processes["flwr-run"] = subprocess.Popen(
                [str(Path(sys.executable).parent / "flwr"), "run", str(self.work / "app"), "deployment", "--stream",
                 "--run-config", overrides], env=self.env, stdout=sink, stderr=subprocess.STDOUT,
                start_new_session=True)
        _follow(run_log, run, time.monotonic() + timeout, on_line or (lambda line: None))
        if run.returncode != 0 or not out.exists():
            raise RuntimeError(f"flwr run failed (exit {run.returncode}); see {run_log} and {self.log_path}.")
        return out

    def kill(self, name):
        """Kill process ``name`` (e.g. ``"supernode-2"``) and what it started, at once (SIGKILL): a party that
        vanishes."""
        _signal_group(self.processes[name], signal.SIGKILL)
        self.processes[name].wait()

    def stop(self, grace=10.0):
        """Stop every process started, and every process they started (SIGTERM, then SIGKILL after ``grace``
        seconds); returns the ids of any still running after that (none)."""
        family = self.alive()  # before the parents go: an orphan's parent is no longer ours
        for process in self.processes.values():
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for process in self.processes.values():
            try:
                process.wait(max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait()
        while (left := sorted(set(family) & set(_processes()))) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in left:  # a process that started a session of its own (Flower's executors do)
            _kill(pid, signal.SIGKILL)
        if getattr(self, "_log", None) is not None:
            self._log.close()
        time.sleep(0.1)
        return sorted(set(family + self.alive()) & set(_processes()))

    def alive(self):
        """The ids of this deployment's running processes: those started, and every process they started (by
        parent, or in their sessions; Linux's ``/proc``)."""
        table = _processes()
        ours = {p.pid for p in self.processes.values()}
        found = {pid for pid, (_, session) in table.items() if session in ours}
        while True:
            children = {pid for pid, (parent, _) in table.items() if parent in found | ours} - found
            if not children:
                return sorted(found | (ours & set(table)))
            found |= children


def _processes():
    """``{pid: (parent pid, session id)}`` of every running process (zombies, only not yet collected, left out)."""
    found = {}
    for name in os.listdir("/proc"):
        try:
            # /proc/<pid>/stat: pid (comm) state ppid pgrp session ...; comm may hold spaces, so split after it.
            fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if name.isdigit() and fields[0] != "Z":
            found[int(name)] = (int(fields[1]), int(fields[3]))
    return found


def _kill(pid, sig):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _follow(path, process, deadline, on_line):
    """Hand each line ``process`` writes to ``path`` to ``on_line`` until it exits (TimeoutError at ``deadline``)."""
    with open(path) as source:
        while True:
            line = source.readline()
            if line:
                on_line(line.rstrip("\n"))
            elif process.poll() is not None:
                for line in source:
                    on_line(line.rstrip("\n"))
                return
            elif time.monotonic() > deadline:
                raise TimeoutError(f"{' '.join(map(str, process.args[:2]))} did not finish in time; see {path}.")
            else:
                time.sleep(0.2)


def _signal_group(process, sig):
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass


def _toml(value):
    """A run config value as ``flwr run --run-config`` reads it (TOML)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return repr(value)
    if "'" in str(value):
        raise ValueError(f"A run config value cannot hold a single quote (flwr reads it as TOML): {value!r}.")
    return f"'{value}'"
