#@section head
_tf_M='{{MARK}}'
_tf_tail() { tail -n {{TAIL_LINES}} "$_tf_LOG" | sed "s/^/${_tf_M}out /"; }
_tf_on_exit() {
  _tf_rc=$?; if [ -n "$_tf_running" ]; then _tf_tail; fi
  echo "${_tf_M}exit $_tf_rc"
}
_tf_running=
trap _tf_on_exit EXIT
mkdir -p {{WORKDIR}} 2>/dev/null; cd {{WORKDIR}} 2>/dev/null || { echo "${_tf_M}error cannot enter the workdir {{WORKDIR_ECHO}}"; exit 0; }
_tf_D="$(pwd)/{{SETUP_DIR}}"
mkdir -p "$_tf_D" || { echo "${_tf_M}error cannot create $_tf_D"; exit 0; }
_tf_file() {
  printf 'file %s %s\n' "$1" \
    "$(stat -c %Y "$1" 2>/dev/null || stat -f %m "$1")"
  cat "$1"
}
_tf_hash_inputs() {
  echo {{DIGEST}}
  for _tf_f in {{INPUTS}}; do
    if [ -d "$_tf_f" ]; then
      find "$_tf_f" -type f -print | LC_ALL=C sort | while IFS= read -r _tf_p; do
        _tf_file "$_tf_p"; done
    elif [ -f "$_tf_f" ]; then _tf_file "$_tf_f"
    else printf 'missing %s\n' "$_tf_f"; fi
  done
}
_tf_H=$(_tf_hash_inputs | { sha256sum 2>/dev/null || cksum; } | tr -cd '0-9a-f' | cut -c1-16)
echo "${_tf_M}hash $_tf_H"
_tf_LOG="$_tf_D/$_tf_H.log"
#@section skip
if [ -e "$_tf_D/done-$_tf_H" ]; then echo "${_tf_M}log $_tf_LOG"
  echo "${_tf_M}skip $(cat "$_tf_D/done-$_tf_H")"; exit 0; fi
#@section prepare
rm -f "$_tf_D"/done-*
ls -1t "$_tf_D"/*.log 2>/dev/null | tail -n +{{KEEP_LOGS}} | while IFS= read -r _tf_old; do rm -f "$_tf_old"; done
: > "$_tf_LOG"
echo "${_tf_M}log $_tf_LOG"
#@section step
_tf_c={{COMMAND}}
echo "${_tf_M}start {{I}}"
printf '$ %s\n' "$_tf_c" >>"$_tf_LOG"
_tf_running=1
eval "$_tf_c" </dev/null >>"$_tf_LOG" 2>&1
_tf_rc=$?; _tf_running=
if [ $_tf_rc -ne 0 ]; then echo "${_tf_M}fail {{I}} $_tf_rc"; _tf_tail; exit 0; fi
echo "${_tf_M}ok {{I}}"
#@section tail
date +%s > "$_tf_D/done-$_tf_H"
echo "${_tf_M}done"
exit 0
