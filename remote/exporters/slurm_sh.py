"""The fixed part of the sbatch script `slurm.py` writes: bash that reads the task table.

Kept apart from the table (`slurm.py`) so it reads as one program. Bash >= 4 (arrays, mapfile);
Slurm commands used: `scontrol show hostnames` and `srun`. Two entry points in one file:
`sbatch FILE` runs `tfctl_main` on the allocation's first node (the driver), which starts every
task as its own step with `srun ... bash -c "<this script>" tfctl-task --task N`; that copy runs
`tfctl_run_task N` on the task's node. Sending the script's text as an argument means the nodes
need nothing but bash (Slurm keeps the batch script on the first node only).

Conventions follow TensorFlow's SlurmClusterResolver
(tensorflow/python/distribute/cluster_resolver/slurm_cluster_resolver.py): the allocation's
nodes in `scontrol show hostnames` order, tasks addressed as `node:port`, and
CUDA_VISIBLE_DEVICES set per task by the launcher rather than trusted from Slurm; see
https://slurm.schedmd.com/srun.html (--overlap, --nodelist) and
https://slurm.schedmd.com/gres.html (Slurm sets CUDA_VISIBLE_DEVICES in a step only where it
binds GPUs, i.e. gres.conf names their device files).
"""

from __future__ import annotations

