"""Claims (remote/agent/claims.py): the record checked apart from I/O, other users' files read
without trusting them (symlinks, bad JSON, huge files, a file named after another owner), the
sticky folder, and liveness from the recorded processes — on this machine's real filesystem,
with a second uid (nobody) where the kernel's sticky-bit rule is what is tested."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tfctl.remote.agent import claims
from tfctl.remote.agent.proc import start_ticks, user_name

ME = user_name(os.getuid()) or str(os.getuid())
NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown and a second uid need root")


def _record(**extra: object) -> dict[str, object]:
    base = {"format": claims.CLAIM_FORMAT, "kind": "reservation", "since": 1.0,
            "until": time.time() + 3600, "gpus": [1], "tasks": [], "note": "ICML runs"}
    return dict(base, **extra)


def _only_gpu1_read(folder: Path) -> list[str]:
    """The warnings of reading `folder`, whose one claim read must be one's reservation of GPU 1."""
    found, warnings = claims.read_claims(str(folder))
    assert [c["file"] for c in found] == [f"{ME}.reservation.gpu1.json"]
    return warnings


def _skipped(folder: Path, user: str, count: int, reasons: str, first: str) -> str:
    """The one warning for the files of `user` skipped in `folder`: how many, why, the first."""
    return (f"claims folder {folder}: skipped {count} files of user {user} ({reasons}; the "
            f"first: {first})")


# ---------------------------------------------------------------- pure

