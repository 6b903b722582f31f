"""End-to-end test in headless Chromium (Selenium) against ``streamlit run app.py``.

Opens the app, picks digits · pixels · AdaMix · ε = 3 on the Train page, launches, waits for
the live charts and the final metrics, then opens Runs and finds the run. Screenshots go to
the test's temporary folder; set ``MIXDP_SCREENSHOTS=<folder>`` to also save them there (this
is how ``docs/screenshots/`` is refreshed; it then also visits Data, Compare and Privacy audit).

Needs the Debian ``chromium`` and ``chromium-driver`` packages (``make browser`` installs them
as root) and the ``selenium`` package; skipped with the reason otherwise.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None)

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (run `make browser` as root: "
                                                 "apt-get install chromium chromium-driver)"),
    pytest.mark.skipif(CHROMEDRIVER is None, reason="chromedriver is not installed (Debian package chromium-driver)"),
    pytest.mark.timeout(240),
]

selenium = pytest.importorskip("selenium", reason="selenium is not installed (pip install selenium)")

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    port = _free_port()
    env = dict(os.environ, MIXDP_APP_POLL_S="0.5", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    log = open(tmp_path / "streamlit.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false",
         "--server.fileWatcherType", "none"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("streamlit did not start:\n" + (tmp_path / "streamlit.log").read_text()[-3000:])
        time.sleep(0.3)
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture
def driver(tmp_path):
    opts = Options()
    opts.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'chrome-profile'}",
                 "--window-size=1440,1700"):
        opts.add_argument(flag)
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    d.set_page_load_timeout(60)
    yield d
    d.quit()


class UI:
    """Small helpers to drive Streamlit widgets by their visible labels."""

    def __init__(self, driver, shots: list[Path], out: Path):
        self.d, self.shots, self.out = driver, shots, out

    def wait(self, cond, timeout: float = 60):
        return WebDriverWait(self.d, timeout, poll_frequency=0.25,
                             ignored_exceptions=(StaleElementReferenceException, NoSuchElementException)).until(cond)

    def text_present(self, text: str, timeout: float = 60):
        return self.wait(lambda d: text in d.find_element(By.TAG_NAME, "body").text, timeout)

    def nav(self, title: str):
        link = self.wait(EC.element_to_be_clickable(
            (By.XPATH, f"//*[@data-testid='stSidebar']//a[@data-testid='stPageLink-NavLink'][.//p[normalize-space()='{title}']]")))
        link.click()
        self.wait(lambda d: any(h.text.strip() == title or title in h.text for h in d.find_elements(By.TAG_NAME, "h1")), 30)

    def select(self, label: str, option: str):
        """Pick ``option`` (the start of its text) in the select box labelled ``label``."""
        inp = self.wait(EC.element_to_be_clickable((By.XPATH, f"//input[@role='combobox' and @aria-label='{label}']")))
        if (inp.get_attribute("value") or "").startswith(option):
            return
        inp.click()
        opt = self.wait(EC.element_to_be_clickable(
            (By.XPATH, f"//*[@role='option'][starts-with(normalize-space(), '{option}')]")))
        opt.click()
        self.wait(lambda d: (d.find_element(By.XPATH, f"//input[@role='combobox' and @aria-label='{label}']")
                             .get_attribute("value") or "").startswith(option), 20)

    def click_button(self, text: str):
        btn = self.wait(EC.element_to_be_clickable((By.XPATH, f"//button[contains(normalize-space(), '{text}')]")))
        btn.click()

    def shot(self, name: str):
        time.sleep(0.6)  # let plotly finish its transition before capturing (pixels only)
        p = self.out / f"{name}.png"
        self.d.save_screenshot(str(p))
        self.shots.append(p)
        extra = os.environ.get("MIXDP_SCREENSHOTS")
        if extra:
            Path(extra).mkdir(parents=True, exist_ok=True)
            shutil.copy(p, Path(extra) / p.name)


def test_train_adamix_and_see_run(server, driver, tmp_path):
    shots: list[Path] = []
    ui = UI(driver, shots, tmp_path)
    driver.get(server)
    ui.text_present("Mixed DP")
    ui.text_present("Run the demo")
    ui.shot("01_home")

    ui.nav("Train")
    ui.text_present("ε — privacy budget")
    ui.select("Dataset", "digits")
    ui.select("Encoder", "pixels")
    ui.select("Method", "adamix")
    # ε slider defaults to 3 (the offline default); check the value shown by the slider
    slider = driver.find_element(By.XPATH, "//div[@data-testid='stSlider'][.//label[contains(., 'privacy budget')]]")
    assert "3" in slider.text
    ui.click_button("Launch")
    # live charts appear while / after it runs, then the final metrics
    ui.text_present("ε spent vs step", timeout=90)
    ui.text_present("Final metrics", timeout=120)
    ui.text_present("minority-class accuracy")
    ui.text_present("attack AUC")
    body = driver.find_element(By.TAG_NAME, "body").text
    assert "completed" in body
    run_id = driver.current_url.split("run=")[-1] if "run=" in driver.current_url else None
    assert driver.find_elements(By.CSS_SELECTOR, "div.js-plotly-plot"), "no plotly chart drawn"
    ui.shot("02_train")

    ui.nav("Runs")
    ui.text_present("stored runs")
    ui.text_present("adamix")
    if run_id:
        ui.text_present(run_id)
    ui.shot("05_runs")

    extra = os.environ.get("MIXDP_SCREENSHOTS")
    if extra:  # refresh docs/screenshots: also visit the other pages
        ui.nav("Privacy audit")
        ui.text_present("Per-instance privacy")
        ui.text_present("Membership-inference attack")
        ui.shot("04_privacy_audit")
        ui.nav("Data & encoder")
        ui.select("Encoder", "pixels")
        ui.click_button("Features ready" if "Features ready" in driver.find_element(By.TAG_NAME, "body").text
                        else "Extract features")
        ui.text_present("Samples per class", timeout=60)
        ui.shot("03_data")
        ui.nav("Compare")
        ui.text_present("runs in this comparison")
        ui.click_button("Run comparison")
        ui.text_present("the best method is", timeout=180)
        ui.wait(lambda d: "running" not in d.find_element(By.TAG_NAME, "body").text.split("Run comparison")[-1][:400],
                timeout=180)
        ui.text_present("At ε = 8", timeout=180)
        ui.shot("06_compare")
    assert all(p.stat().st_size > 10_000 for p in shots)
