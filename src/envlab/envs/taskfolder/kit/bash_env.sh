# envlab verifier: read by every non-interactive bash (BASH_ENV). A program the tests call and
# the sandbox lacks is named, and reported to the host, instead of leaving a silent 0.
command_not_found_handle() {
  printf 'envlab: the verifier needs %s, which is not installed in the sandbox\n' "$1" >&2
  if [ -n "${ENVLAB_PYTEST_SESSIONS:-}" ]; then
    printf '%s\n' "$1" >> "$ENVLAB_PYTEST_SESSIONS/missing-tools" 2>/dev/null
  fi
  return 127
}
