"""Read `cluster.yaml`, validate it, and resolve it into an `Inventory`.

Every mistake becomes one `InventoryError` naming file, line and key and saying what to write
instead. Type and key checks come from the pydantic schema; the checks that need the whole file
(duplicate hosts, repeated GPUs, port clashes, names of hosts that do not exist) are here.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from tfctl.inventory import model, schema
from tfctl.inventory.errors import InventoryError
from tfctl.inventory.hostfile import read_hostfile
from tfctl.inventory.yamlmarks import PathKey, format_path, load_with_lines

if TYPE_CHECKING:
    from tfctl.inventory.frameworks.interface import Framework

DEFAULT_INVENTORY = "cluster.yaml"
MAX_BYTES = model.MAX_INVENTORY_BYTES
BUILTIN_DEFAULTS = {
    "known_hosts": "~/.ssh/known_hosts",
    "workdir": "~/tfctl/{name}",
    "python": "python3",
}


def load_inventory(path: str | os.PathLike[str], hostfile: str | None = None) -> model.Inventory:
    """Load and resolve an inventory file; `hostfile` replaces its host list if given."""
    filename = str(path)
    text = _read_text(filename)
    return parse_inventory(text, filename, hostfile=hostfile)


def _read_text(filename: str) -> str:
    p = Path(filename)
    hint = "create one with `tfctl init`, or pass -i FILE / set TFCTL_INVENTORY"
    if not p.exists():
        raise InventoryError(filename, None, "", "no such file", hint)
    if p.is_dir():
        raise InventoryError(filename, None, "", "is a directory, not an inventory file",
                             f"pass the YAML file inside it, e.g. {p / DEFAULT_INVENTORY}")
    if not p.is_file():
        raise InventoryError(filename, None, "", "is not a regular file (a device or a pipe?)",
                             "pass a YAML file")
    if p.stat().st_size > MAX_BYTES:
        raise InventoryError(filename, None, "", f"is larger than {MAX_BYTES // 1024} KiB",
                             "an inventory is a small YAML file; is this the right file?")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise InventoryError(filename, None, "", f"cannot be read ({exc.strerror})",
                             "check the file's permissions") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InventoryError(filename, line, "", "is not UTF-8 text",
                             "save the inventory as UTF-8 YAML") from None


def parse_inventory(text: str, filename: str = DEFAULT_INVENTORY,
                    hostfile: str | None = None) -> model.Inventory:
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise InventoryError(filename, line, "", "contains binary data (a NUL byte)",
                             "an inventory is a YAML text file")
    try:
        data, lines = load_with_lines(text, filename)
    except RecursionError:
        raise InventoryError(filename, 1, "", "is nested too deeply (or an alias refers to "
                             "itself)", "flatten the structure") from None
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise InventoryError(filename, lines.get((), 1), "", f"the file is {kind}, not a mapping",
                             "start from `tfctl init` (keys: name, defaults, hosts, job)")
    # Top-level `x-` keys hold anchors to merge (`x-gpu-box: &box {...}`, then `<<: *box`), as in
    # Compose files (https://docs.docker.com/reference/compose-file/extension/); not tfctl's.
    data = {k: v for k, v in data.items() if not k.startswith("x-")}
    spec = _validate(data, lines, filename)
    return _Resolver(spec, lines, filename, hostfile).inventory()


def _validate(data: dict[str, Any], lines: Mapping[PathKey, int], filename: str) -> schema.FileSpec:
    try:
        return schema.FileSpec.model_validate(data)
    except ValidationError as exc:
        raise _first_error(exc, lines, filename) from None


def _first_error(exc: ValidationError, lines: Mapping[PathKey, int],
                 filename: str) -> InventoryError:
    # pydantic reports each branch of a union separately; the first error is the clearest one.
    err = exc.errors(include_url=False)[0]
    loc = _clean_loc(err["loc"])
    line = _line_for(loc, lines)
    kind = err["type"]
    if kind == "extra_forbidden":
        return InventoryError(filename, line, format_path(loc), "unknown key",
                              _unknown_key_hint(loc, err))
    if kind == "missing":
        return InventoryError(filename, _line_for(loc[:-1], lines), format_path(loc),
                              "this key is required", _missing_hint(loc))
    message = err["msg"].replace("Value error, ", "")
    return InventoryError(filename, line, format_path(loc), f"{message} ({_got(err['input'])})",
                          _type_hint(loc))


def _either(words: list[str]) -> str:
    """`a, b or c`."""
    return f"{', '.join(words[:-1])} or {words[-1]}" if len(words) > 1 else words[0]


def _got(value: object) -> str:
    """`got 'nope'`: the value a key was given, cut to 60 characters."""
    got = repr(value)
    return "got " + (got if len(got) <= 60 else got[:57] + "...")


def _clean_loc(loc: tuple[Any, ...]) -> PathKey:
    # Union branches add their type name to the location (`int`, `list[int]`, `SyncSpec`...).
    return tuple(p for p in loc if isinstance(p, int) or not _looks_like_type(p))


def _looks_like_type(part: str) -> bool:
    return part in {"int", "str", "bool", "float", "list[int]", "literal['ssh','local']"} or \
        part.endswith("Spec") or part.startswith(("literal[", "list[", "dict[")) or \
        part.startswith("function-")


def _line_for(loc: PathKey, lines: Mapping[PathKey, int]) -> int | None:
    for n in range(len(loc), -1, -1):
        if loc[:n] in lines:
            return lines[loc[:n]]
    return None


_MODELS: dict[str, type[BaseModel]] = {
    "": schema.FileSpec, "defaults": schema.DefaultsSpec, "hosts": schema.HostSpec,
    "job": schema.JobSpec, "evaluator": schema.EvaluatorSpec,
    "tensorboard": schema.TensorBoardSpec, "ports": schema.PortsSpec, "sync": schema.SyncSpec,
    "restart": schema.RestartSpec, "task_args": schema.TaskArgsSpec,
    "task_env": schema.TaskEnvSpec, "slurm": schema.SlurmSpec,
    "kubernetes": schema.KubernetesSpec, "notify": schema.NotifySpec,
}


def _unknown_key_hint(loc: PathKey, err: Mapping[str, Any]) -> str:
    parent = next((p for p in reversed(loc[:-1]) if isinstance(p, str)), "")
    model_cls = _MODELS.get(parent, schema.FileSpec)
    known = sorted(model_cls.model_fields)
    if not loc:  # a key pydantic could not place (`list[` reads as a type): no guess to offer
        return f"remove it; allowed here: {', '.join(known)}"
    close = difflib.get_close_matches(str(loc[-1]), known, n=1)
    if close:
        return f"did you mean `{close[0]}`? (allowed here: {', '.join(known)})"
    return f"remove it; allowed here: {', '.join(known)}"


_EXAMPLES = {
    "gpus": "write a count (`gpus: 4`), a list of indices (`gpus: [0, 2]`), `free` or "
            "`{free: 2}` (GPUs nobody holds, chosen at up), or 0 for CPU only",
    "port": "write a number, e.g. `port: 22`",
    "ps": "write how many parameter servers run on this host, e.g. `ps: 1` (0 allowed)",
    "env": 'write a mapping of strings, e.g. `env: {TF_CPP_MIN_LOG_LEVEL: "1"}`',
    "args": "write a list of strings, e.g. `args: [--batch_size=32]`",
    "style": "write `style: tf_config` or `style: flags` (or leave it to `strategy:`)",
    "task_args": "write lists by task type, e.g. `task_args: {worker: [--batch_size=16]}`",
    "task_env": 'write mappings by task type, e.g. `task_env: {ps: {TF_CPP_MIN_LOG_LEVEL: "2"}}`',
    "strategy": "write one of `strategy: flags`, `parameter_server`, `multi_worker_mirrored`, "
                "`mirrored` or `custom` (README: Which strategy?)",
    "workers": "write `workers: per_gpu` or `workers: per_host`",
    "chief": "write `chief: true` (first host), `chief: false`, or a host name",
    "sync": "write `sync: false` or a mapping like `sync: {source: ., exclude: [.git]}`",
    "transport": "write `transport: ssh` or `transport: local`",
    "name": "use letters, digits, `_`, `.` and `-` (starting with a letter or digit)",
    "hosts": "write a list of host mappings, e.g. `hosts: [{name: titan, gpus: 4}]`",
    "address": "write an IP, a DNS name or an ~/.ssh/config alias (no spaces, not starting "
               "with `-`)",
    "cluster_address": "write the name or IP the other hosts reach this one by, without a "
                       "port, e.g. `cluster_address: 10.0.0.12`",
}


def _type_hint(loc: PathKey) -> str:
    key = next((p for p in reversed(loc) if isinstance(p, str)), "")
    if key in {"ps", "worker", "chief"} and "ports" in loc:
        return "write a port number from 1 to 65535 (or `none` with `strategy: custom`)"
    for section in ("task_args", "task_env"):
        if section in loc:
            return _EXAMPLES[section]
    if loc[:1] in (("slurm",), ("kubernetes",)):
        return schema.ENGINE_HINTS.get(key, schema.ENGINE_HINTS[str(loc[0])])
    if key in _EXAMPLES:
        return _EXAMPLES[key]
    if key == "framework":
        from tfctl.inventory.frameworks import FRAMEWORKS

        names = [f"`{n}`" for n in FRAMEWORKS]
        names[0] = f"`framework: {names[0][1:]}"
        return f"write {_either(names)} (README: Jobs that are not a TensorFlow cluster)"
    return "see the inventory format in README.md"


def _missing_hint(loc: PathKey) -> str:
    key = loc[-1]
    hints = {"job": "add a `job:` section with at least `script: train.py`",
             "script": model.SCRIPT_HINT,
             "name": "add `name: <something>`", "host": "add `host: <one of the hosts' names>`"}
    return hints.get(str(key), f"add `{key}:`")


class _Resolver:
    """Merges defaults into hosts and checks what only the whole file can show."""

    def __init__(self, spec: schema.FileSpec, lines: Mapping[PathKey, int], filename: str,
                 hostfile: str | None):
        self.spec = spec
        self.lines = lines
        self.filename = filename
        self.hostfile = hostfile or spec.hostfile

    def error(self, loc: PathKey, message: str, hint: str) -> InventoryError:
        return InventoryError(self.filename, _line_for(loc, self.lines), format_path(loc),
                              message, hint)

    def inventory(self) -> model.Inventory:
        self._check_framework()
        host_specs = self._host_specs()
        if not host_specs:
            raise self.error(("hosts",), "no hosts", "list at least one host under `hosts:`")
        hosts = tuple(self._host(i, h) for i, h in enumerate(host_specs))
        self._check_unique_names(host_specs)
        written = self.spec.job is not None
        job = self._job({h.name for h in hosts}, hosts) if written else model.Job(script="")
        inv = model.Inventory(name=self.spec.name, hosts=hosts, job=job, path=self.filename,
                              hostfile=self._hostfile_path(), job_written=written,
                              job_line=_line_for(("job",), self.lines),
                              **self._engines())
        from tfctl.inventory.checks import check_ports

        if written and job.script:  # a job without a script has no plan to check (plan.py)
            check_ports(inv, self.error)
            self._check_rules(inv)
        return inv

    def _engines(self) -> dict[str, Any]:
        """`slurm:` and `kubernetes:` as records, with their lines (for `tfctl export`)."""
        out: dict[str, Any] = {}
        if self.spec.slurm is not None:
            data = self.spec.slurm.model_dump()
            data["sbatch_args"] = tuple(data["sbatch_args"])
            out["slurm"] = model.Slurm(**data, line=self.lines.get(("slurm",), 0))
        if self.spec.kubernetes is not None:
            out["kubernetes"] = model.Kubernetes(**self.spec.kubernetes.model_dump(),
                                                 line=self.lines.get(("kubernetes",), 0))
        return out

    def _check_rules(self, inv: model.Inventory) -> None:
        """Refuse what the job's framework would refuse (or hang on) at run time: see rules.py."""
        from tfctl.inventory.plan import make_plan
        from tfctl.inventory.rules import refusals

        for finding in refusals(make_plan(inv)):
            where = next((k for k in finding.keys if k in self.lines), finding.keys[0])
            raise self.error(where, finding.message, finding.hint)

    def _hostfile_path(self) -> str | None:
        if not self.hostfile:
            return None
        base = os.path.dirname(os.path.abspath(self.filename))
        return os.path.join(base, os.path.expanduser(self.hostfile))

    def _host_specs(self) -> list[schema.HostSpec]:
        path = self._hostfile_path()
        if path is None:
            return list(self.spec.hosts)
        return [schema.HostSpec(**entry) for entry in read_hostfile(path)]

    def _host(self, i: int, h: schema.HostSpec) -> model.Host:
        d = self.spec.defaults
        free = self._free_gpus(h.gpus)
        gpus = self._gpus(i, h.gpus) if free is None else tuple(range(free.count or 1))

        def pick(key: str) -> Any:
            value = getattr(h, key)
            return value if value is not None else getattr(d, key)

        ps = self._framework().host_ps(i, h, self.spec.job, self.error)
        env = dict(d.env or {})
        env.update(h.env or {})
        workdir = pick("workdir") or BUILTIN_DEFAULTS["workdir"].format(name=self.spec.name)
        transport: model.Transport = pick("transport") or "ssh"
        return model.Host(
            name=h.name, address=h.address or h.name, user=pick("user"), port=pick("port"),
            identity_file=pick("identity_file"),
            known_hosts=pick("known_hosts") or BUILTIN_DEFAULTS["known_hosts"],
            jump=pick("jump"), workdir=workdir, python=pick("python") or "python3", env=env,
            gpus=gpus, ps=ps,
            args=tuple(h.args), cpu_workers=h.cpu_workers, transport=transport,
            shared_fs=h.shared_fs, cluster_address=h.cluster_address, free_gpus=free,
            line=self.lines.get(("hosts", i), 0),
        )

    @staticmethod
    def _free_gpus(value: object) -> model.FreeGpus | None:
        """`gpus: free` or `{free: N}`; the plan's stand-in GPUs are 0..N-1 (one for `free`)
        until `up` takes real ones (model.Host.free_gpus)."""
        if value == "free":
            return model.FreeGpus(None)
        if isinstance(value, schema.FreeGpusSpec):
            return model.FreeGpus(value.free)
        return None

    def _gpus(self, i: int, value: object) -> tuple[int, ...]:
        assert isinstance(value, (int, list))
        if isinstance(value, int):
            return tuple(range(value))
        seen: set[int] = set()
        for g in value:
            if g in seen:
                raise self.error(("hosts", i, "gpus"), f"GPU index {g} is listed twice",
                                 f"list each GPU once, e.g. gpus: {sorted(set(value))}")
            seen.add(g)
        return tuple(value)

    def _check_unique_names(self, hosts: list[schema.HostSpec]) -> None:
        seen: dict[str, int] = {}
        for i, h in enumerate(hosts):
            if h.name in seen:
                raise self.error(("hosts", i, "name"),
                                 f"host name {h.name!r} is already used by hosts[{seen[h.name]}]",
                                 "give every host a unique name (the address may repeat)")
            seen[h.name] = i

    def _check_framework(self) -> None:
        """`job.framework` names an entry of the registry (inventory/frameworks/), refused as
        the schema refuses a value of a key with a few allowed values."""
        from tfctl.inventory.frameworks import FRAMEWORKS

        if self.spec.job is None:
            return
        name = self.spec.job.framework
        if isinstance(name, str) and name in FRAMEWORKS:
            return
        raise self.error(("job", "framework"),
                         f"Input should be {_either([repr(n) for n in FRAMEWORKS])} "
                         f"({_got(name)})", _type_hint(("job", "framework")))

    def _framework(self) -> Framework:
        """The job's framework (`inventory/frameworks/`), the default one where the file has
        no job."""
        from tfctl.inventory.frameworks import DEFAULT_FRAMEWORK, FRAMEWORKS

        return FRAMEWORKS[self.spec.job.framework] if self.spec.job else DEFAULT_FRAMEWORK

    def _job(self, names: set[str], hosts: tuple[model.Host, ...]) -> model.Job:
        j = self.spec.job
        assert j is not None
        keys = self._framework().resolve_job(j, self.error)
        style, workers, ports = keys.style, keys.workers, keys.ports
        chief = self._chief(j, style, names, hosts)
        evaluator = tensorboard = None
        if j.evaluator is not None:
            self._known_host(("job", "evaluator", "host"), j.evaluator.host, names)
            evaluator = model.Evaluator(j.evaluator.host, j.evaluator.script,
                                        tuple(j.evaluator.args))
        if j.tensorboard is not None:
            self._known_host(("job", "tensorboard", "host"), j.tensorboard.host, names)
            tb = j.tensorboard
            tensorboard = model.TensorBoard(tb.host, tb.logdir, tb.port, tb.keep, tb.grace)
        sync = (model.Sync(enabled=False) if j.sync is False
                else model.Sync(True, j.sync.source, tuple(j.sync.exclude)))
        r = j.restart
        restart = model.RestartPolicy(
            policies={t: getattr(r, t) for t in model.TASK_TYPES}, max=r.max, backoff_s=r.backoff,
            together=r.together if r.together is not None else keys.together)
        return model.Job(
            script=j.script or "", args=tuple(j.args), framework=j.framework, style=style,
            workers=workers, strategy=j.strategy, chief=chief,
            evaluator=evaluator, tensorboard=tensorboard, ports=ports, sync=sync,
            setup=tuple(j.setup), setup_inputs=tuple(j.setup_inputs), restart=restart,
            task_args=_task_args(j), task_env=_task_env(j),
            outputs=self._outputs(j), keras=j.keras, throughput=self._patterns(j),
            silence_window_s=j.silence_window, log_max_bytes=max(1, int(j.log_max_mb * 2**20)),
            disk_floor_bytes=int(j.disk_floor_mb * 2**20),
            notify=None if j.notify is None else model.Notify(j.notify.command, j.notify.webhook),
        )

    def _patterns(self, j: schema.JobSpec) -> tuple[str, ...]:
        import re

        for i, pattern in enumerate(j.throughput):
            try:
                groups = re.compile(pattern).groups
            except re.error as exc:
                raise self.error(("job", "throughput", i), f"`{pattern}` is not a regex: {exc}",
                                 r"e.g. `'steps_per_sec=([0-9.]+)'`") from None
            if groups < 1:
                raise self.error(("job", "throughput", i), f"`{pattern}` has no group",
                                 r"put the number in a group: `'([0-9.]+) steps/s'`")
        return tuple(j.throughput)

    def _outputs(self, j: schema.JobSpec) -> tuple[str, ...]:
        if j.outputs is None:
            return (j.tensorboard.logdir if j.tensorboard else "out",)
        for i, folder in enumerate(j.outputs):
            parts = folder.replace("\\", "/").split("/")
            if folder.startswith(("/", "~")) or ".." in parts:
                raise self.error(("job", "outputs", i), f"`{folder}` is not inside the workdir",
                                 "write a folder relative to the workdir, e.g. `out/train`")
        return tuple(j.outputs)

    def _chief(self, j: schema.JobSpec, style: model.Style, names: set[str],
               hosts: tuple[model.Host, ...]) -> str | None:
        if j.chief is False:
            return None
        if style == "flags":
            what = "strategy flags has no chief task" if j.strategy else \
                "a chief task exists only with `style: tf_config`"
            raise self.error(("job", "chief"), what,
                             "remove `chief:` (with flags, worker 0 is the chief)")
        if j.chief is True:
            return hosts[0].name
        self._known_host(("job", "chief"), j.chief, names)
        return j.chief

    def _known_host(self, loc: PathKey, name: str, names: set[str]) -> None:
        if name not in names:
            close = difflib.get_close_matches(name, sorted(names), n=1)
            hint = f"did you mean `{close[0]}`?" if close else \
                f"use one of: {', '.join(sorted(names))}"
            raise self.error(loc, f"no host is named {name!r}", hint)


def _task_args(job: schema.JobSpec) -> dict[str, tuple[str, ...]]:
    """`job.task_args` as resolved records, only the types that have some."""
    spec = job.task_args
    return {t: tuple(getattr(spec, t)) for t in model.SCRIPT_TYPES if getattr(spec, t)}


def _task_env(job: schema.JobSpec) -> dict[str, dict[str, str]]:
    """`job.task_env` as resolved records, only the types that have some."""
    spec = job.task_env
    return {t: dict(getattr(spec, t)) for t in model.TASK_TYPES if getattr(spec, t)}
