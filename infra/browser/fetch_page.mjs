// Opens a page in headless Chromium and prints what its script left in `window.result` (JSON).
// Usage: node fetch_page.mjs URL. CHROMIUM names the browser (make test-browser: Debian's).
import { launchChromium } from "./chromium.mjs";

const url = process.argv[2];
const browser = await launchChromium();
try {
  const page = await browser.newPage();
  const errors = [];
  page.on("console", (message) => {
    if (message.type() === "error") errors.push(message.text());
  });
  await page.goto(url);
  await page.waitForFunction(() => window.result !== undefined, null, { timeout: 60_000 });
  const result = await page.evaluate(() => window.result);
  console.log(JSON.stringify({ ...result, console_errors: errors }));
} finally {
  await browser.close();
}
