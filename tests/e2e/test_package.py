"""The Debian package (scripts/package, packaging/, docs/deploy.md): built around the debug binary the suite already
has, installed with dpkg, its systemd unit checked with `systemd-analyze verify`, the installed server started as
the unit starts it, S3 through boto3, a stop by SIGTERM with an upload in flight, and the package purged.

The test machine has no systemd as PID 1, so the unit's own command lines (ExecStartPre, ExecStart, read from the
installed unit) run under a stand-in for the parts of its sandbox that matter to the server: the `permafrost`
user with no capabilities and no new privileges (setpriv), a read-only file system except /var/lib/permafrost
(ProtectSystem=strict, ReadWritePaths), private /tmp and /var/tmp, empty /home and /root, the unit's UMask,
LimitNOFILE and WorkingDirectory. The system-call filter and the device policy are systemd's alone.

It installs into the machine's /usr, /etc and /var/lib and therefore refuses to run where permafrost is installed
already; whatever it installed is gone afterwards (the package purged, then the data directory and the user, which
a purge keeps on purpose).
"""

import grp
import http.client
import os
import pwd
import re
import resource
import signal
import shutil
import stat
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest
import requests

from conftest import REPO, HEALTH_PATH, binary, client, free_port

UNIT = Path("/usr/lib/systemd/system/permafrost.service")
CONFIG = Path("/etc/permafrost/permafrost.toml")
DATA = Path("/var/lib/permafrost")
START_TIMEOUT_S = 60

# The sandbox stand-in: run as root in a private mount namespace (unshare), then exec "$@" as the service user.
# The unit's ReadWritePaths come in $READ_WRITE_PATHS.
SANDBOX = r"""
set -eu
for p in $READ_WRITE_PATHS; do mount --bind "$p" "$p"; done
for m in $(awk '{print $5}' /proc/self/mountinfo | sort -u); do
  case " $READ_WRITE_PATHS " in *" $m "*) continue ;; esac
  case "$m" in
    /|/etc|/etc/*|/usr|/usr/*|/var|/var/*|/opt|/opt/*|/srv|/srv/*|/boot|/boot/*|/work|/work/*)
      mount -o remount,bind,ro "$m" ;;
  esac
done
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=1777 tmpfs /var/tmp
for d in /home /root /run/user; do
  if [ -d "$d" ]; then mount -t tmpfs -o mode=000 tmpfs "$d"; fi
done
if touch /etc/.permafrost-sandbox-probe 2>/dev/null; then echo "sandbox: /etc is writable" >&2; exit 97; fi
exec setpriv --reuid=permafrost --regid=permafrost --init-groups --no-new-privs --inh-caps=-all \
  --bounding-set=-all -- "$@"
"""


def run(args, **kwargs):
    return subprocess.run(args, capture_output=True, text=True, timeout=kwargs.pop("timeout", 600), **kwargs)


def unit_settings(text: str) -> dict:
    """Every `Key=value` of the unit's [Service] section; keys that repeat keep all their values."""
    settings, section = {}, None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]":
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def known_to_dpkg() -> bool:
    """Installed, or removed with its configuration left."""
    return run(["dpkg-query", "-W", "permafrost"]).returncode == 0


