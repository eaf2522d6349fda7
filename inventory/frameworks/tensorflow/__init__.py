"""TensorFlow, tfctl's first framework: the registry's entry, from its parts.

cluster.py: where its tasks run and how each learns its place (TF_CONFIG or the classic flags);
strategy.py: `job.strategy` resolved in the loader (the style, the defaults, the keys it
forbids); rules.py: its rules on a finished plan (refusals and warnings); host.py: what
`tfctl check` makes of the host's answer about TensorFlow, and its known failures in logs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tfctl.inventory.frameworks.interface import Cluster, Handed, Hint, JobKeys, Level, Refusal
from tfctl.inventory.frameworks.tensorflow import cluster as tf_cluster
from tfctl.inventory.frameworks.tensorflow import rules
from tfctl.inventory.model import Inventory, Job, WorkerLayout
from tfctl.inventory.tasks import Place, TaskType

if TYPE_CHECKING:
    from tfctl.inventory.errors import ErrorFactory
    from tfctl.inventory.schema import HostSpec, JobSpec
    from tfctl.inventory.tasks import Plan


class TensorFlow:
    """TensorFlow's parameter servers, workers, chief and evaluator (`Framework`)."""

    name: str = "tensorflow"
    title: str = "TensorFlow"
    roles: tuple[TaskType, ...] = tf_cluster.ROLES
    cluster_roles: tuple[TaskType, ...] = tf_cluster.CLUSTER_TYPES
    layouts: tuple[WorkerLayout, ...] = ("per_gpu", "per_host")
    asks_host: tuple[str, ...] = ("tensorflow",)
    shown_env: tuple[str, ...] = ()
    one_group: bool = False

    @property
    def hints(self) -> tuple[Hint, ...]:
        from tfctl.inventory.frameworks.tensorflow.host import HINTS  # (its regexes: not for plan)

        return HINTS

    def resolve_job(self, job: JobSpec, error: ErrorFactory) -> JobKeys:
        from tfctl.inventory.frameworks.tensorflow import strategy  # (the loader's only)

        style = strategy.resolve_style(job, error)
        strategy.check_chief(job, error)
        return JobKeys(style, strategy.resolve_workers(job, error),
                       strategy.resolve_ports(job, error),
                       together=job.strategy == "multi_worker_mirrored")

    def host_ps(self, i: int, host: HostSpec, job: JobSpec | None,
                error: ErrorFactory) -> int:
        from tfctl.inventory.frameworks.tensorflow import strategy

        name = job.strategy if job is not None else None
        strategy.check_host(i, host, name, error)
        return strategy.host_ps(i, host, name, error)

    def summary(self, job: Job) -> str:
        return f"style {job.style}"

    def base_env(self, job: Job) -> dict[str, str]:
        return tf_cluster.base_env(job)

    def place(self, inv: Inventory, addresses: Mapping[str, str]) -> list[Place]:
        return tf_cluster.place(inv, addresses)

    def spec(self, places: Sequence[Place]) -> dict[str, list[str]]:
        return tf_cluster.spec(places)

    def hand(self, job: Job, place: Place, cluster: Cluster) -> Handed:
        return tf_cluster.hand(job, place, cluster)

    def refusals(self, plan: Plan) -> list[Refusal]:
        return rules.refusals(plan)

    def warnings(self, plan: Plan) -> tuple[str, ...]:
        return rules.warnings(plan)

    def judge_install(self, probe: Mapping[str, Any]) -> list[tuple[Level, str]]:
        from tfctl.inventory.frameworks.tensorflow.host import judge_install

        return judge_install(probe)

    def judge_import(self, probe: Mapping[str, Any], wanted: tuple[int, ...],
                     job: Job) -> list[tuple[Level, str]]:
        from tfctl.inventory.frameworks.tensorflow.host import judge_tensorflow

        return judge_tensorflow(probe.get("tensorflow"), wanted, job.keras)


TENSORFLOW = TensorFlow()
