if ! command -v nvidia-smi >/dev/null 2>&1; then echo '{{MARK}}none'; exit 0; fi
nvidia-smi --help-query-gpu 2>&1
echo '{{MARK}}apps'
nvidia-smi --help-query-compute-apps 2>&1
echo '{{MARK}}gpus'
nvidia-smi --query-gpu=uuid --format=csv,noheader 2>&1
