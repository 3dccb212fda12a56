"""The `base` template's root filesystem: Debian bookworm from debootstrap (a stage cached by its
recipe), the `user` account, the host's CA bundle, envd from packaging/install.sh, and a slimmed
boot. Builds into `DEST.new` and renames at the end; does not boot anything. packaging/ and envd
come from this source tree, or from sandboxd/recipe/ where sandboxd was installed from a wheel."""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
import time
from pathlib import Path

from sandboxd.errors import HostError, TemplateError
from sandboxd.host.removal import bound_somewhere, remove_tree

log = logging.getLogger("sandboxd.builds.base_image")

SOURCE_TREE = Path(__file__).resolve().parents[2]
# What a sandboxd wheel ships instead (packaging/sandboxd/hatch_build.py): envd's wheel and
# packaging/'s install files.
PACKAGED_RECIPE = Path(__file__).resolve().parents[1] / "recipe"
SUITE = "bookworm"
PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "sudo",
    "python3",
    "python-is-python3",
    "python3-venv",
    "curl",
    "git",
    "ca-certificates",
    # The SDKs' ready commands: wait_for_port runs `ss`, wait_for_process `pgrep`.
    "iproute2",
    "procps",
)
# Everything the stage gets beyond debootstrap's minimal base; a change here rebuilds the cache.
RECIPE = f"{SUITE} minbase {','.join(PACKAGES)} user-sudo host-ca v2"
RECIPE_FILE = ".envd-image-recipe"
BUILD_FILE = ".sandboxd-base"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")

# Units a sandbox does not need: no logins, no D-Bus clients, no
# maintenance timers, and no boot step that has nothing to do in a container booted from a finished
# image. Each masked one is a process (or a mount) less per boot competing with envd's start for
# the CPU, and they shortened the boot's critical path to envd from about 500 ms of a loaded
# machine to 150 ms (docs/sandboxd.md, "The boot").
MASKED_UNITS = (
    "console-getty.service",
    "systemd-logind.service",
    "dbus.service",
    "dbus.socket",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "dpkg-db-backup.timer",
    "e2scrub_all.timer",
    "systemd-tmpfiles-clean.timer",
    "systemd-update-utmp.service",
    "systemd-update-utmp-runlevel.service",
    # No fstab: the overlay root is mounted read-write before the container's init starts.
    "systemd-remount-fs.service",
    # The image's system users were made when their packages were installed.
    "systemd-sysusers.service",
    # systemd-nspawn populates /dev.
    "systemd-tmpfiles-setup-dev.service",
    # The journal is volatile: there is nothing to flush to /var.
    "systemd-journal-flush.service",
    # It only removes /run/nologin, which the boot no longer makes (NO_TMPFILES).
    "systemd-user-sessions.service",
    # Nothing asks for passwords at boot; each .path unit holds an inotify instance.
    "systemd-ask-password-console.path",
    "systemd-ask-password-wall.path",
    "systemd-initctl.socket",
    "dev-hugepages.mount",
)
# tmpfiles.d entries masked: /run/nologin ("System is booting up") is only lifted by the masked
# systemd-user-sessions.service.
NO_TMPFILES = ("systemd-nologin.conf",)
# Units kept whose credentials (a tmpfs mounted per unit for provisioning data a sandbox never
# gets) are dropped: an empty LoadCredential= resets the unit's list.
NO_CREDENTIALS = ("systemd-tmpfiles-setup.service", "systemd-sysctl.service")
NO_CREDENTIALS_DROPIN = "[Service]\nLoadCredential=\n"
# Failures still reach the console log (the boot error's tail); the "[  OK  ]" lines do not.
MANAGER_CONF = "[Manager]\nShowStatus=error\n"
VOLATILE_JOURNAL = "[Journal]\nStorage=volatile\nRuntimeMaxUse=8M\n"


def debian_mirror() -> str:
    """The first Debian archive (not the security one) in apt's sources, or $ENVD_IMAGE_MIRROR.

    Raises:
        HostError: apt's sources name no Debian archive and the variable is unset.
    """
    if mirror := os.environ.get("ENVD_IMAGE_MIRROR"):
        return mirror
    sources = sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    lists = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]
    candidates: list[str] = []
    for path in sources:
        for line in path.read_text().splitlines():
            words = line.split()
            if words and words[0] == "URIs:":
                candidates += words[1:]
    for path in lists:
        if path.is_file():
            for line in path.read_text().splitlines():
                words = line.split()
                if words and words[0] == "deb":
                    candidates += [w for w in words[1:] if "://" in w][:1]
    for uri in candidates:
        if uri.rstrip("/").endswith("/debian"):
            return uri
    raise HostError("no Debian mirror in apt's sources; set ENVD_IMAGE_MIRROR")


