"""Whether an optional Python module the tests use is there, and if not, why.

Some checks need a module that not every supported Debian release packages (anndata:
python3-anndata is in Debian 12, not in Debian 13).  Such a check is skipped, with the
reason, only where the release has no package for it; where the package exists but is
not installed, the check fails instead, so that a machine set up without it
(scripts/install-deps installs every package its release has) cannot pass silently.

    from optional_modules import missing
    status = missing("anndata", "python3-anndata")
    # None: importable; ("skip", reason) or ("fail", reason) otherwise.
"""
import importlib
import shutil
import subprocess


def release_name():
    """'Debian 13 (trixie)' or the like, from /etc/os-release."""
    fields = {}
    try:
        with open("/etc/os-release", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.strip().partition("=")
                fields[key] = value.strip('"')
    except OSError:
        return "this system"
    return fields.get("PRETTY_NAME", "this system").replace("GNU/Linux ", "")


def candidate(package):
    """The version apt would install, None if the release has no such package, or
    False if apt cannot say (no apt-cache)."""
    if shutil.which("apt-cache") is None:
        return False
    try:
        out = subprocess.run(["apt-cache", "policy", package], capture_output=True, text=True,
                             check=False).stdout
    except OSError:
        return False
    for line in out.splitlines():
        key, _, value = line.strip().partition(":")
        if key == "Candidate":
            value = value.strip()
            return None if value in ("", "(none)") else value
    return None


def missing(module, package):
    """None if `module` imports; else ("skip", reason) where `package` is not packaged
    in this release, or ("fail", reason) where it is but is not installed."""
    try:
        importlib.import_module(module)
        return None
    except ImportError as exc:
        error = f"{type(exc).__name__}: {exc}"
    version = candidate(package)
    if version is None:
        return ("skip", f"{module} is not packaged in this release "
                        f"({release_name()} has no {package}): {error}")
    if version is False:
        return ("skip", f"{module} is not installed and apt-cache is not here to say "
                        f"whether {package} is packaged: {error}")
    return ("fail", f"{module} is not installed, but {release_name()} packages {package} "
                    f"{version}: run scripts/install-deps ({error})")
