# envlab's reporting process in an image: the verifier sandbox's first process, run by the
# image's own sh (pristine in the separate mode). It runs bash /tests/test.sh, then kills every
# other process of this PID namespace until none is left (in the shared mode, only those of its
# own cgroup, ENVLAB_VERIFIER_CGROUP: the agent's processes live on), and prints on its last
# line, as the host mode's verifier_run.py does,
#   ENVLAB-VERIFIER-END {"exit_code": N, "signal": N|null, "stragglers": N, "files": {...}}
# where "files" carries the reward files of a private logs directory (ENVLAB_PRIVATE_LOGS),
# base64, as no process of the host can read that directory.
# The host trusts that line only when this process itself exited 0: code under test that kills
# it leaves no valid grade. When nothing else is alive, nothing can write after this line.
bash /tests/test.sh </dev/null
status=$?
left=0
rounds=0
while [ "$rounds" -lt 500 ]; do
  found=0
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    case "$pid" in 1|"$$") continue ;; esac
    # alive when any thread is (a leader that exited leaves its other threads running); in the
    # shared mode only the verifier's own cgroup counts (the agent's processes live on)
    alive=
    for t in "$p"/task/[0-9]*; do
      st=
      read -r st 2>/dev/null <"$t/stat" || continue
      st=${st##*) }
      case "${st%% *}" in Z|X|"") continue ;; esac
      if [ -n "$ENVLAB_VERIFIER_CGROUP" ]; then
        cg=
        read -r cg 2>/dev/null <"$t/cgroup" || continue
        case "$cg" in *"/$ENVLAB_VERIFIER_CGROUP") ;; *) continue ;; esac
      fi
      alive=1
      break
    done
    [ -n "$alive" ] || continue
    kill -9 "$pid" 2>/dev/null && found=$((found + 1))
  done
  [ "$found" -eq 0 ] && break
  [ "$rounds" -eq 0 ] && left=$found
  rounds=$((rounds + 1))
done
signal=null
[ "$status" -gt 128 ] && signal=$((status - 128))
# a private logs directory (the shared mode: nothing of the host reads it) travels on this line
files=
if [ -n "$ENVLAB_PRIVATE_LOGS" ]; then
  for f in reward.txt reward.json rewards.json; do
    p="$ENVLAB_PRIVATE_LOGS/$f"
    [ -f "$p" ] && [ ! -L "$p" ] || continue
    b=$(head -c 65536 "$p" | base64 | tr -d '\n')
    files="$files${files:+, }\"$f\": \"$b\""
  done
fi
printf '\nENVLAB-VERIFIER-END {"exit_code": %s, "signal": %s, "stragglers": %s, "files": {%s}}\n' \
  "$status" "$signal" "$left" "$files"
exit 0
