# envlab's reporting process in an image: the verifier sandbox's first process, run by the
# image's own sh (pristine in the separate mode). It runs bash /tests/test.sh, then (unless
# ENVLAB_KEEP_OTHERS is set: the shared mode, where the agent's processes live on) kills every
# other process of this PID namespace until none is left, and prints on its last line, as the
# host mode's verifier_run.py does,
#   ENVLAB-VERIFIER-END {"exit_code": N, "signal": N|null, "stragglers": N}
# The host trusts that line only when this process itself exited 0: code under test that kills
# it leaves no valid grade. When nothing else is alive, nothing can write after this line.
bash /tests/test.sh </dev/null
status=$?
left=0
rounds=0
while [ -z "$ENVLAB_KEEP_OTHERS" ] && [ "$rounds" -lt 500 ]; do
  found=0
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    case "$pid" in 1|"$$") continue ;; esac
    st=
    read -r st 2>/dev/null <"$p/stat" || continue
    st=${st##*) }
    case "${st%% *}" in Z|X|"") continue ;; esac
    kill -9 "$pid" 2>/dev/null && found=$((found + 1))
  done
  [ "$found" -eq 0 ] && break
  [ "$rounds" -eq 0 ] && left=$found
  rounds=$((rounds + 1))
done
signal=null
[ "$status" -gt 128 ] && signal=$((status - 128))
printf '\nENVLAB-VERIFIER-END {"exit_code": %s, "signal": %s, "stragglers": %s}\n' \
  "$status" "$signal" "$left"
exit 0
