"""Base root filesystems for ``FROM``: the families envlab can build without Docker.

A ``FROM`` reference resolves to a ``BaseRecipe``: a Debian or Ubuntu release built by
``mmdebstrap`` from the distributions' own package archives (``--variant=minbase``, the
release's updates and security suites, as the official images have them), plus the packages
and settings the image is known to add. ``python:X.Y-*`` images are that release with Debian's
or Ubuntu's Python X.Y made to behave as the official image (``python``, ``pip``, ``pip
install`` as root without a venv); Terminal-Bench's base images are their published recipes.
Where the result differs from the image Docker would pull (a Python from another release, for
instance) the recipe's ``notes`` say so, and every task built on it reports them.

A base is built once per machine under ``images/bases/<key>/rootfs`` and shared read-only.
``register_base`` adopts a root filesystem made elsewhere (``docker export``, a test's tiny
one) for an exact reference.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from envlab.core.errors import ConfigError, InfraError
from envlab.sandbox.image.store import (
    commit,
    content_key,
    images_root,
    locked,
    remove_tree,
    scratch,
)

RECIPE_VERSION = "1"
DEBIAN = "http://deb.debian.org/debian"
DEBIAN_SECURITY = "http://deb.debian.org/debian-security"
UBUNTU = "http://archive.ubuntu.com/ubuntu"
UBUNTU_KEYRING = (
    f"{UBUNTU}/pool/main/u/ubuntu-keyring/ubuntu-keyring_2023.11.28.1_all.deb",
    "36de43b15853ccae0028e9a767613770c704833f82586f28eb262f0311adb8a8",
)
"""Ubuntu's archive keys (not packaged by Debian): a pinned file, checked by its hash."""

DEBIAN_SUITES = {"11": "bullseye", "12": "bookworm", "13": "trixie"}
UBUNTU_SUITES = {"20.04": "focal", "22.04": "jammy", "24.04": "noble"}
PYTHON_HOMES = {
    "3.8": ("ubuntu", "focal"),
    "3.9": ("debian", "bullseye"),
    "3.10": ("ubuntu", "jammy"),
    "3.11": ("debian", "bookworm"),
    "3.12": ("ubuntu", "noble"),
    "3.13": ("debian", "trixie"),
}
"""Where the distributions ship each Python as their own python3."""

# what the official python images give: python and pip on PATH (also in /usr/local/bin), pip
# from PyPI's own wheel (ensurepip) installing as root into /usr/local, no EXTERNALLY-MANAGED
# marker, and no Debian-packaged Python libraries that pip would have to uninstall
_PYTHON_HOOK = (
    "rm -f /usr/lib/python3*/EXTERNALLY-MANAGED; "
    "python3 $(ls /usr/share/python-wheels/pip-*.whl)/pip install -q --no-index "
    "--find-links /usr/share/python-wheels pip; "
    "for n in python python3; do ln -sf /usr/bin/$n /usr/local/bin/$n; done; "
    "[ -e /usr/local/bin/pip ] || ln -s pip3 /usr/local/bin/pip"
)
_TB_HOOK = "echo 'debconf debconf/frontend select Noninteractive' | debconf-set-selections"


@dataclass(frozen=True)
class BaseRecipe:
    """How to build one base root filesystem."""

    ref: str
    distro: str
    suite: str
    packages: tuple[str, ...] = ()
    hooks: tuple[str, ...] = ()
    """Shell commands run as root inside the new root filesystem, in order."""
    env: tuple[tuple[str, str], ...] = ()
    workdir: str = "/"
    notes: tuple[str, ...] = ()

    @property
    def all_packages(self) -> tuple[str, ...]:
        """Ubuntu's minbase has no apt (its images do): added, with Ubuntu's archive keys."""
        extra = ("apt", "ubuntu-keyring") if self.distro == "ubuntu" else ()
        return extra + self.packages

    @property
    def key(self) -> str:
        what = (RECIPE_VERSION, self.distro, self.suite, self.all_packages, self.hooks)
        return f"{self.distro}-{self.suite}-{content_key(*what)[:12]}"


@dataclass
class BaseImage:
    """A built base: where it is, and what a container of it starts with."""

    rootfs: Path
    recipe: BaseRecipe
    built_s: float = 0.0
    cached: bool = True
    notes: list[str] = field(default_factory=list)


_PLATFORM = re.compile(r"^--platform=\S+\s+")


def normalise(ref: str) -> str:
    """``ref`` without ``--platform=`` and ``@sha256:`` digests, lower-case, ``docker.io/``
    and ``library/`` dropped."""
    ref = _PLATFORM.sub("", ref.strip()).split()[0].split("@", 1)[0].lower()
    for prefix in ("docker.io/", "index.docker.io/", "library/"):
        ref = ref.removeprefix(prefix)
    return ref


