"""GPUs: nvidia-smi parsing (pure), what was last seen of them (`lastseen`: recent samples,
per-host snapshots), the telemetry stream, which task owns a GPU, findings (pure), and the
busy-GPU check before a launch."""