class Service:
    """The unit's ExecStartPre and ExecStart, as the service user inside the sandbox stand-in."""

    def __init__(self, settings: dict, log_path: Path):
        self.pre = settings["ExecStartPre"][0].split()
        self.start_line = settings["ExecStart"][0].split()
        self.nofile = int(settings["LimitNOFILE"][0])
        self.umask = int(settings["UMask"][0], 8)
        self.cwd = settings["WorkingDirectory"][0]
        self.read_write_paths = " ".join(p for v in settings["ReadWritePaths"] for p in v.split())
        self.log_path = log_path
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process = None

    def nofile_granted(self) -> int:
        """LimitNOFILE, or as close as this machine lets a process without CAP_SYS_RESOURCE come (systemd can)."""
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        return self.nofile if hard == resource.RLIM_INFINITY else min(self.nofile, hard)

    def _preexec(self):
        os.umask(self.umask)
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile_granted(), self.nofile_granted()))

    def _command(self, argv):
        return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", SANDBOX, "sandbox", *argv]

    def _env(self):
        return {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(DATA),
                "USER": "permafrost", "LOGNAME": "permafrost", "LANG": "C.UTF-8",
                "READ_WRITE_PATHS": self.read_write_paths}

    def start(self):
        pre = run(self._command(self.pre), env=self._env(), cwd=self.cwd, preexec_fn=self._preexec, timeout=60)
        assert pre.returncode == 0, f"ExecStartPre {self.pre} failed: {pre.stderr}"
        # The packaged configuration listens on 127.0.0.1:9000; a test machine may have that port taken.
        argv = [*self.start_line, "--listen", f"127.0.0.1:{self.port}"]
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(self._command(argv), stdout=log, stderr=log, env=self._env(), cwd=self.cwd,
                                        preexec_fn=self._preexec)
        deadline = time.time() + START_TIMEOUT_S
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the installed server exited with {self.process.returncode}: {self.log()}")
            try:
                if requests.get(self.endpoint + HEALTH_PATH, timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise AssertionError(f"the installed server is not healthy after {START_TIMEOUT_S} s: {self.log()}")

    def kill(self):
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""


def remove_leftovers():
    """Whatever this test installed and a failure left behind."""
    if known_to_dpkg():
        run(["dpkg", "--purge", "permafrost"])
    shutil.rmtree(DATA, ignore_errors=True)
    try:
        pwd.getpwnam("permafrost")
        run(["userdel", "permafrost"])
    except KeyError:
        pass
    try:
        grp.getgrnam("permafrost")
        run(["groupdel", "permafrost"])
    except KeyError:
        pass


def test_package_installs_runs_as_the_service_stops_cleanly_and_purges(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("installing a package needs root (CI runs as root)")
    for tool in ("dpkg", "dpkg-deb", "systemd-analyze", "setpriv", "unshare"):
        assert shutil.which(tool), f"{tool} is missing: run scripts/setup-deps.sh as root"
    if known_to_dpkg() or DATA.exists() or CONFIG.exists():
        pytest.fail("permafrost is installed on this machine (or left /var/lib/permafrost or /etc/permafrost): "
                    "this test installs and purges the package and will not touch an existing installation",
                    pytrace=False)
    try:
        pwd.getpwnam("permafrost")
        pytest.fail("a user permafrost exists already: this test makes and removes it", pytrace=False)
    except KeyError:
        pass

    binary()  # the debug binary the package wraps (built by `cargo test --workspace`)
    started = time.monotonic()
    # The first run on a machine also installs cargo-deb from crates.io (a minute or two of compiling).
    built = run(["bash", "scripts/package", "--debug-binary"], cwd=REPO, timeout=1800)
    assert built.returncode == 0, f"scripts/package failed: {built.stderr[-3000:]}"
    deb = Path(built.stdout.strip().splitlines()[-1])
    if not deb.is_absolute():
        deb = REPO / deb
    build_s = time.monotonic() - started
    contents = run(["dpkg-deb", "--contents", str(deb)]).stdout
    for path in ("./usr/bin/permafrost", "./usr/lib/systemd/system/permafrost.service",
                 "./etc/permafrost/permafrost.toml", "./usr/share/doc/permafrost/deploy.md"):
        assert re.search(rf"\s{re.escape(path)}$", contents, re.M), f"{path} not in the package:\n{contents}"
    control = Path(tmp_path / "control")
    assert run(["dpkg-deb", "--control", str(deb), str(control)]).returncode == 0
    assert (control / "conffiles").read_text().split() == [str(CONFIG)]
    for script in ("postinst", "postrm"):
        assert os.access(control / script, os.X_OK), f"{script} missing from the package"

    service = None
    try:
        installing = run(["dpkg", "-i", str(deb)])
        assert installing.returncode == 0, f"dpkg -i failed: {installing.stdout}{installing.stderr}"
        # The user and the directories the maintainer scripts made.
        user = pwd.getpwnam("permafrost")
        assert user.pw_uid < 1000, f"permafrost is not a system user (uid {user.pw_uid})"
        assert user.pw_shell == "/usr/sbin/nologin" and user.pw_dir == str(DATA)
        data = DATA.stat()
        assert (data.st_uid, data.st_gid, stat.S_IMODE(data.st_mode)) == (user.pw_uid, user.pw_gid, 0o700)
        config = CONFIG.stat()
        assert (config.st_uid, config.st_gid, stat.S_IMODE(config.st_mode)) == (0, user.pw_gid, 0o640)
        assert os.readlink(DATA / "permafrost.toml") == str(CONFIG)
        assert (REPO / "packaging" / "permafrost.toml").read_bytes() == CONFIG.read_bytes()

        # The unit: systemd's own check (it also checks that ExecStart's binary exists), and its settings.
        verify = run(["systemd-analyze", "verify", str(UNIT)])
        assert verify.returncode == 0 and "permafrost" not in verify.stderr + verify.stdout, \
            f"systemd-analyze verify: {verify.stdout}{verify.stderr}"
        settings = unit_settings(UNIT.read_text())
        expected = {"User": "permafrost", "ProtectSystem": "strict", "ReadWritePaths": "/var/lib/permafrost",
                    "NoNewPrivileges": "yes", "PrivateTmp": "yes", "ProtectHome": "yes", "Restart": "on-failure",
                    "KillSignal": "SIGTERM"}
        for key, value in expected.items():
            assert settings.get(key) == [value], f"{key}={settings.get(key)} in the unit, expected {value}"
        assert int(settings["LimitNOFILE"][0]) >= 65536
        assert int(settings["TimeoutStopSec"][0]) >= 60
        assert settings["ExecStart"][0].startswith("/usr/bin/permafrost serve --data-dir /var/lib/permafrost")

        # First start with the packaged configuration: the embedded default grid, generated credentials.
        service = Service(settings, tmp_path / "server.log")
        service.start()
        assert (DATA / "permafrost.toml").is_symlink(), "the server replaced the link to /etc/permafrost"
        status = Path(f"/proc/{service.process.pid}/status").read_text()
        uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
        assert uid_line.split()[1:] == [str(user.pw_uid)] * 4, f"the server does not run as permafrost: {uid_line}"
        nofile = next(line for line in Path(f"/proc/{service.process.pid}/limits").read_text().splitlines()
                      if line.startswith("Max open files"))
        assert int(nofile.split()[3]) == service.nofile_granted(), nofile
        credentials = DATA / "credentials"
        cred = credentials.stat()
        assert (cred.st_uid, stat.S_IMODE(cred.st_mode)) == (user.pw_uid, 0o600)
        values = dict(re.findall(r'^(\w+) = "([^"]*)"$', credentials.read_text(), re.M))
        access_key, secret_key = values["access_key"], values["secret_key"]
        assert f"access key {access_key}" in service.log()
        assert secret_key not in service.log(), "the secret key was logged"
        for path in (DATA / "grid", DATA / "cache", DATA / "catalog.sqlite"):
            assert path.exists() and path.stat().st_uid == user.pw_uid, f"{path} missing or not the service's"

        health = requests.get(service.endpoint + HEALTH_PATH, timeout=5)
        assert health.status_code == 200 and health.json() == {"status": "ok"}
        s3 = client(service.endpoint, access_key, secret_key)
        s3.create_bucket(Bucket="runs")
        small = os.urandom(1 << 20)
        s3.put_object(Bucket="runs", Key="2026/scan.bin", Body=small)
        assert s3.get_object(Bucket="runs", Key="2026/scan.bin")["Body"].read() == small

        # SIGTERM while an upload is half sent: no new connections, the upload finishes, exit status 0.
        large = os.urandom(8 << 20)
        url = urllib.parse.urlsplit(s3.generate_presigned_url(
            "put_object", Params={"Bucket": "runs", "Key": "2026/in-flight.bin"}, ExpiresIn=600))
        connection = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        connection.putrequest("PUT", f"{url.path}?{url.query}")
        connection.putheader("Content-Length", str(len(large)))
        connection.endheaders()
        connection.send(large[: len(large) // 2])
        time.sleep(0.3)
        service.process.send_signal(signal.SIGTERM)
        refused = False
        deadline = time.time() + 10
        while time.time() < deadline and not refused:
            try:
                requests.get(service.endpoint + HEALTH_PATH, timeout=1)
                time.sleep(0.05)
            except requests.ConnectionError:
                refused = True
        assert refused, "the server still accepts connections 10 s after SIGTERM"
        assert service.process.poll() is None, f"the server exited with an upload in flight: {service.log()}"
        connection.send(large[len(large) // 2:])
        response = connection.getresponse()
        assert response.status == 200, f"in-flight upload: {response.status} {response.read()[:500]!r}"
        connection.close()
        stop_started = time.monotonic()
        code = service.process.wait(timeout=int(settings["TimeoutStopSec"][0]))
        stop_s = time.monotonic() - stop_started
        assert code == 0, f"SIGTERM: exit status {code}: {service.log()}"
        assert "stopping, closing the archive" in service.log()
        service.process = None

        # Started again as the unit would: both objects are there, byte for byte.
        service.start()
        s3 = client(service.endpoint, access_key, secret_key)
        assert s3.get_object(Bucket="runs", Key="2026/scan.bin")["Body"].read() == small
        assert s3.get_object(Bucket="runs", Key="2026/in-flight.bin")["Body"].read() == large
        service.process.send_signal(signal.SIGTERM)
        assert service.process.wait(timeout=int(settings["TimeoutStopSec"][0])) == 0, service.log()
        service.process = None

        # Purge: the binary, the unit and the configuration go; the archive's data and the user stay.
        purging = run(["dpkg", "--purge", "permafrost"])
        assert purging.returncode == 0, f"dpkg --purge failed: {purging.stdout}{purging.stderr}"
        assert "are kept" in purging.stdout, purging.stdout
        for path in (Path("/usr/bin/permafrost"), UNIT, CONFIG, CONFIG.parent):
            assert not path.exists(), f"{path} is still there after dpkg --purge"
        assert not known_to_dpkg(), "dpkg still knows permafrost after the purge"
        assert (DATA / "catalog.sqlite").exists(), "dpkg --purge deleted the archive's data"
        print(f"package: {deb.stat().st_size / 1e6:.1f} MB built in {build_s:.1f} s; stop with an upload in "
              f"flight took {stop_s:.2f} s")
    finally:
        if service is not None:
            service.kill()
        remove_leftovers()
    assert not DATA.exists()
    with pytest.raises(KeyError):
        pwd.getpwnam("permafrost")
