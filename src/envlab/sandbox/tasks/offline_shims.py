"""The POSIX sh programs of the offline kit: ``curl``/``wget`` shims and uv's local installer.

They run inside the task's image, where only its ``/bin/sh`` can be relied on: no bash-isms, no
python, only ``cp``, ``chmod``, ``mkdir``, ``mv`` and ``cat`` besides shell built-ins.
``@KIT@``, ``@TOOL@``, ``@LATEST@`` and ``@FAIL@`` are filled in by ``render_fetch_shim``.
"""

from __future__ import annotations

FETCH_SHIM = r"""#!/bin/sh
# envlab offline @TOOL@: grading runs with the network off. uv's installer is served from
# envlab's cache; loopback URLs (and hosts in $ENVLAB_OFFLINE_ALLOW_HOSTS) go to the image's
# real @TOOL@; any other URL fails, is named on stderr and in $ENVLAB_OFFLINE_REPORT.
kit='@KIT@'
tool='@TOOL@'
latest='@LATEST@'
set -f
nl='
'
out='' ; outdir='' ; remote_name=0 ; urls=''
envlab_takes_value() {
  case $tool:$1 in
    curl:--header|curl:--data|curl:--data-raw|curl:--data-binary|curl:--data-urlencode|\
curl:--data-ascii|curl:--request|curl:--user-agent|curl:--referer|curl:--user|curl:--proxy|\
curl:--proto|curl:--proto-redir|curl:--max-time|curl:--connect-timeout|curl:--retry|\
curl:--retry-delay|curl:--retry-max-time|curl:--write-out|curl:--cookie|curl:--cookie-jar|\
curl:--upload-file|curl:--form|curl:--form-string|curl:--continue-at|curl:--range|\
curl:--config|curl:--cert|curl:--cacert|curl:--capath|curl:--key|curl:--limit-rate|\
curl:--max-filesize|curl:--resolve|curl:--connect-to|curl:--dump-header|curl:--stderr|\
curl:--trace|curl:--trace-ascii|curl:--interface|curl:--netrc-file|curl:--unix-socket|\
curl:--noproxy|curl:--proxy-user|curl:--oauth2-bearer|curl:--speed-limit|curl:--speed-time|\
curl:--max-redirs|curl:--ciphers|curl:--tls-max|curl:--json|curl:--variable|curl:--etag-save|\
curl:--etag-compare|curl:--preproxy|curl:--socks5|curl:--socks5-hostname|curl:--socks4|\
curl:--local-port|curl:--dns-servers|curl:--pinnedpubkey|curl:--quote|curl:--time-cond|\
curl:--aws-sigv4|curl:--expect100-timeout|curl:--keepalive-time|\
wget:--output-file|wget:--append-output|wget:--execute|wget:--user-agent|wget:--tries|\
wget:--timeout|wget:--wait|wget:--quota|wget:--input-file|wget:--base|wget:--level|\
wget:--domains|wget:--header|wget:--user|wget:--password|wget:--post-data|wget:--post-file|\
wget:--method|wget:--body-data|wget:--referer|wget:--load-cookies|wget:--save-cookies|\
wget:--ca-certificate|wget:--certificate|wget:--private-key|wget:--limit-rate|\
wget:--dns-timeout|wget:--connect-timeout|wget:--read-timeout|wget:--bind-address|\
wget:--http-user|wget:--http-password|wget:--reject|wget:--accept) return 0 ;;
  esac
  return 1
}
envlab_parse() {  # in a function: the script's own "$@" stays for the real tool
while [ $# -gt 0 ]; do
  a=$1; shift
  case $tool:$a in
    *:--) while [ $# -gt 0 ]; do urls="$urls$1$nl"; shift; done ;;
    curl:--output=*|wget:--output-document=*) out=${a#*=} ;;
    curl:--output|wget:--output-document) out=${1-}; [ $# -gt 0 ] && shift ;;
    curl:--output-dir=*|wget:--directory-prefix=*) outdir=${a#*=} ;;
    curl:--output-dir|wget:--directory-prefix) outdir=${1-}; [ $# -gt 0 ] && shift ;;
    curl:--remote-name|curl:--remote-name-all) remote_name=1 ;;
    curl:--url=*) urls="$urls${a#*=}$nl" ;;
    curl:--url) urls="$urls${1-}$nl"; [ $# -gt 0 ] && shift ;;
    *:--*=*) ;;
    *:--*) if envlab_takes_value "$a" && [ $# -gt 0 ]; then shift; fi ;;
    *:-?*)
      s=${a#-}
      while [ -n "$s" ]; do
        c=${s%"${s#?}"}; s=${s#?}
        case $tool:$c in
          curl:o|wget:O)
            if [ -n "$s" ]; then out=$s; else out=${1-}; [ $# -gt 0 ] && shift; fi; s='' ;;
          wget:P)
            if [ -n "$s" ]; then outdir=$s; else outdir=${1-}; [ $# -gt 0 ] && shift; fi; s='' ;;
          curl:O) remote_name=1 ;;
          curl:[HdXAeuxmwbcTFCrKEyYzDUQtP]|wget:[oaeUtTwQiBlDRAXI])
            if [ -z "$s" ] && [ $# -gt 0 ]; then shift; fi; s='' ;;
        esac
      done ;;
    *) urls="$urls$a$nl" ;;
  esac
done
}
envlab_parse "$@"

envlab_uv_version() {
  case $1 in
    http://astral.sh/uv/install.sh|https://astral.sh/uv/install.sh|astral.sh/uv/install.sh)
      echo "$latest" ;;
    http://astral.sh/uv/*/install.sh|https://astral.sh/uv/*/install.sh|astral.sh/uv/*/install.sh)
      v=${1#*astral.sh/uv/}; v=${v%/install.sh}
      case $v in */*|'') return 1 ;; esac
      echo "$v" ;;
    https://github.com/astral-sh/uv/releases/download/*/uv-installer.sh)
      v=${1#https://github.com/astral-sh/uv/releases/download/}; v=${v%/uv-installer.sh}
      case $v in */*|'') return 1 ;; esac
      echo "$v" ;;
    *) return 1 ;;
  esac
}
envlab_is_local() {
  case $1 in file://*) return 0 ;; esac
  h=${1#*://}; h=${h%%/*}; h=${h%%\?*}; h=${h##*@}
  case $h in \[*) h=${h%%]*}; h=${h#\[} ;; *) h=${h%%:*} ;; esac
  case $h in localhost|127.*|::1|0.0.0.0|'') return 0 ;; esac
  for allowed in ${ENVLAB_OFFLINE_ALLOW_HOSTS-}; do
    [ "$h" = "$allowed" ] && return 0
  done
  return 1
}
envlab_real_tool() {
  self=$(cd "${0%/*}" 2>/dev/null && pwd)
  oldifs=$IFS; IFS=:
  for d in $PATH; do
    IFS=$oldifs
    [ -n "$d" ] || continue
    [ "$(cd "$d" 2>/dev/null && pwd)" = "$self" ] && continue
    if [ -x "$d/$tool" ] && [ ! -d "$d/$tool" ]; then echo "$d/$tool"; return 0; fi
  done
  IFS=$oldifs
  return 1
}
envlab_exec_real() {
  if real=$(envlab_real_tool); then exec "$real" "$@"; fi
  echo "envlab: $tool is not installed in the image (only envlab's offline shim is)" >&2
  exit 2
}

envlab_installer() {
  printf "#!/bin/sh\nenvlab_uv_src='%s'\n" "$kit/uv/$1"
  cat "$kit/lib/uv-install.sh"
}
served='' ; local_urls='' ; missing=''
oldifs=$IFS; IFS=$nl
for u in $urls; do
  IFS=$oldifs
  [ -n "$u" ] || continue
  if v=$(envlab_uv_version "$u") && [ -n "$v" ] && [ -x "$kit/uv/$v/uv" ]; then
    served="$served$v $u$nl"
  elif envlab_is_local "$u"; then
    local_urls="$local_urls$u$nl"
  else
    missing="$missing$u$nl"
  fi
done
IFS=$oldifs
if [ -n "$missing" ]; then
  IFS=$nl
  for u in $missing; do
    IFS=$oldifs
    if [ -n "${ENVLAB_OFFLINE_REPORT-}" ]; then printf '%s\n' "$u" >>"$ENVLAB_OFFLINE_REPORT"; fi
    if v=$(envlab_uv_version "$u"); then
      echo "envlab: uv $v is not in envlab's offline cache" >&2
    fi
    echo "envlab: grading is offline: cannot fetch $u (needs the network)" >&2
  done
  exit @FAIL@
fi
if [ -n "$local_urls" ] || [ -z "$served" ]; then
  envlab_exec_real "$@"
fi
IFS=$nl
for line in $served; do
  IFS=$oldifs
  v=${line%% *}; u=${line#* }
  target=$out
  if [ -z "$target" ] && { [ "$tool" = wget ] || [ "$remote_name" = 1 ]; }; then
    target=${u##*/}
  fi
  if [ -n "$target" ] && [ "$target" != - ] && [ -n "$outdir" ]; then
    mkdir -p "$outdir" && target=$outdir/$target
  fi
  if [ -z "$target" ] || [ "$target" = - ]; then
    envlab_installer "$v"
  else
    envlab_installer "$v" >"$target" || exit 23
  fi
done
exit 0
"""

