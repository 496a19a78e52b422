// Watches the daemon's web page show a run's text as it is generated, for
// tests/runtime/serve/test_web_tokens_browser.py (headless Chromium through
// playwright-core, found through NODE_PATH; see .ci/browser-setup.sh).
//
// Usage: node web_tokens.mjs '<json plan>'
// plan: {url, run: <RunRequest>, failedRunId, rtvRunId, timeoutMs, chromium}
//
// It records, without judging: every distinct live text the run view showed
// with the run's status then, the final answer, and what the view of a
// failed run says about why.  One JSON report on stdout; non-zero exit only
// when it cannot drive the page.

import { TERMINAL, finish, postRun, sleep, withPage } from './web_page.mjs';

const plan = JSON.parse(process.argv[2]);
const TIMEOUT = plan.timeoutMs || 20000;
const report = { pageErrors: [], consoleErrors: [], texts: [] };

function view() {
  const text = (sel) => {
    const el = document.querySelector(sel);
    return el ? el.textContent.trim() : null;
  };
  const live = document.querySelector('[data-testid=live-text] pre');
  return {
    status: text('[data-testid=run-status]'),
    answer: text('[data-testid=run-answer]'),
    cost: text('[data-testid=run-cost]'),
    live: live ? live.textContent : '',
  };
}

async function drive(page) {

  // 1. A run posted from the page (the browser is up: the run's time is
  //    all spent in view), then its view while its model generates.
  await page.goto(`${plan.url}/`);
  await page.locator('[data-testid=runs-table]').waitFor();
  const posted = (await postRun(page, plan.run)).info.run_id;
  report.runId = posted;
  await page.goto(`${plan.url}/#/runs/${encodeURIComponent(posted)}`);
  await page.locator('[data-testid=run-view]').waitFor();
  const deadline = Date.now() + TIMEOUT;
  for (;;) {
    const now = await page.evaluate(view);
    const last = report.texts[report.texts.length - 1];
    if (!last || last.live !== now.live || last.status !== now.status) report.texts.push(now);
    if (TERMINAL.includes(now.status) && now.answer) {
      report.final = now;
      break;
    }
    if (Date.now() > deadline) throw new Error(`the run never finished: ${JSON.stringify(now)}`);
    await sleep(20);
  }

  // 2. A failed run says why: its error, and each failed rollout's.
  await page.goto(`${plan.url}/#/runs/${encodeURIComponent(plan.failedRunId)}`);
  await page.locator('[data-testid=rollout-error]').first().waitFor();
  await page.locator('[data-testid=run-error]').waitFor();
  report.failed = {
    rolloutErrors: await page.locator('[data-testid=rollout-error]').allTextContents(),
    runError: (await page.locator('[data-testid=run-error]').textContent()).trim(),
  };
  await page.goto(`${plan.url}/#/`);
  const row = page.locator(`[data-testid=run-row][data-run-id="${plan.failedRunId}"] [data-testid=run-row-error]`);
  await row.waitFor();
  report.failed.listError = (await row.textContent()).trim();

  // 3. A tournament's matches say why a candidate went through unjudged.
  await page.goto(`${plan.url}/#/runs/${encodeURIComponent(plan.rtvRunId)}`);
  await page.locator('[data-testid=vote-note]').first().waitFor();
  report.voteNotes = await page.locator('[data-testid=vote-note]').allTextContents();
}

await finish('web_tokens', report, () => withPage(plan, report, drive));