def recipe_for(ref: str) -> BaseRecipe:
    """The recipe of a ``FROM`` reference; ``ConfigError`` naming what can be built."""
    name, _, tag = normalise(ref).partition(":")
    tag = tag or "latest"
    if name.endswith("t-bench/python-3-13"):
        r = _python(ref, "3.13", "bookworm")
        # no asciinema: Debian's would bring Debian-packaged Python libraries (typing_extensions,
        # setuptools, ...) into the one Python there is, which pip then cannot replace; the
        # image's own asciinema is in another Python than the one its tasks use
        return _with(r, ("tmux", "curl"), (_TB_HOOK, "mkdir -p /app"), "/app")
    if name.endswith("t-bench/ubuntu-24-04"):
        r = BaseRecipe(ref, "ubuntu", "noble")
        return _with(r, ("tmux", "asciinema"), ("mkdir -p /app",), "/app")
    if name == "python":
        m = re.match(r"^(3\.\d+)(?:\.\d+)?(?:-[a-z0-9-]+)?$", tag)
        if m:
            suite = next((s for s in ("bookworm", "bullseye", "trixie") if s in tag), "bookworm")
            return _python(ref, m.group(1), suite)
    if name == "debian":
        suite = DEBIAN_SUITES.get(tag.split("-")[0].split(".")[0], tag.split("-")[0])
        if suite in DEBIAN_SUITES.values():
            return BaseRecipe(ref, "debian", suite)
    if name == "ubuntu":
        suite = UBUNTU_SUITES.get(tag, tag)
        if suite in UBUNTU_SUITES.values():
            return BaseRecipe(ref, "ubuntu", suite)
    raise ConfigError(
        f"FROM {ref}: envlab cannot build this base without Docker. It builds debian:"
        f"{'|'.join(DEBIAN_SUITES.values())}, ubuntu:{'|'.join(UBUNTU_SUITES)}, python:"
        f"{'|'.join(PYTHON_HOMES)}[-slim][-bookworm] and Terminal-Bench's python-3-13 and "
        "ubuntu-24-04; or adopt a root filesystem for it with envlab.sandbox.image."
        "register_base(ref, rootfs)."
    )


def _with(r: BaseRecipe, pkgs: tuple[str, ...], hooks: tuple[str, ...], wd: str) -> BaseRecipe:
    return BaseRecipe(
        r.ref, r.distro, r.suite, r.packages + pkgs, r.hooks + hooks, r.env, wd, r.notes
    )


def _python(ref: str, version: str, suite: str) -> BaseRecipe:
    if version not in PYTHON_HOMES:
        raise ConfigError(
            f"FROM {ref}: no Debian or Ubuntu release ships Python {version} "
            f"(envlab builds Python {', '.join(PYTHON_HOMES)})"
        )
    distro, home = PYTHON_HOMES[version]
    notes: tuple[str, ...] = ()
    if (distro, home) != ("debian", suite):
        notes = (
            f"FROM {ref}: Python {version} comes from {distro.title()} {home} (Debian {suite} "
            f"ships another Python), so the system around it is {home}'s",
        )
    # the official images carry CPython's headers (a C extension builds against them)
    packages = ("ca-certificates", "python3", "python3-dev", "python3-venv", "python-is-python3")
    env = (("LANG", "C.UTF-8"),)
    return BaseRecipe(ref, distro, home, packages, (_PYTHON_HOOK,), env, "/", notes)


def register_base(ref: str, rootfs: Path) -> Path:
    """Adopt ``rootfs`` (a directory) as the base of ``FROM ref``: copied (hard links where
    possible) into the store. Returns the stored root filesystem."""
    if not (rootfs / "bin").exists() and not (rootfs / "usr" / "bin").exists():
        raise ConfigError(f"{rootfs} does not look like a root filesystem (no bin/ or usr/bin/)")
    final = images_root() / "bases" / f"local-{content_key(normalise(ref))}"
    with locked(final.name):
        tmp = scratch("base")
        subprocess.run(["cp", "-a", "--reflink=auto", f"{rootfs}/.", str(tmp)], check=True)
        if final.exists():
            remove_tree(final)
        commit_dir = tmp.parent / f"{tmp.name}-done"
        (commit_dir).mkdir()
        tmp.rename(commit_dir / "rootfs")
        return commit(commit_dir, final) / "rootfs"


def registered(ref: str) -> Path | None:
    """The root filesystem ``register_base`` adopted for ``ref``, if any."""
    path = images_root() / "bases" / f"local-{content_key(normalise(ref))}" / "rootfs"
    return path if path.is_dir() else None


