// Opens an API reference page (`GET /docs`) in headless Chromium, waits for Redoc to render it and
// prints what it shows as JSON: the operation ids of its sections, the console's errors and the
// page's own exceptions. Saves a screenshot of its first screen to the second argument.
// Usage: node reference_page.mjs URL SCREENSHOT.png. CHROMIUM names the browser.
import { launchChromium } from "./chromium.mjs";

const [url, screenshot] = process.argv.slice(2);
const browser = await launchChromium();
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const errors = [];
  const requests = [];
  page.on("console", (message) => {
    if (message.type() === "error") errors.push(message.text());
  });
  page.on("pageerror", (error) => errors.push(String(error)));
  page.on("request", (request) => requests.push(request.url()));
  // Which address a failed load was for (the console names only the failure).
  page.on("requestfailed", (request) => errors.push(`${request.url()}: ${request.failure()?.errorText}`));
  page.on("response", (response) => {
    if (response.status() >= 400) errors.push(`${response.url()}: ${response.status()}`);
  });
  await page.goto(url);
  // Redoc names each operation's section `operation/{operationId}` (under its tag's, if any).
  await page.waitForSelector("[data-section-id*='operation/']", { timeout: 60_000 });
  const operations = await page.$$eval("[data-section-id*='operation/']", (sections) => [
    ...new Set(sections.map((section) => section.getAttribute("data-section-id").split("operation/").pop())),
  ]);
  await page.screenshot({ path: screenshot, fullPage: false });
  // Requests other than the page itself and what its script makes in memory (blob:, data:).
  const elsewhere = requests.filter((request) => request !== url && !/^(blob|data):/.test(request));
  console.log(JSON.stringify({ title: await page.title(), operations, console_errors: errors, requests: elsewhere }));
} finally {
  await browser.close();
}
