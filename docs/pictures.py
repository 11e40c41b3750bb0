"""Regenerate README's pictures from the demo: `make pictures` (or `python docs/pictures.py`).

Runs `propme demo` (reusing the stages a previous run built), copies the report's
capability-against-propensity plot and takes screenshots of its report.html and leaderboard.html in
headless Chromium (Debian's `chromium` package), all into docs/images/.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

IMAGES = Path(__file__).resolve().parent / "images"
PLOT, SCREENSHOT, BOARD = IMAGES / "capability.png", IMAGES / "report.png", IMAGES / "leaderboard.png"
WINDOW, BOARD_WINDOW = (1200, 900), (1200, 760)


def chromium() -> str:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        sys.exit("no Chromium: install it (Debian: apt-get install chromium) and run this again")
    return browser


def screenshot(html: Path, png: Path, browser: str, window: tuple[int, int] = WINDOW) -> None:
    """A page as a headless Chromium shows it, `window` pixels from the top."""
    with tempfile.TemporaryDirectory() as profile:
        cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={profile}", f"--screenshot={png}", f"--window-size={window[0]},{window[1]}",
               html.resolve().as_uri()]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode or not png.exists():
        sys.exit(f"Chromium did not write {png}:\n{proc.stderr[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo", default="propme-demo", help="the demo's folder (reused when already built)")
    args = parser.parse_args()
    browser = chromium()
    demo = subprocess.run([sys.executable, "-m", "propme.cli.app", "demo", "--out", args.demo, "--quiet"])
    if demo.returncode:
        sys.exit(demo.returncode)  # the demo printed why
    report = Path(args.demo) / "report"
    plots = sorted(report.glob("capability_*.png"))
    if len(plots) != 1:
        sys.exit(f"expected one capability plot in {report}, found {[p.name for p in plots]}")
    IMAGES.mkdir(exist_ok=True)
    shutil.copyfile(plots[0], PLOT)
    screenshot(report / "report.html", SCREENSHOT, browser)
    screenshot(report / "leaderboard.html", BOARD, browser, BOARD_WINDOW)
    print(f"wrote {PLOT}, {SCREENSHOT} and {BOARD}")


if __name__ == "__main__":
    main()
