# envlab verifier: read by every non-interactive bash (BASH_ENV). A program the tests call and
# the sandbox lacks is named, and reported to the host, instead of leaving a silent 0.
command_not_found_handle() {
  printf 'envlab: the verifier needs %s, which is not installed in the sandbox\n' "$1" >&2
  printf 'missing %s\n' "$1" 2>/dev/null >>"${ENVLAB_EVENTS:-/logs/.envlab-events}"
  return 127
}
