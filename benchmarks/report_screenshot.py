"""Screenshot the reproduction report (``schedlab reproduce --report DIR``) in headless Chromium, as a
reader opens it from disk (not in CI).

    /tmp/pw/bin/python benchmarks/report_screenshot.py DIR OUT.png [--chromium /usr/bin/chromium]

Writes ``OUT.png`` (the index, full page) and ``OUT-<page>.png`` for every other page of ``DIR``
(full page, 1680 px wide). Uses :class:`ui_screenshots.Browser`: playwright driving the Chromium
executable given (an empty profile; no sandbox, GPU, network chatter or first-run UI), so it needs
playwright in the interpreter that runs it (``pip install playwright`` in any venv; ``playwright
install`` is not needed) and no schedlab.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ui_screenshots import Browser  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="the report folder (holds index.html)")
    parser.add_argument("out", type=Path, help="PNG for the index; the other pages go beside it as OUT-<page>.png")
    parser.add_argument("--chromium", default="/usr/bin/chromium", help="Chromium executable")
    args = parser.parse_args()
    index = args.report / "index.html"
    if not index.is_file():
        parser.error(f"{index}: no such file (run `schedlab reproduce ... --report {args.report}` first)")
    if args.out.suffix != ".png":
        parser.error(f"{args.out}: expected a .png path")
    if not Path(args.chromium).is_file():
        parser.error(f"--chromium {args.chromium}: no such file")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    pages = [index, *sorted(p for p in args.report.glob("*.html") if p != index)]
    browser = Browser(args.chromium)
    try:
        for page in pages:
            out = args.out if page == index else args.out.with_name(f"{args.out.stem}-{page.stem}.png")
            browser.shot(page.resolve().as_uri(), out, settle=0.5, full_page=True, height=1000)
    finally:
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