@pytest.mark.parametrize("raw, error", [
    ([], "not a tfctl-claim/1 record"),
    ({"format": "tfctl-claim/9"}, "not a tfctl-claim/1 record"),
    ({"format": claims.CLAIM_FORMAT, "kind": "lease"}, "unknown kind 'lease'"),
    ({"format": claims.CLAIM_FORMAT, "kind": "reservation", "gpus": []},
     "a reservation without an end"),
    ({"format": claims.CLAIM_FORMAT, "kind": "run", "gpus": "0,1"}, "gpus is not a list"),
    ({"format": claims.CLAIM_FORMAT, "kind": "run", "gpus": [True]}, "bad GPU True"),
    ({"format": claims.CLAIM_FORMAT, "kind": "run", "tasks": ["x"]}, "a task is not an object"),
])
def test_a_record_that_is_no_claim_is_refused(raw: object, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        claims.parse_claim(raw)


def test_a_claim_keeps_only_checked_fields_and_never_a_user() -> None:
    parsed = claims.parse_claim(_record(user="root", note="x" * 5000, gpus=["2", 3, "GPU-ab"],
                                        extra={"a": 1}))
    assert "user" not in parsed and "extra" not in parsed
    assert parsed["gpus"] == [2, 3, "GPU-ab"] and len(parsed["note"]) == claims.MAX_TEXT


@pytest.mark.parametrize("mask, gpus", [("0,2", [0, 2]), ("", []), ("1,-1,2", [1]),
                                        ("GPU-abc, 3", ["GPU-abc", 3]), (None, [])])
def test_mask_gpus_reads_a_mask_as_cuda_does(mask: str | None, gpus: list[object]) -> None:
    assert claims.mask_gpus(mask) == gpus


# ---------------------------------------------------------------- the folder, read and written

def test_first_writer_makes_a_sticky_folder_and_reads_back(tmp_path: Path) -> None:
    folder = tmp_path / "claims"
    path = claims.write_claim("reservation", "gpu1", _record(), str(folder))
    assert stat.S_IMODE(os.lstat(folder).st_mode) == 0o1777
    assert Path(path).name == f"{ME}.reservation.gpu1.json"
    found, warnings = claims.read_claims(str(folder))
    assert warnings == []
    assert [(c["user"], c["uid"], c["gpus"], c["state"], c["note"]) for c in found] == [
        (ME, os.getuid(), [1], "live", "ICML runs")]


def test_hostile_files_are_skipped_with_one_warning_for_their_owner(tmp_path: Path) -> None:
    folder = tmp_path / "claims"
    claims.write_claim("reservation", "gpu1", _record(), str(folder))
    target = tmp_path / "secret"
    target.write_text(json.dumps(_record()))
    (folder / f"{ME}.reservation.gpu2.json").symlink_to(target)
    (folder / f"{ME}.run.bad.json").write_text("{not json")
    (folder / f"{ME}.run.huge.json").write_text(" " * (claims.MAX_CLAIM_BYTES + 1))
    (folder / f"{ME}.run.kind.json").write_text(json.dumps(_record()))  # says reservation
    (folder / f"{ME}.run.empty.json").write_text("{}")
    os.mkfifo(folder / f"{ME}.run.fifo.json")
    (folder / ".alice.123.run.tmp").write_text("half written")  # a writer's temporary file
    assert _only_gpu1_read(folder) == [_skipped(
        folder, ME, 6, "1 a symbolic link (not followed); 1 its name says run, its record "
        "reservation; 1 not JSON; 1 not a regular file; 1 not a tfctl-claim/1 record; 1 other "
        "reasons", f"{ME}.reservation.gpu2.json")]
    (folder / f"{ME}.run.bad.json").unlink()
    for name in ("empty", "fifo", "huge", "kind"):
        (folder / f"{ME}.run.{name}.json").unlink()
    assert claims.read_claims(str(folder))[1] == [
        f"claims folder {folder}: skipped {ME}.reservation.gpu2.json of user {ME}: a symbolic "
        "link (not followed)"]


def test_ones_own_flood_bounds_ones_own_files_and_tfctls_names_are_read_first(
        tmp_path: Path) -> None:
    folder = tmp_path / "claims"
    claims.write_claim("reservation", "gpu1", _record(), str(folder))
    for n in range(claims.MAX_FILES_PER_OWNER + 50):
        (folder / f"{ME}.reservation.a{n:04d}.json").write_text("{}")  # sorts before gpu1
    assert _only_gpu1_read(folder) == [_skipped(
        folder, ME, claims.MAX_FILES_PER_OWNER + 50,
        f"{claims.MAX_FILES_PER_OWNER - 1} not a tfctl-claim/1 record; 51 not read (at most "
        f"{claims.MAX_FILES_PER_OWNER} files of one user are read)",
        f"{ME}.reservation.a0000.json")]


def test_a_folder_that_is_a_link_or_not_sticky_is_not_used(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert claims.read_claims(str(tmp_path / "link"))[1] == [
        f"claims folder {tmp_path / 'link'} is not read: it is a symbolic link (not followed)"]
    with pytest.raises(ValueError, match="its mode is 7"):
        claims.write_claim("reservation", "gpu1", _record(), str(real))
    assert claims.read_claims(str(tmp_path / "none")) == ([], [])


@needs_root
def test_a_file_named_after_another_user_is_skipped(tmp_path: Path) -> None:
    folder = tmp_path / "claims"
    claims.ensure_folder(str(folder))
    forged = folder / f"{ME}.reservation.gpu0.json"  # says root's, written by nobody
    forged.write_text(json.dumps(_record()))
    os.chown(forged, NOBODY, NOBODY)
    found, warnings = claims.read_claims(str(folder))
    nobody = pwd.getpwuid(NOBODY).pw_name
    assert found == [] and warnings == [
        f"claims folder {folder}: skipped {forged.name} of user {nobody}: named after user {ME}"]


@needs_root
def test_another_users_flood_hides_no_claim(tmp_path: Path) -> None:
    """1500 junk files of nobody's, 300 more it named after us, a FIFO, a link, a huge file:
    our reservation and nobody's own well-formed one are both read, and what was skipped is
    one line, nobody's, with its counts."""
    folder = tmp_path / "claims"
    claims.write_claim("reservation", "gpu1", _record(), str(folder))
    nobody = pwd.getpwuid(NOBODY).pw_name
    theirs = folder / f"{nobody}.reservation.gpu3.json"
    theirs.write_text(json.dumps(_record(gpus=[3])))
    junk = [folder / f"{nobody}.run.junk{n}.json" for n in range(1500)]
    junk += [folder / f"{ME}.run.forged{n}.json" for n in range(300)]
    for path in junk:
        path.write_text("{}")
    os.mkfifo(folder / f"{nobody}.run.fifo.json")
    (folder / f"{nobody}.run.link.json").symlink_to("/etc/passwd")
    (folder / f"{nobody}.run.huge.json").write_text(" " * (claims.MAX_CLAIM_BYTES + 1))
    for path in [theirs, *junk, *(folder / f"{nobody}.run.{n}.json"
                                  for n in ("fifo", "huge"))]:
        os.chown(path, NOBODY, NOBODY)
    os.lchown(folder / f"{nobody}.run.link.json", NOBODY, NOBODY)
    found, warnings = claims.read_claims(str(folder))
    assert sorted((c["user"], c["gpus"], c["state"]) for c in found) == sorted([
        (ME, [1], "live"), (nobody, [3], "live")])
    assert warnings == [_skipped(
        folder, nobody, 1803, f"1373 not read (at most {claims.MAX_FILES_PER_OWNER} files of one "
        f"user are read); 300 named after user {ME}; {claims.MAX_FILES_PER_OWNER - 1} not a "
        "tfctl-claim/1 record; 1 a symbolic link (not followed); 1 not a regular file; 1 other "
        "reasons", f"{nobody}.run.fifo.json")]


@needs_root
def test_only_its_owner_removes_a_claim(tmp_path: Path) -> None:
    """The owner's check in remove_claim, and the sticky bit under it for anyone else."""
    base = Path(tempfile.mkdtemp(prefix="tfctl-claims-test-"))  # pytest's tmp is root's only
    base.chmod(0o755)
    try:
        _only_owner_removes(base / "claims")
    finally:
        shutil.rmtree(base)


def _only_owner_removes(folder: Path) -> None:
    nobody = pwd.getpwuid(NOBODY).pw_name
    theirs = folder / f"{nobody}.reservation.gpu0.json"
    claims.ensure_folder(str(folder))
    theirs.write_text(json.dumps(_record()))
    os.chown(theirs, NOBODY, NOBODY)
    assert claims.remove_claim(theirs.name, str(folder)) is False and theirs.exists()
    mine = claims.write_claim("reservation", "gpu1", _record(), str(folder))
    as_nobody = subprocess.run(
        [sys.executable, "-c", "import os, sys; os.setgid(65534); os.setuid(65534)\n"
         "try:\n os.unlink(sys.argv[1]); print('removed')\n"
         "except PermissionError as e: print(e.strerror)", mine],
        capture_output=True, text=True, check=True)
    assert as_nobody.stdout.strip() == "Operation not permitted" and os.path.exists(mine)


def test_a_run_claim_lives_while_its_processes_do(tmp_path: Path) -> None:
    folder = str(tmp_path / "claims")
    child = subprocess.Popen(["sleep", "30"])
    try:
        task = {"name": "worker:0", "gpus": [0], "pid": child.pid, "pgid": child.pid,
                "start_ticks": start_ticks(child.pid)}
        claims.write_claim("run", "r1", {"run_id": "r1", "job": "mnist", "since": 1.0,
                                         "gpus": [0], "tasks": [task]}, folder)
        assert [c["state"] for c in claims.read_claims(folder)[0]] == ["live"]
    finally:
        child.kill()
        child.wait()
    found = claims.read_claims(folder)[0]
    assert [(c["run_id"], c["state"]) for c in found] == [("r1", "stale")]
    assert claims.sweep_own(found, folder) == [f"{ME}.run.r1.json"]
    assert claims.read_claims(folder) == ([], [])


def test_a_reservation_past_its_end_is_expired(tmp_path: Path) -> None:
    folder = str(tmp_path / "claims")
    claims.write_claim("reservation", "gpu0", _record(until=time.time() - 1), folder)
    assert [c["state"] for c in claims.read_claims(folder)[0]] == ["expired"]
