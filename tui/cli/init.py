"""`tfctl init`: a commented `cluster.yaml` to start from, the obvious step after the demo."""

from __future__ import annotations

import getpass
import os
import sys

import click

from tfctl.tui.cli.context import DEFAULT_INVENTORY, EXIT_USAGE, obj

TEMPLATE = """\
# tfctl inventory: the machines of your lab and the job to run on them.
# Check it with `tfctl plan` (nothing contacted) and `tfctl check` (preflight over SSH).
name: {name}
defaults:                          # every host gets these unless it overrides them
  # user, port and identity_file come from ~/.ssh/config (else: you, 22, your agent and
  # ~/.ssh/id_*). What the inventory sets wins over ~/.ssh/config, so setting them here
  # overrides every alias's User, Port and IdentityFile: set them on the hosts that need them.
  # user: {user}
  # port: 22
  # identity_file: ~/.ssh/id_ed25519
  known_hosts: ~/.ssh/known_hosts  # host keys are verified against this file
  workdir: ~/tfctl/{name}          # code is synced here and tasks run here
  python: python3                  # the interpreter with TensorFlow on each host (a venv's?)
  env: {{TF_CPP_MIN_LOG_LEVEL: "1"}}
hosts:
{hosts}
job:
  script: train.py                 # relative to the synced folder (sync.source)
  args: [--train_dir=out, --steps=1000]
  style: flags                     # flags (--ps_hosts/--worker_hosts/--job_name/--task_index)
                                   # or tf_config (TF_CONFIG env; add `chief: true` for
                                   # ParameterServerStrategy, `ps: 0` for MultiWorkerMirrored)
  workers: per_gpu                 # one worker per GPU (CUDA_VISIBLE_DEVICES=<i>), or per_host
  # evaluator: {{host: {first}, script: evaluate.py, args: [--train_dir=out]}}
  tensorboard: {{host: {first}, logdir: out, port: 6006}}
  ports: {{ps: 2222, worker: 2223}}
  sync: {{source: ., exclude: [.git, out, .venv]}}
"""

HOST = """\
  - name: {name}
    address: {address}
    gpus: {gpus}                        # a count, a list of indices [0, 2], or 0 for CPU only
    ps: {ps}                           # parameter servers on this host
"""


@click.command()
@click.option("--hosts", "host_list", default="", help="Comma-separated hosts, `name` or "
              "`name:gpus` (horovodrun style).")
@click.option("--from-hostfile", "hostfile", type=click.Path(dir_okay=False),
              help="Take the hosts from a machinefile (`host slots=4`).")
@click.option("--name", default="lab", show_default=True, help="The cluster's name.")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@click.pass_context
def init(ctx: click.Context, host_list: str, hostfile: str | None, name: str,
         force: bool) -> None:
    """Write a commented inventory (`cluster.yaml`, or -i FILE) to start from.

    \b
    Example:
      tfctl init --hosts titan:4,gtx970:1
      tfctl -i lab.yaml init --from-hostfile machinefile
    """
    from tfctl.inventory.hostfile import parse_hostfile, read_hostfile

    path = obj(ctx).inventory_path or DEFAULT_INVENTORY  # here, never a parent's
    if os.path.exists(path) and not force:
        click.secho(f"error: {path} exists; pass --force to overwrite it", fg="red", err=True)
        sys.exit(EXIT_USAGE)
    if hostfile:
        hosts = read_hostfile(hostfile)
    elif host_list:
        hosts = parse_hostfile(host_list.replace(" ", ""), "--hosts")
    else:
        hosts = [{"name": "gpu-box-1", "gpus": 1}, {"name": "gpu-box-2", "gpus": 1}]
    rendered = "".join(HOST.format(name=h["name"], address=h["name"], gpus=h["gpus"],
                                   ps=1 if i == 0 else 0) for i, h in enumerate(hosts))
    text = TEMPLATE.format(name=name, user=getpass.getuser(), hosts=rendered.rstrip("\n"),
                           first=hosts[0]["name"])
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    named = "" if path == DEFAULT_INVENTORY else f" -i {path}"  # found here without -i
    click.echo(f"wrote {path} with {len(hosts)} hosts; next: `tfctl plan{named}`, then "
               f"`tfctl check{named}`")
