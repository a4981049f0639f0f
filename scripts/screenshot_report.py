"""Screenshot a report page in headless Chromium (Debian's ``chromium``, driven by playwright).

python scripts/screenshot_report.py out/demo/report/report.html top.png            # the first screen
python scripts/screenshot_report.py out/demo/report/report.html page.png --full     # the whole page
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from playwright.sync_api import sync_playwright


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("page", type=Path)
    ap.add_argument("png", type=Path)
    ap.add_argument("--full", action="store_true", help="the whole page, not the first screen")
    ap.add_argument("--width", type=int, default=1200)
    ap.add_argument("--height", type=int, default=1400)
    args = ap.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("no chromium on PATH (bash scripts/install_browser.sh installs Debian's)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": args.width, "height": args.height})
        page.goto(args.page.resolve().as_uri(), wait_until="load")
        page.screenshot(path=str(args.png), full_page=args.full)
        browser.close()
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
