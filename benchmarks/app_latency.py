"""What a user of the Train page sees: Launch click -> first live chart point, and the time
between changes of the newest point while the run trains, in the browser's own clock.

Starts ``streamlit run app.py`` on a fresh run store, opens the Train page in headless
Chromium (the end-to-end test's driver and its in-page timeline, ``TIMELINE_JS``), launches
``--launches`` AdaMix runs on digits · pixels at ε = 20, 19, ... (thousands of steps, several
seconds each) and prints, per launch and over all of them, the first-point latency and the
median / largest gap between redraws in the first ``--window`` seconds.

    python benchmarks/app_latency.py --sessions 2 --launches 3

Needs the Debian ``chromium`` / ``chromium-driver`` packages and ``selenium`` (``make
browser``). Run it on a quiet machine: absolute times move with the machine's load. To compare
two versions, check each out in its own ``git worktree`` and run them alternately, each from
its own tree (``cd <tree> && PYTHONPATH=<tree> python benchmarks/app_latency.py``), so that
both see the same machine.

The last line of stdout is one JSON object with the per-launch figures and their summary. With
``--tiny`` (the test suite's smoke run), or where chromium, chromedriver or selenium is missing,
no browser is started: the last line is ``{"benchmark": "app_latency", "skipped": "<reason>"}``
and the exit status is 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))



def _missing() -> str | None:
    """Why the browser benchmark cannot run here (None when it can)."""
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        return "chromium is not installed (make browser)"
    if not (shutil.which("chromedriver") or Path("/usr/bin/chromedriver").exists()):
        return "chromedriver is not installed (Debian package chromium-driver)"
    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed (pip install selenium)"
    return None


def session(launches: int, window: float) -> list[dict[str, float]]:
    """One server and one browser session; returns, per launch, the walk's cadence figures
    (``_cadence``: first point, median and largest redraw gap, largest share of the run's
    steps between two redraws) over the first ``window`` s after the first point."""
    from mixdp_core.runs import RunStore
    from tests.app.test_e2e_browser import (
        TIMELINE_JS, UI, _cadence, _chrome, _run_id, _wait_run_end, start_server, stop_server)

    tmp = Path(tempfile.mkdtemp(prefix="mixdp-latency-"))
    proc, url, log = start_server(tmp, keep_poll_env=True)
    out = []
    driver = None
    try:
        time.sleep(7)  # the pre-warmed run workers
        driver = _chrome(tmp / "profile")
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": TIMELINE_JS})
        ui = UI(driver, [], tmp)
        driver.get(f"{url}/train")
        ui.text_present("Launch")
        time.sleep(4)
        store = RunStore(tmp / "home", recover=False)
        for i in range(launches):
            ui.type_into("…or type an exact ε (optional)", str(20 - i))
            time.sleep(0.5)
            ui.click_button("Launch")
            time.sleep(1.0)
            rid = _run_id(driver.current_url)
            _wait_run_end(store, rid, time.monotonic() + 120)
            time.sleep(1.5)
            out.append(_cadence(driver, store, rid, window_s=window))
    finally:
        if driver is not None:
            driver.quit()
        stop_server(proc, log)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=2, help="fresh server + browser sessions")
    ap.add_argument("--launches", type=int, default=3, help="launches per session")
    ap.add_argument("--window", type=float, default=5.0, help="seconds of redraws measured per launch")
    ap.add_argument("--tiny", action="store_true",
                    help="smoke test: start no browser, print the skip line (the suite cannot drive a browser)")
    args = ap.parse_args()
    reason = "--tiny: no browser or Streamlit server is started in the smoke run" if args.tiny else _missing()
    if reason:
        print(f"SKIP: {reason}")
        print(json.dumps({"benchmark": "app_latency", "skipped": reason}))
        return
    rows = []
    for s in range(args.sessions):
        for k, c in enumerate(session(args.launches, args.window)):
            if "launch_first_chart_point_s" not in c:
                print(f"session {s} launch {k}: no live point seen", flush=True)
                continue
            line = f"session {s} launch {k}: first point {c['launch_first_chart_point_s']:.2f} s"
            if "live_update_max_gap_s" in c:
                line += (f", redraw gaps median {c['live_update_median_gap_s']:.2f} s, "
                         f"max {c['live_update_max_gap_s']:.2f} s")
            if "live_update_max_step_share" in c:
                line += f", largest share of the steps between redraws {100 * c['live_update_max_step_share']:.1f} %"
            print(line, flush=True)
            rows.append(c)
    if rows:
        firsts = [c["launch_first_chart_point_s"] for c in rows]
        med = [c["live_update_median_gap_s"] for c in rows if "live_update_median_gap_s" in c]
        mx = [c["live_update_max_gap_s"] for c in rows if "live_update_max_gap_s" in c]
        sh = [c["live_update_max_step_share"] for c in rows if "live_update_max_step_share" in c]
        print(f"first point: median {statistics.median(firsts):.2f} s, range {min(firsts):.2f}-{max(firsts):.2f} s "
              f"({len(firsts)} launches); redraw gap: median of medians {statistics.median(med or [0]):.2f} s, "
              f"largest {max(mx or [0]):.2f} s; largest step share {100 * max(sh or [0]):.1f} %; "
              f"load average {os.getloadavg()[0]:.1f}")
    res = {"benchmark": "app_latency", "sessions": args.sessions, "launches": args.launches, "window_s": args.window,
           "launches_with_point": len(rows), "load_average": os.getloadavg()[0], "per_launch": rows}
    if rows:
        res.update(first_point_median_s=statistics.median(firsts), first_point_min_s=min(firsts),
                   first_point_max_s=max(firsts), redraw_gap_median_of_medians_s=statistics.median(med or [0]),
                   redraw_gap_max_s=max(mx or [0]), max_step_share=max(sh or [0]))
    print(json.dumps(res, allow_nan=False, default=float))


if __name__ == "__main__":
    main()
