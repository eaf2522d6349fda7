"""known_hosts read as OpenSSH reads it (hostkeys.py): patterns, negation, hashed names, markers,
and the checks of an OpenSSH host certificate, on keys and certificates made by ssh-keygen.
The same paths on real sshd hosts: tests/testbed/test_openssh.py."""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path

import paramiko
import pytest

from tfctl.remote.connect.hostkeys import (
    KnownKey,
    check_host_certificate,
    host_matches,
    principal_of,
    read_known_hosts,
)

needs_keygen = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")


def test_patterns_negation_and_hashed_names() -> None:
    assert host_matches("*.lab,!gw.lab", "box.lab") and not host_matches("*.lab,!gw.lab", "gw.lab")
    assert host_matches("[10.0.0.?]:2222", "[10.0.0.7]:2222")
    assert not host_matches("[10.0.0.?]:2222", "10.0.0.7")  # brackets are literal
    hashed = paramiko.HostKeys.hash_host("titan")
    assert host_matches(hashed, "titan") and not host_matches(hashed, "titan2")
    assert principal_of("[10.0.0.7]:2222") == "10.0.0.7" and principal_of("alias") == "alias"


def test_markers_and_broken_lines(tmp_path: Path) -> None:
    key = base64.b64encode(b"\0\0\0\x0bssh-ed25519" + b"\0\0\0\x20" + bytes(32)).decode()
    path = tmp_path / "known_hosts"
    path.write_text(f"# comment\n\nh1 ssh-ed25519 {key}\n@cert-authority *.lab ssh-ed25519 {key}\n"
                    f"@revoked * ssh-ed25519 {key}\n@unknown h ssh-ed25519 {key}\nh2 ssh-ed25519 "
                    "not-base64!\n")
    found = read_known_hosts([str(path), str(tmp_path / "missing")])
    assert [(k.marker, k.patterns, k.line) for k in found] == [
        ("", "h1", 3), ("@cert-authority", "*.lab", 4), ("@revoked", "*", 5)]


def keygen(*args: str) -> None:
    subprocess.run(["ssh-keygen", "-q", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def made(tmp_path: Path) -> tuple[Path, Path, KnownKey]:
    ca, host = tmp_path / "ca", tmp_path / "host"
    keygen("-t", "ed25519", "-N", "", "-f", str(ca))
    keygen("-t", "ed25519", "-N", "", "-f", str(host))
    kind, blob = ca.with_suffix(".pub").read_text().split()[:2]
    entry = KnownKey("@cert-authority", "*", kind, base64.b64decode(blob), "kh", 1)
    return ca, host, entry


def cert(host: Path, ca: Path, *options: str) -> bytes:
    keygen("-s", str(ca), "-I", "id", *options, str(host) + ".pub")
    text = Path(str(host) + "-cert.pub").read_text().split()[1]
    return base64.b64decode(text)


@needs_keygen
def test_a_valid_host_certificate_passes(made: tuple[Path, Path, KnownKey]) -> None:
    ca, host, entry = made
    assert check_host_certificate(cert(host, ca, "-h", "-n", "titan,*.lab"), "titan",
                                  [entry]) is None
    assert check_host_certificate(cert(host, ca, "-h", "-n", "titan,*.lab"), "gpu1.lab",
                                  [entry]) is None


@needs_keygen
def test_each_check_refuses(made: tuple[Path, Path, KnownKey], tmp_path: Path) -> None:
    ca, host, entry = made
    good = cert(host, ca, "-h", "-n", "titan")
    assert "names titan, not gtx970" in str(check_host_certificate(good, "gtx970", [entry]))
    assert "not a @cert-authority" in str(check_host_certificate(good, "titan", []))
    assert "user certificate" in str(check_host_certificate(cert(host, ca, "-n", "titan"),
                                                            "titan", [entry]))
    old = cert(host, ca, "-h", "-n", "titan", "-V", "20200101:20200102")
    assert "not valid now" in str(check_host_certificate(old, "titan", [entry]))
    forged = good[:-8] + bytes(8)  # the signature's last bytes changed
    assert "does not verify" in str(check_host_certificate(forged, "titan", [entry]))
    assert "cannot be parsed" in str(check_host_certificate(b"\0\0\0\x03abc", "titan",
                                                            [entry]))
