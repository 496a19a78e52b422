// Reads what the daemon's web page shows of tool output meant for the person
// (`for_user`), for tests/runtime/serve/test_web_for_user_browser.py
// (headless Chromium through playwright-core, found through NODE_PATH; see
// .ci/browser-setup.sh).
//
// Usage: node web_for_user.mjs '<json plan>'
// plan: {url, runId, plainRunId, timeoutMs, chromium}
//
// It records, without judging: the run view's "For you" notes, the selected
// rollout's tool results (what the model got and what was for the person),
// and whether the "For you" panel of a run whose tools meant nothing for the
// person is hidden.  One JSON report on stdout; non-zero exit only when it
// cannot drive the page.

import { finish, withPage } from './web_page.mjs';

const plan = JSON.parse(process.argv[2]);
const report = { pageErrors: [], consoleErrors: [] };

async function drive(page) {

  // 1. The run's view: its "For you" panel, once the run has finished.
  await page.goto(`${plan.url}/#/runs/${encodeURIComponent(plan.runId)}`);
  await page.locator('[data-testid=run-answer]').waitFor();
  await page.locator('[data-testid=for-user-note]').first().waitFor();
  report.panelHidden = await page.locator('[data-testid=for-user]').evaluate((el) => el.hidden);
  report.notes = await page.locator('[data-testid=for-user-note]').evaluateAll((els) =>
    els.map((el) => ({
      head: el.querySelector('.muted').textContent,
      text: el.querySelector('[data-testid=for-user-text]').textContent,
    })),
  );

  // 2. Its rollout: each tool result, what the model got and what was for the person.
  await page.locator('[data-testid=rollout-row]').first().click();
  await page.locator('[data-testid=step-for-user]').first().waitFor();
  report.results = await page.locator('[data-testid=step-tool-result]').evaluateAll((els) =>
    els.map((el) => {
      const extra = el.querySelector('[data-testid=step-for-user]');
      return {
        model: el.querySelector(':scope > pre').textContent,
        forUser: extra ? extra.querySelector('pre').textContent : null,
      };
    }),
  );

  // 3. A run whose tools meant nothing for the person: no panel.
  await page.goto(`${plan.url}/#/runs/${encodeURIComponent(plan.plainRunId)}`);
  await page.locator(`[data-testid=run-view][data-run-id="${plan.plainRunId}"] [data-testid=run-answer]`).waitFor();
  await page.locator('[data-testid=rollout-row]').first().waitFor();
  report.plainPanelHidden = await page.locator('[data-testid=for-user]').evaluate((el) => el.hidden);
  report.plainNotes = await page.locator('[data-testid=for-user-note]').count();
}

await finish('web_for_user', report, () => withPage(plan, report, drive));