MACHINERY = r'''
# ---------------------------------------------------------------------------------------------
# The machinery: nothing to edit below. `sbatch` runs tfctl_main on the first node; every task
# runs this same file again on its node, as `tfctl-task --task N` (tfctl_run_task).
TFCTL_POLL_S=${TFCTL_POLL_S:-2}

tfctl_nodes() {  # NODES: the allocation's nodes, in Slurm's order (as SlurmClusterResolver)
  if [ -z "${SLURM_JOB_NODELIST:-}" ]; then
    echo "tfctl: SLURM_JOB_NODELIST is not set: submit this script with sbatch" >&2
    return 1
  fi
  mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
  if [ "${#NODES[@]}" -lt "$NODES_NEEDED" ]; then
    echo "tfctl: the job has ${#NODES[@]} node(s) ($SLURM_JOB_NODELIST), its tasks need" \
         "$NODES_NEEDED: ask for them with #SBATCH --nodes=$NODES_NEEDED" >&2
    return 1
  fi
}

tfctl_cluster() {  # CHIEF, WORKER, PS: node:port of every task with a port, by index;
  local n type index  # RANK_NODES: every worker's node, by index
  CHIEF=() WORKER=() PS=() RANK_NODES=()
  for ((n = 0; n < NTASKS; n++)); do
    tfctl_task "$n"
    type=${NAME%%:*} index=${NAME##*:}
    [ "$type" != worker ] || RANK_NODES[index]=${NODES[NODE]}
    [ -n "$PORT" ] || continue
    case $type in
      chief) CHIEF[index]=${NODES[NODE]}:$PORT ;;
      worker) WORKER[index]=${NODES[NODE]}:$PORT ;;
      ps) PS[index]=${NODES[NODE]}:$PORT ;;
    esac
  done
}

tfctl_json_list() {  # ["a","b"]
  local out="" item
  for item in "$@"; do out+="${out:+,}\"$item\""; done
  printf '[%s]' "$out"
}

tfctl_tf_config() {  # the TF_CONFIG of task type $1, index $2 (the evaluator is no member)
  local c=""
  [ "${#CHIEF[@]}" -eq 0 ] || c+="\"chief\":$(tfctl_json_list "${CHIEF[@]}")"
  [ "${#WORKER[@]}" -eq 0 ] || c+="${c:+,}\"worker\":$(tfctl_json_list "${WORKER[@]}")"
  [ "${#PS[@]}" -eq 0 ] || c+="${c:+,}\"ps\":$(tfctl_json_list "${PS[@]}")"
  printf '{"cluster":{%s},"task":{"type":"%s","index":%s}}' "$c" "$1" "$2"
}

tfctl_group_env() {  # env+=: rank 0's address, as torch (FRAMEWORK=torch) or JAX names it
  local coordinator=${WORKER[0]} all="" node
  case $FRAMEWORK in
    torch) env+=("MASTER_ADDR=${coordinator%:*}" "MASTER_PORT=${coordinator##*:}") ;;
    jax)
      for node in "${RANK_NODES[@]}"; do all+="${all:+,}$node:${coordinator##*:}"; done
      env+=("JAX_COORDINATOR_ADDRESS=$coordinator" "KERAS_DISTRIBUTION_JOB_ADDRESSES=$all") ;;
  esac
}

tfctl_gpus() {  # the mask for GPU positions $1 ("0,1"): the node's GPUs as this step sees them
  [ -n "$1" ] || return 0
  local -a have want mask=()
  local p
  IFS=, read -r -a want <<< "$1"
  if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then  # Slurm bound GPUs to the step: choose among them
    IFS=, read -r -a have <<< "$CUDA_VISIBLE_DEVICES"
  else  # no binding (count-only gres): positions are the node's own GPU indices
    have=()
    for ((p = 0; p < GPUS_PER_NODE; p++)); do have+=("$p"); done
  fi
  for p in "${want[@]}"; do
    if [ "$p" -ge "${#have[@]}" ]; then
      echo "tfctl: $NAME wants the node's GPU number $((p + 1)), this step sees" \
           "${#have[@]} (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-unset})" >&2
      return 1
    fi
    mask+=("${have[p]}")
  done
  (IFS=,; printf '%s' "${mask[*]}")
}

tfctl_run_task() {  # run task $1 here, in its step: its env, TF_CONFIG or flags, mask, restarts
  local n=$1 mask type index tries=0 rc
  tfctl_nodes || exit 2
  tfctl_cluster
  tfctl_task "$n" || { echo "tfctl: this script has no task $n" >&2; exit 2; }
  mask=$(tfctl_gpus "$GPUS") || exit 2
  type=${NAME%%:*} index=${NAME##*:}
  local -a env=("${ENV[@]}" "CUDA_VISIBLE_DEVICES=$mask" "TFCTL_TASK=$NAME"
                "TFCTL_RUN_ID=slurm-${SLURM_JOB_ID:-0}")
  local -a argv=("${ARGV[@]}")
  case $STYLE:$type in
    tf_config:ps | tf_config:worker | tf_config:chief | tf_config:evaluator)
      env+=("TF_CONFIG=$(tfctl_tf_config "$type" "$index")") ;;
    flags:ps | flags:worker | flags:chief)
      argv+=("--ps_hosts=$(IFS=,; printf '%s' "${PS[*]}")"
             "--worker_hosts=$(IFS=,; printf '%s' "${WORKER[*]}")"
             "--job_name=$type" "--task_index=$index") ;;
    env:worker) tfctl_group_env ;;
  esac
  cd "$WORKDIR" || exit 2
  echo "tfctl: $NAME on ${NODES[NODE]} (CUDA_VISIBLE_DEVICES=$mask): ${argv[*]}" >&2
  [ "$RESTART" != never ] || exec env -- "${env[@]}" "${argv[@]}"
  while :; do
    env -- "${env[@]}" "${argv[@]}"
    rc=$?
    if [ "$RESTART" = on-failure ] && [ "$rc" -eq 0 ]; then exit 0; fi
    [ "$tries" -lt "$RESTART_MAX" ] || exit "$rc"
    tries=$((tries + 1))
    echo "tfctl: $NAME ended (exit $rc): restart $tries of $RESTART_MAX" >&2
    sleep "$RESTART_BACKOFF_S"
  done
}

tfctl_in() {  # is $1 one of the rest?
  local x want=$1
  shift
  for x in "$@"; do [ "$x" != "$want" ] || return 0; done
  return 1
}

tfctl_reap() {  # RC[n]: the exit status of every task whose step has ended
  local n
  for ((n = 0; n < NTASKS; n++)); do
    if [ -z "${RC[n]:-}" ] && ! kill -0 "${PIDS[n]}" 2>/dev/null; then
      wait "${PIDS[n]}"
      RC[n]=$?
      tfctl_task "$n"
      echo "tfctl: $NAME ended (exit ${RC[n]})"
    fi
  done
}

tfctl_left() {  # the tasks still running, less those named
  local n
  for ((n = 0; n < NTASKS; n++)); do
    [ -n "${RC[n]:-}" ] || tfctl_in "$n" "$@" || printf '%s\n' "$n"
  done
}

tfctl_job_ended() {  # END_MODE any: one of END_TASKS ended; all: every one of them;
  local n ended=0   # group: the first of them ended, or one of them failed
  [ -n "$(tfctl_left)" ] || return 0
  if [ "$END_MODE" = group ]; then
    [ -z "${RC[END_TASKS[0]]:-}" ] || return 0
    for n in "${END_TASKS[@]}"; do [ "${RC[n]:-0}" -eq 0 ] || return 0; done
    return 1
  fi
  for n in "${END_TASKS[@]}"; do [ -z "${RC[n]:-}" ] || ended=$((ended + 1)); done
  if [ "$END_MODE" = any ]; then [ "$ended" -gt 0 ]; else [ "$ended" -eq "${#END_TASKS[@]}" ]; fi
}

tfctl_stop() {  # SIGTERM to the steps of the tasks named (srun passes it on to the task)
  local n
  for n in "$@"; do
    [ -z "${RC[n]:-}" ] || continue
    tfctl_task "$n"
    echo "tfctl: stopping $NAME"
    kill -TERM "${PIDS[n]}" 2>/dev/null
  done
}

tfctl_wait_for() {  # wait up to $1 s (-1: for ever) for the tasks after it to end
  local limit=$1 start=$SECONDS
  shift
  while :; do
    tfctl_reap
    local n running=0
    for n in "$@"; do [ -n "${RC[n]:-}" ] || running=1; done
    [ "$running" -eq 1 ] || return 0
    [ "$limit" -lt 0 ] || [ $((SECONDS - start)) -lt "$limit" ] || return 1
    sleep "$TFCTL_POLL_S"
  done
}

tfctl_main() {
  local n log self rc=0
  tfctl_nodes || exit 2
  mkdir -p "$WORKDIR" && cd "$WORKDIR" || exit 2
  RUN_DIR=$WORKDIR/.tfctl/slurm/${SLURM_JOB_ID:-0}
  mkdir -p "$RUN_DIR" "${OUTPUTS[@]}" || exit 2
  self=$(cat "$0") || exit 2
  PIDS=() RC=()
  echo "tfctl: job ${SLURM_JOB_ID:-?} on ${NODES[*]}; logs in $RUN_DIR"
  for ((n = 0; n < NTASKS; n++)); do
    tfctl_task "$n"
    log=$RUN_DIR/${NAME/:/-}.log
    srun --overlap --nodes=1 --ntasks=1 --nodelist="${NODES[NODE]}" --job-name="$NAME" \
      --output="$log" bash -c "$self" tfctl-task --task "$n" &
    PIDS[n]=$!
    echo "tfctl: started $NAME on ${NODES[NODE]} ($log)"
  done
  until tfctl_job_ended; do
    sleep "$TFCTL_POLL_S"
    tfctl_reap
  done
  for n in "${END_TASKS[@]}"; do
    if [ -n "${RC[n]:-}" ] && [ "${RC[n]}" -ne 0 ]; then rc=${RC[n]}; break; fi
  done
  echo "tfctl: the job has ended (exit $rc)"
  tfctl_stop "${STOP_AT_END[@]}"  # what only serves (parameter servers) ends with the job
  if [ "$END_MODE" = group ] && [ "$rc" -ne 0 ]; then  # a group cannot go on without a rank
    tfctl_stop "${END_TASKS[@]}"
  fi
  # The others (workers, the evaluator) may finish on their own; then TensorBoard's grace.
  tfctl_wait_for "$WORKER_GRACE_S" $(tfctl_left "${TENSORBOARD[@]}") ||
    tfctl_stop $(tfctl_left "${TENSORBOARD[@]}")
  tfctl_wait_for "$TENSORBOARD_GRACE_S" $(tfctl_left) || tfctl_stop $(tfctl_left)
  tfctl_wait_for 30 $(tfctl_left)
  exit "$rc"
}

if [ "${1:-}" = --task ]; then
  tfctl_run_task "$2"
else
  tfctl_main
fi
'''
