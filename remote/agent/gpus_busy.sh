if ! command -v nvidia-smi >/dev/null 2>&1; then echo '{{MARK}}none'; exit 0; fi
{{QUERY_GPUS}} 2>&1
echo '{{MARK}}apps'
{{QUERY_APPS}} 2>&1
