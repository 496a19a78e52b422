// What the web_*.mjs page drivers share: headless Chromium (the OS's, driven
// through playwright-core found through NODE_PATH; see .ci/browser-setup.sh),
// a page whose errors land in the report, and one way to end: the report as
// one JSON line on stdout, or why the page could not be driven on stderr and
// exit status 1.  The drivers record; the Python tests judge.

import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { chromium } = require('playwright-core');

export const TERMINAL = ['succeeded', 'failed', 'cancelled'];

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// POST /v1/runs from the page (with its session): the status and the body.
export async function postRun(page, body) {
  return page.evaluate(async (run) => {
    const resp = await fetch('/v1/runs', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(run),
    });
    return { status: resp.status, info: await resp.json() };
  }, body);
}

// Opens a page and runs `drive(page)` on it.  The page's script errors and
// console errors go to report.pageErrors and report.consoleErrors; failed
// requests (other than the event streams a view aborts on leaving it) and
// answers of 400 or more to report.failedRequests and report.badResponses,
// when the report has them.  `counts()` says whether an error seen now
// counts.  When `drive` fails, report.view holds what the page showed.
export async function withPage(plan, report, drive, { counts = () => true } = {}) {
  const timeout = plan.timeoutMs || 20000;
  const browser = await chromium.launch({
    executablePath: plan.chromium || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
    timeout,
  });
  let page = null;
  try {
    page = await (await browser.newContext()).newPage();
    page.setDefaultTimeout(timeout);
    page.on('pageerror', (err) => report.pageErrors.push(String(err)));
    page.on('console', (msg) => {
      if (msg.type() === 'error' && counts()) report.consoleErrors.push(msg.text());
    });
    if (report.failedRequests) {
      page.on('requestfailed', (req) => {
        const reason = req.failure() ? req.failure().errorText : '';
        if (!reason.includes('ERR_ABORTED')) report.failedRequests.push(`${req.url()} ${reason}`);
      });
    }
    if (report.badResponses) {
      page.on('response', (resp) => {
        if (resp.status() >= 400 && counts()) report.badResponses.push(`${resp.status()} ${resp.url()}`);
      });
    }
    await drive(page);
  } catch (err) {
    if (page) {
      report.view = await page
        .evaluate(() => ({ hash: location.hash, text: document.body.innerText.slice(0, 2000) }))
        .catch((e) => String(e));
    }
    throw err;
  } finally {
    await browser.close();
  }
}

// Runs `main()`, then prints the report; when it fails, prints why (with
// report.phase, when set) and the report so far on stderr and exits 1.
export async function finish(name, report, main) {
  try {
    await main();
    process.stdout.write(`${JSON.stringify(report)}\n`);
  } catch (err) {
    const phase = report.phase ? ` in phase ${report.phase}` : '';
    process.stderr.write(`${name} failed${phase}: ${err && err.stack ? err.stack : err}\n`);
    process.stderr.write(`page report so far: ${JSON.stringify(report)}\n`);
    process.exit(1);
  }
}
