"""scripts/install_browser.sh (run by `make test`): installs Debian's chromium when it can, and otherwise says
why it skipped, exiting 0 so the suite still runs (the browser test then skips with its own reason)."""

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install_browser.sh"
BASH = "/bin/bash"


def _run(bin_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [BASH, str(SCRIPT)],
        env={"PATH": str(bin_dir), "HOME": os.environ.get("HOME", "/tmp")},
        capture_output=True,
        text=True,
        timeout=30,
    )


def _tool(bin_dir: Path, name: str, body: str) -> None:
    f = bin_dir / name
    f.write_text(f"#!{BASH}\n{body}\n")
    f.chmod(0o755)


def test_without_apt_it_skips_with_a_reason(tmp_path):
    _tool(tmp_path, "id", "echo 0")
    p = _run(tmp_path)
    assert p.returncode == 0 and "skipped: no apt-get" in p.stderr


def test_without_root_it_skips_with_a_reason(tmp_path):
    _tool(tmp_path, "id", "echo 1000")
    _tool(tmp_path, "apt-get", "echo should not run >&2; exit 1")
    p = _run(tmp_path)
    assert p.returncode == 0 and "needs root" in p.stderr and "should not run" not in p.stderr


def test_with_chromium_on_path_it_does_nothing(tmp_path):
    _tool(tmp_path, "chromium", "echo Chromium 1")
    _tool(tmp_path, "apt-get", "echo should not run >&2; exit 1")
    p = _run(tmp_path)
    assert p.returncode == 0 and "already installed" in p.stderr


def test_as_root_with_apt_it_installs_chromium(tmp_path):
    _tool(tmp_path, "id", "echo 0")
    _tool(
        tmp_path,
        "apt-get",
        f'echo "apt-get $*" >> {tmp_path}/calls; '
        f'if [[ "$1" == install ]]; then printf "#!{BASH}\\necho Chromium 9\\n" > {tmp_path}/chromium; '
        f"/bin/chmod +x {tmp_path}/chromium; fi",
    )
    _tool(tmp_path, "head", 'read -r line; echo "$line"')
    p = _run(tmp_path)
    assert p.returncode == 0, p.stderr
    assert "apt-get install -y -q --no-install-recommends chromium" in (tmp_path / "calls").read_text()
    assert "installed" in p.stderr