def _run(argv: list[str], what: str, log_file: Path | None = None) -> None:
    """Run one build step with a clean environment (only the image's own pip configuration
    counts) in a mount namespace of its own: what it mounts into the image (debootstrap's and
    install.sh's /proc, /sys, /dev) disappears with it, even when it is killed."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PIP_CERT": str(HOST_CA_BUNDLE)}
    with open(log_file or os.devnull, "ab") as out:
        done = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            check=False,
        )
    if done.returncode != 0:
        tail = "" if log_file is None else _tail(log_file)
        raise TemplateError(f"{what} failed (exit {done.returncode}){tail}")


def _tail(path: Path, lines: int = 20) -> str:
    text = path.read_text(errors="replace").splitlines()[-lines:]
    return f"; the end of {path}:\n" + "\n".join(text)


def packaging_dir() -> Path:
    """packaging/ of the sandboxd wheel's recipe when installed from one, else of this source tree.

    Raises:
        TemplateError: neither has packaging/install.sh.
    """
    for tree in (PACKAGED_RECIPE, SOURCE_TREE):
        if (tree / "packaging/install.sh").is_file():
            return tree / "packaging"
    raise TemplateError(f"no packaging/install.sh in {PACKAGED_RECIPE} or an envd source tree")


def envd_wheel() -> Path | None:
    """The envd wheel a sandboxd wheel ships; None in a source tree (install.sh builds one)."""
    wheels = sorted(PACKAGED_RECIPE.glob("*.whl"))
    return wheels[-1] if wheels else None


def _recipe(suite: str, packages: tuple[str, ...]) -> str:
    if (suite, packages) == (SUITE, PACKAGES):
        return RECIPE
    return f"{suite} minbase {','.join(packages)} user-sudo host-ca v2"


def _build_stage(stage: Path, log_file: Path, suite: str, packages: tuple[str, ...]) -> None:
    mirror = debian_mirror()
    log.info("debootstrap %s from %s into %s (a few minutes)", suite, mirror, stage)
    remove_tree(stage)
    log_file.write_bytes(b"")
    _run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(packages)}",
            suite,
            str(stage),
            mirror,
        ],
        "debootstrap",
        log_file,
    )
    log.info("adding the user account and the host's CA bundle")
    _run(["sh", str(packaging_dir() / "add-user"), "--root", str(stage), "--sudo"], "add-user")
    # Trust what this host trusts, so pip inside works behind a TLS-inspecting proxy.
    shutil.copyfile(HOST_CA_BUNDLE, stage / "usr/local/share/ca-certificates/build-host.crt")
    _run(["chroot", str(stage), "update-ca-certificates"], "update-ca-certificates", log_file)
    _run(["chroot", str(stage), "apt-get", "clean"], "apt-get clean", log_file)
    (stage / RECIPE_FILE).write_text(_recipe(suite, packages) + "\n")


def ensure_stage(cache: Path, suite: str = SUITE, packages: tuple[str, ...] = PACKAGES) -> Path:
    """The debootstrap stage `cache/SUITE`, built when absent or when its recipe changed.

    Other suites than bookworm (with their own package lists) serve the tests that install
    envd into older distributions (scripts/test-artifact).

    Concurrent callers wait for each other (a lock file in `cache`).

    Raises:
        TemplateError: debootstrap or a later step failed (the message ends with its log).
        HostError: no Debian mirror is known.
    """
    cache.mkdir(parents=True, exist_ok=True)
    stage = cache / suite
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        recipe_file = stage / RECIPE_FILE
        if recipe_file.is_file() and recipe_file.read_text().strip() == _recipe(suite, packages):
            return stage
        new = cache / f"{suite}.new"
        _build_stage(new, cache / "debootstrap.log", suite, packages)
        remove_tree(stage)
        new.rename(stage)
        return stage


def _mask(link: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to("/dev/null")


def slim_boot(root: Path) -> None:
    """Mask the units, generators and tmpfiles entries a sandbox does not need, drop the kept
    units' credentials, show only failures on the console and make the journal volatile.

    Every generator is masked: they read an fstab, kernel command line, GPT partitions, SysV
    init scripts and /etc/rc.local, none of which a sandbox has, and systemd runs all of them
    before it starts any unit.
    """
    units = root / "etc/systemd/system"
    for unit in MASKED_UNITS:
        _mask(units / unit)
    # /lib and /usr/lib are one directory since bookworm, two before (bullseye artifact roots).
    for lib in ("lib", "usr/lib"):
        generators = root / lib / "systemd/system-generators"
        for generator in sorted(generators.iterdir()) if generators.is_dir() else ():
            _mask(root / "etc/systemd/system-generators" / generator.name)
    for entry in NO_TMPFILES:
        _mask(root / "etc/tmpfiles.d" / entry)
    for unit in NO_CREDENTIALS:
        dropin = units / f"{unit}.d"
        dropin.mkdir(parents=True, exist_ok=True)
        (dropin / "sandbox.conf").write_text(NO_CREDENTIALS_DROPIN)
    manager = root / "etc/systemd/system.conf.d"
    manager.mkdir(parents=True, exist_ok=True)
    (manager / "sandbox.conf").write_text(MANAGER_CONF)
    conf = root / "etc/systemd/journald.conf.d"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "volatile.conf").write_text(VOLATILE_JOURNAL)


def install_envd(root: Path, commit: str | None = None, artifact: Path | None = None) -> None:
    """packaging/install.sh --root ROOT --enable, plus the isnotfc drop-in (not a sandbox VM).

    With `artifact`, the self-contained build (install.sh --artifact; its commit is stamped); from
    a sandboxd wheel, the envd wheel it ships (install.sh --wheel; stamped too).
    """
    packaging = packaging_dir()
    argv = ["sh", str(packaging / "install.sh"), "--root", str(root), "--enable"]
    wheel = envd_wheel()
    if artifact is not None:
        argv += ["--artifact", str(artifact)]
    elif wheel is not None:
        argv += ["--wheel", str(wheel)]
    elif commit:
        argv += ["--commit", commit]
    log_file = root.parent / f"{root.name}.install.log"
    log_file.write_bytes(b"")
    try:
        _run(argv, "packaging/install.sh", log_file)
    finally:
        text = log_file.read_text(errors="replace").strip()
        log_file.unlink()
    summary = [line for line in text.splitlines() if line.startswith("install.sh: envd")]
    log.info("%s", summary[-1] if summary else "envd installed")
    dropin = root / "etc/systemd/system/envd.service.d"
    dropin.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(packaging / "isnotfc.conf", dropin / "isnotfc.conf")


def _replace(new: Path, dest: Path) -> None:
    """Rename `new` to `dest`; an old `dest` still under running sandboxes is kept aside."""
    if dest.exists():
        if bound_somewhere(dest):
            aside = dest.with_name(f"{dest.name}.old-{time.time_ns()}")
            log.info("%s is in use by running sandboxes: kept as %s", dest, aside)
            dest.rename(aside)
        else:
            remove_tree(dest)
    new.rename(dest)


def build_base(dest: Path, stage_cache: Path, commit: str | None = None) -> Path:
    """Build the base template's root filesystem at `dest` (atomically, via `dest.new`).

    Args:
        dest: where the root filesystem goes; its parent is created.
        stage_cache: where the debootstrap stage is cached (shared with scripts/test-image).
        commit: the build commit `envd -commit` prints (default: the source tree's git HEAD;
            ignored for the envd wheel a sandboxd wheel ships, stamped when it was built).

    Returns:
        `dest`.

    Raises:
        TemplateError: a build step failed; nothing is left at `dest.new`.
        HostError: debootstrap, chroot or a Debian mirror is missing.
    """
    if os.geteuid() != 0:
        raise HostError("building a template needs root")
    for tool in ("debootstrap", "chroot", "unshare"):
        if shutil.which(tool) is None:
            raise HostError(f"{tool} is missing (scripts/install installs it)")
    packaging_dir()  # before the stage: a missing recipe fails at once
    stage = ensure_stage(stage_cache)
    dest.parent.mkdir(parents=True, exist_ok=True)
    new = dest.with_name(dest.name + ".new")
    remove_tree(new)
    try:
        log.info("copying the stage to %s", new)
        _run(["cp", "-a", "--reflink=auto", str(stage), str(new)], "copying the stage")
        log.info("installing envd (packaging/install.sh --root)")
        install_envd(new, commit)
        slim_boot(new)
        (new / BUILD_FILE).write_text(f"{RECIPE}\nslim-boot v2\n")
        _replace(new, dest)
    except BaseException:
        remove_tree(new)
        raise
    log.info("base template ready at %s", dest)
    return dest
