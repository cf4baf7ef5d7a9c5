# BASH_ENV of the verifier in an image: a program test.sh calls and the image lacks is reported
# to envlab (a grade of 0 then says which tool is missing instead of passing as a plain 0).
command_not_found_handle() {
  printf 'missing %s\n' "$1" >>/opt/envlab/report/events 2>/dev/null
  printf 'bash: %s: command not found\n' "$1" >&2
  return 127
}
