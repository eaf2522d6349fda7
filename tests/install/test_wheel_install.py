"""tfctl installed the way users install it: a wheel built from a clean copy, no `-e`.

The rest of the suite runs an editable install, whose finder maps whole folders, so a module the
build leaves out goes unnoticed there (the wheel once lacked `tfctl.remote.connect.hold`, which
every SSH command imports). Here the sdist and the wheel are built from a copy of the tree (what
git tracks or would track, as a clone of the working tree has it; `python -m build`: the sdist,
then the wheel from the sdist), the wheel is compared file by file with the tree, and it is
installed into a fresh venv with `pip install --no-deps`, no `-e`. That venv reads only the
dependencies from the suite's venv (a `.pth` naming its site-packages; the editable install's
own `.pth` there is never run), so nothing is downloaded and `tfctl` comes from the wheel alone.
The installed command then runs `up`, `status` (on the agent sessions the first command's
holder lends), `ui` in a real terminal, `down` and `report` on the lab.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.holders import agents, holders, wait_holders
from tests.support.testbedtools import (
    FOREVER,
    cmdline_of,
    job_dir,
    processes_of_run,
    run_id_from,
    wait_until,
)
from tests.support.tmuxpane import Pane

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_FOLDERS = ("inventory", "remote", "tui", "examples")
"""The top-level folders installed as `tfctl.<folder>` (setup.py's package_dir)."""
DISTRIBUTION = "tfctl_lab"
"""The distribution's name as it is spelled in file names (`tfctl-lab`, normalized)."""
LOCAL_LABEL = "wheeltest"
"""Added to the copy's version (`0.1.0+wheeltest`): `tfctl --version` must say it, which it can
only read from the installed metadata (pyproject.toml is the one place the version is written)."""


@dataclass(frozen=True)
class Built:
    tree: list[str]  # the files of the copy the build started from, relative to it
    version: str
    sdist: Path
    wheel: Path


def tree_files() -> list[str]:
    """The files a clone of the working tree has: tracked, and untracked that git does not
    ignore (a module not yet committed is in the tree too)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout of tfctl and git")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout.decode()
    return sorted(p for p in set(listed.split("\0")) if p and (ROOT / p).is_file())


def in_package(path: str) -> bool:
    """A module or data file of the package (hidden files and editor backups are neither)."""
    name = path.rsplit("/", 1)[-1]
    return (path.split("/", 1)[0] in PACKAGE_FOLDERS and not name.startswith(".")
            and not name.endswith("~"))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    files = tree_files()
    for name in files:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    pyproject = src / "pyproject.toml"
    text = pyproject.read_text()
    version = re.search(r'^version = "([^"]+)"$', text, re.M)
    assert version, "no version in pyproject.toml"
    labelled = f"{version[1]}{'.' if '+' in version[1] else '+'}{LOCAL_LABEL}"
    pyproject.write_text(text.replace(version[0], f'version = "{labelled}"'))
    done = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir",
                           str(base / "dist"), str(src)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [sdist] = (base / "dist").glob(f"{DISTRIBUTION}-*.tar.gz")
    [wheel] = (base / "dist").glob(f"{DISTRIBUTION}-*.whl")
    return Built(files, labelled, sdist, wheel)


@pytest.fixture(scope="module")
def wheel_venv(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed (no -e, no dependencies fetched: those are the
    suite venv's, read through a .pth file)."""
    venv = tmp_path_factory.mktemp("venv") / "wheel-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    import site

    (Path(purelib) / "suite-dependencies.pth").write_text(
        "".join(f"{p}\n" for p in site.getsitepackages()))
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                           "--no-deps", "--no-index", str(built.wheel)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return venv


def clean_env(**extra: str) -> dict[str, str]:
    """The suite's environment with nothing that could point Python at the tree."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return {**env, **extra}


def test_the_wheel_and_the_sdist_hold_every_module_and_data_file_of_the_tree(
        built: Built) -> None:
    want = {f"tfctl/{name}" for name in built.tree if in_package(name)}
    assert {"tfctl/remote/connect/hold/holder.py", "tfctl/remote/agent/setup.sh",
            "tfctl/tui/app/app.tcss", "tfctl/examples/two-hosts.yaml"} <= want
    dist_info = f"{DISTRIBUTION}-{built.version}.dist-info"
    with zipfile.ZipFile(built.wheel) as whl:
        names = [n for n in whl.namelist() if not n.endswith("/")]
        metadata = whl.read(f"{dist_info}/METADATA").decode()
        entry_points = whl.read(f"{dist_info}/entry_points.txt").decode()
    modules = {n for n in names if not n.startswith(f"{dist_info}/")}
    assert not want - modules, f"the wheel lacks: {sorted(want - modules)}"
    assert not modules - want, f"the wheel has what the tree does not: {sorted(modules - want)}"
    assert {n.split("/", 1)[0] for n in names} == {"tfctl", dist_info}  # no tests/, no top-level
    assert "Name: tfctl-lab\n" in metadata and f"Version: {built.version}\n" in metadata
    assert "tfctl = tfctl.tui.entry:run" in entry_points
    with tarfile.open(built.sdist) as sdist:
        top = f"{DISTRIBUTION}-{built.version}"
        in_sdist = {m.name.removeprefix(f"{top}/") for m in sdist.getmembers() if m.isfile()}
    needed = {name for name in built.tree if in_package(name)} | {
        "pyproject.toml", "setup.py", "README.md"}
    assert not needed - in_sdist, f"the sdist lacks: {sorted(needed - in_sdist)}"


def test_the_installed_tfctl_is_the_wheel_and_says_its_version(
        built: Built, wheel_venv: Path) -> None:
    python = wheel_venv / "bin" / "python"
    where = subprocess.run(
        [str(python), "-c", "import tfctl, tfctl.remote.connect.hold.holder as h, "
         "tfctl.tui.app as a; print(*tfctl.__path__, h.__file__, a.__file__, sep='\\n')"],
        capture_output=True, text=True, env=clean_env(), cwd=wheel_venv, timeout=60)
    assert where.returncode == 0, where.stderr
    paths = where.stdout.split()
    assert len(paths) == 3 and all(p.startswith(str(wheel_venv) + "/") for p in paths), paths
    version = subprocess.run([str(wheel_venv / "bin" / "tfctl"), "--version"],
                             capture_output=True, text=True, env=clean_env(), timeout=60)
    assert version.stdout == f"tfctl, version {built.version}\n", version.stdout + version.stderr


HOSTS = ("h1", "h2")
"""The lab hosts the job runs on."""


def sessions(testbed: Any) -> dict[str, set[int]]:
    """host → its agent sessions, for the job's hosts."""
    return {h: pids for h, pids in agents(testbed).items() if h in HOSTS}


def connection_of(pid: int) -> int | None:
    """The sshd process of the SSH connection an agent session runs in (its parent)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat[stat.rindex(")") + 2:].split()[1])
    except (OSError, ValueError):
        return None


def watch_connections(testbed: Any) -> tuple[set[int], Callable[[], None]]:
    """The SSH connections (sshd pids) of every agent session seen on the lab's hosts until
    the returned stop() is called."""
    seen: set[int] = set()
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            for pids in sessions(testbed).values():
                seen.update(c for c in map(connection_of, pids) if c is not None)
            time.sleep(0.02)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()

    def stopped() -> None:
        stop.set()
        thread.join()
    return seen, stopped


def steady_agents(testbed: Any) -> dict[str, set[int]]:
    """The agent sessions on the job's hosts once each has one and they stay the same."""
    def probe() -> dict[str, set[int]] | None:
        before = sessions(testbed)
        time.sleep(0.5)
        after = sessions(testbed)
        return after if after == before and all(after.values()) else None
    found: dict[str, set[int]] = wait_until("an agent session per host, steady", probe, 30,
                                            every_s=0.05)
    return found


@pytest.mark.testbed
@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_the_wheel_installed_tfctl_runs_a_job_on_the_lab(  # type: ignore[no-untyped-def]
        testbed, wheel_venv: Path, held: dict[str, str], tmp_path: Path,
        down_after) -> None:
    tfctl_program = wheel_venv / "bin" / "tfctl"
    inv = testbed.write_inventory(job_dir(tmp_path) / "cluster.yaml", FOREVER, hosts=list(HOSTS))
    down_after.append(inv)
    env = clean_env(**held)
    runtime = Path(held["XDG_RUNTIME_DIR"])

    def tfctl(*args: str) -> str:
        done = subprocess.run([str(tfctl_program), "-i", str(inv), *args], capture_output=True,
                              text=True, env=env, cwd=inv.parent, timeout=240)
        said = done.stdout + done.stderr
        assert done.returncode == 0 and "Traceback" not in said, f"tfctl {args}: {said}"
        return said

    run_id = run_id_from(tfctl("up"))
    assert len(processes_of_run(run_id)) == 4  # ps and worker on h1 and h2
    [holder] = wait_holders(runtime)  # the holder the first command left
    assert Path(cmdline_of(holder)[0]).parent == wheel_venv / "bin"  # the wheel's holder
    kept = steady_agents(testbed)

    held_links = {connection_of(p) for pids in kept.values() for p in pids}
    seen, stop_watching = watch_connections(testbed)
    try:
        said = tfctl("status")
    finally:
        stop_watching()
    assert said.count("running") >= 4, said
    # Every agent session that answered status ran on the holder's connections: none of its own.
    assert seen and seen <= held_links, f"status connected by itself: {seen - held_links}"
    assert sessions(testbed) == kept and holders(runtime) == [holder]

    pane = Pane(f"env -u PYTHONPATH XDG_RUNTIME_DIR={runtime} TFCTL_PERSIST=30 HOME={Path.home()}"
                f" sh -c '{tfctl_program} -i {inv} ui; echo \"ui exited $?\"; sleep 60'",
                name="tfctl-wheel")
    try:
        pane.wait("the dashboard with both hosts and the running tasks",
                  lambda s: "Hosts" in s and testbed.address("h2") in s and "running" in s)
        pane.keys("q")
        pane.wait("the dashboard quit", lambda s: "ui exited" in s)
        assert "ui exited 0" in pane.text()
    finally:
        pane.close()

    tfctl("down", "--grace", "1")
    assert processes_of_run(run_id) == {}
    out = tmp_path / "report"
    tfctl("report", "--run", run_id, "-o", str(out))
    assert (out / "report.html").stat().st_size > 0
    assert f"(holder pid {holder})" in tfctl("disconnect")