def buildable_here(ref: str) -> str | None:
    """None when ``FROM ref`` can be had on this machine (registered, already built, or
    mmdebstrap is installed to build it); else why not, saying how to fix it."""
    if registered(ref) is not None:
        return None
    recipe = recipe_for(ref)
    if (images_root() / "bases" / recipe.key / "rootfs").is_dir() or shutil.which("mmdebstrap"):
        return None
    return (
        f"mmdebstrap is not installed, so the base of FROM {ref} cannot be built: "
        "`apt-get install mmdebstrap` (Debian's package) to run tasks in their images"
    )


def ensure_base(ref: str, progress: Callable[[str], None] = lambda _: None) -> BaseImage:
    """The base of ``FROM ref``: a registered one, else built from its recipe once."""
    local = registered(ref)
    if local is not None:
        return BaseImage(local, BaseRecipe(ref, "local", "local"), notes=[])
    recipe = recipe_for(ref)
    final = images_root() / "bases" / recipe.key
    if (final / "rootfs").is_dir():
        return BaseImage(final / "rootfs", recipe, notes=list(recipe.notes))
    with locked(recipe.key):
        if (final / "rootfs").is_dir():
            return BaseImage(final / "rootfs", recipe, notes=list(recipe.notes))
        progress(f"building the base {recipe.distro} {recipe.suite} for FROM {ref} (once)")
        t0 = time.monotonic()
        tmp = scratch("base")
        try:
            _mmdebstrap(recipe, tmp / "rootfs")
        except BaseException:
            remove_tree(tmp)
            raise
        commit(tmp, final)
        took = time.monotonic() - t0
        return BaseImage(final / "rootfs", recipe, took, False, list(recipe.notes))


def _mmdebstrap(recipe: BaseRecipe, target: Path) -> None:
    tool = shutil.which("mmdebstrap")
    if tool is None:
        raise ConfigError(
            "building a base image needs mmdebstrap: `apt-get install mmdebstrap` (Debian's "
            "package; on other systems, build the root filesystem elsewhere and adopt it with "
            "envlab.sandbox.image.register_base)"
        )
    argv = [tool, "--variant=minbase", "--mode=root", "--format=directory", "-q"]
    if recipe.distro == "ubuntu":
        argv += ["--components=main,restricted,universe,multiverse", f"--keyring={_ubuntu_keys()}"]
        mirrors = [f"deb {UBUNTU} {recipe.suite}{s} main restricted universe multiverse"
                   for s in ("", "-updates", "-security")]  # fmt: skip
    else:
        security = f"deb {DEBIAN_SECURITY} {recipe.suite}-security main"
        mirrors = [f"deb {DEBIAN} {recipe.suite} main", f"deb {DEBIAN} {recipe.suite}-updates main"]
        mirrors.append(security)
    if recipe.all_packages:
        argv.append("--include=" + ",".join(recipe.all_packages))
    for hook in recipe.hooks:
        clean = "env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8"
        argv.append(f'--customize-hook=chroot "$1" {clean} sh -c {shlex.quote(hook)}')
    # what Docker puts in every container: these are bound over at run time
    files = ': > "$1"/etc/resolv.conf; : > "$1"/etc/hosts; echo sandbox > "$1"/etc/hostname'
    argv.append(f"--customize-hook={files}")
    proc = subprocess.run(
        [*argv, recipe.suite, str(target), *mirrors], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise InfraError(
            f"mmdebstrap could not build {recipe.distro} {recipe.suite} for FROM {recipe.ref} "
            f"(exit {proc.returncode}): {proc.stderr.strip()[-1500:]}. It needs the network to "
            f"{UBUNTU if recipe.distro == 'ubuntu' else DEBIAN}."
        )


def _ubuntu_keys() -> Path:
    """A keyring directory holding Ubuntu's archive keys (from the pinned package)."""
    keys = images_root() / "bases" / "ubuntu-keyring"
    if (keys / "done").exists():
        return keys
    url, sha = UBUNTU_KEYRING
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            data = r.read()
    except OSError as e:
        raise InfraError(f"could not fetch Ubuntu's archive keys from {url}: {e}") from e
    if hashlib.sha256(data).hexdigest() != sha:
        raise InfraError(f"{url} does not have the pinned sha256 {sha}: refusing its keys")
    tmp = scratch("keys")
    (tmp / "k.deb").write_bytes(data)
    subprocess.run(["dpkg-deb", "-x", str(tmp / "k.deb"), str(tmp / "x")], check=True)
    keys.mkdir(exist_ok=True)
    for gpg in (tmp / "x" / "etc" / "apt" / "trusted.gpg.d").glob("*.gpg"):
        shutil.copy(gpg, keys / gpg.name)
    (keys / "done").touch()
    remove_tree(tmp)
    return keys
