"""What the bundled example trainer (examples/train.py) leaves behind, as the tests check it."""

from __future__ import annotations

from pathlib import Path


def assert_whole_checkpoint_here(ckpt: Path, step: int) -> None:
    """Every shard the checkpoint's name announces (`data-0000i-of-0000N`) is in this folder."""
    shards = sorted(p.name for p in ckpt.glob(f"ckpt-{step}.data-*"))
    assert shards, list(ckpt.iterdir())
    total = int(shards[0].rsplit("-of-", 1)[1])
    assert shards == [f"ckpt-{step}.data-{i:05d}-of-{total:05d}" for i in range(total)]
    assert (ckpt / f"ckpt-{step}.index").is_file()
