// Debian's Chromium, headless, as every browser test launches it. CHROMIUM names the browser
// (make test-browser: /usr/bin/chromium).
import { chromium } from "playwright-core";

export function launchChromium() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    // Without the background-networking flags Chromium keeps trying hosts this machine cannot reach.
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
}
