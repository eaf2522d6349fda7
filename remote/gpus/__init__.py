"""GPUs: nvidia-smi parsing (pure), history, the telemetry stream, which task owns a GPU,
findings (pure), and the busy-GPU check before a launch."""