UV_INSTALLER = r"""# envlab's offline stand-in for uv's installer: copies uv and uvx from envlab's
# cache (no network), honours UV_INSTALL_DIR and XDG_BIN_HOME like uv's installer, writes
# its env script.
set -e
if [ -n "${UV_INSTALL_DIR-}" ]; then
  envlab_dest=$UV_INSTALL_DIR
elif [ -n "${XDG_BIN_HOME-}" ]; then
  envlab_dest=$XDG_BIN_HOME
else
  envlab_dest=$HOME/.local/bin
fi
echo "downloading uv from envlab's offline cache ($envlab_uv_src)"
mkdir -p "$envlab_dest"
for envlab_b in uv uvx; do
  cp "$envlab_uv_src/$envlab_b" "$envlab_dest/.$envlab_b.envlab-tmp"
  chmod 755 "$envlab_dest/.$envlab_b.envlab-tmp"
  mv -f "$envlab_dest/.$envlab_b.envlab-tmp" "$envlab_dest/$envlab_b"
done
echo "installing to $envlab_dest"
echo "  uv"
echo "  uvx"
cat >"$envlab_dest/env" <<ENVLAB_EOF
#!/bin/sh
# add binaries to PATH if they aren't added yet
# affix colons on either side of \$PATH to simplify matching
case ":\${PATH}:" in
    *:"$envlab_dest":*)
        ;;
    *)
        # Prepending path in case a system-installed binary needs to be overridden
        export PATH="$envlab_dest:\$PATH"
        ;;
esac
ENVLAB_EOF
echo "everything's installed!"
echo ""
echo "To add $envlab_dest to your PATH, either restart your shell or run:"
echo ""
echo "    source $envlab_dest/env (sh, bash, zsh)"
"""

UV_FALLBACK = """#!/bin/sh
# envlab: the image has no @NAME@; this one is uv @VERSION@ from envlab's offline cache.
exec '@KIT@/uv/@VERSION@/@NAME@' "$@"
"""


def render_fetch_shim(tool: str, kit: str, latest: str) -> str:
    """The curl (exit 6 on a URL it cannot serve) or wget (exit 4) shim."""
    fail = "6" if tool == "curl" else "4"
    text = FETCH_SHIM.replace("@KIT@", kit).replace("@TOOL@", tool)
    return text.replace("@LATEST@", latest).replace("@FAIL@", fail)


def render_uv_fallback(name: str, kit: str, version: str) -> str:
    text = UV_FALLBACK.replace("@NAME@", name).replace("@KIT@", kit)
    return text.replace("@VERSION@", version)
