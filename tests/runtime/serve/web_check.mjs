// Drives the daemon's web page in headless Chromium (playwright-core, the
// OS's /usr/bin/chromium) for tests/runtime/serve/test_web_browser.py.
//
// Usage: node web_check.mjs '<json plan>'
// plan: {url, listedRunId, form: {task, rollouts, aggregate}, pollRun: <RunRequest>,
//        timeoutMs, chromium, screenshot}
//
// It does not judge: it records what the page showed and prints one JSON
// report on stdout (the Python test asserts on it).  It exits non-zero only
// when it cannot drive the page at all (a selector never appeared in time),
// with the reason and the page's errors on stderr.  playwright-core is found
// through NODE_PATH (see .ci/browser-setup.sh).

import { TERMINAL, finish, postRun, sleep, withPage } from './web_page.mjs';

const plan = JSON.parse(process.argv[2]);
const TIMEOUT = plan.timeoutMs || 20000;
const report = { pageErrors: [], consoleErrors: [], failedRequests: [], badResponses: [] };

// What the run view shows right now (evaluated in the page).
function runSnapshot() {
  const text = (sel, root = document) => {
    const el = root.querySelector(sel);
    return el ? el.textContent.trim() : null;
  };
  const chart = document.querySelector('[data-testid=budget-chart]');
  return {
    hash: location.hash,
    status: text('[data-testid=run-status]'),
    live: text('[data-testid=run-live]'),
    answer: text('[data-testid=run-answer]'),
    rollouts: [...document.querySelectorAll('[data-testid=rollout-row]')].map((row) => ({
      id: row.dataset.rolloutId,
      status: row.dataset.status,
      steps: Number(text('[data-testid=rollout-steps]', row)),
      answer: text('[data-testid=rollout-answer]', row),
    })),
    matches: document.querySelectorAll('[data-testid=vote-match]').length,
    budgetPoints: chart ? Number(chart.dataset.points) : 0,
    stepPoints: chart ? Number(chart.dataset.stepPoints) : 0,
  };
}

async function drive(page) {
  let loads = 0;
  page.on('load', () => {
    loads += 1;
  });

  // 1. The runs list shows the run started through the API (by the test).
  report.phase = 'list';
  await page.goto(`${plan.url}/`);
  const row = page.locator(`[data-testid=run-row][data-run-id="${plan.listedRunId}"]`);
  await row.waitFor();
  report.listRow = {
    status: await row.getAttribute('data-status'),
    agent: (await row.locator('[data-testid=run-row-agent]').textContent()).trim(),
    task: await row.locator('[data-testid=run-row-task]').getAttribute('title'),
    answer: (await row.locator('[data-testid=run-row-answer]').textContent()).trim(),
  };
  report.agentOptions = await page.locator('[data-testid=start-agent] option').allTextContents();

  report.phase = 'form';
  // 2. The form starts a run and opens its view, which updates while the
  //    run progresses: record every distinct state until the run is over.
  await page.locator('[data-testid=start-task]').fill(plan.form.task);
  await page.locator('[data-testid=start-rollouts]').fill(String(plan.form.rollouts));
  await page.locator('[data-testid=start-aggregate]').selectOption(plan.form.aggregate);
  await page.locator('[data-testid=start-submit]').click();
  await page.waitForFunction(() => /^#\/runs\/[^/]+$/.test(location.hash));
  await page.locator('[data-testid=run-view]').waitFor();
  report.form = {
    runId: decodeURIComponent((await page.evaluate(() => location.hash)).replace('#/runs/', '')),
  };
  const snapshots = [];
  const deadline = Date.now() + TIMEOUT;
  for (;;) {
    const snap = await page.evaluate(runSnapshot);
    const key = JSON.stringify(snap);
    if (!snapshots.length || JSON.stringify(snapshots[snapshots.length - 1]) !== key) {
      snapshots.push(snap);
    }
    if (TERMINAL.includes(snap.status) && snap.answer && snap.live === 'ended') break;
    if (Date.now() > deadline) throw new Error(`run view never finished: ${key}`);
    await sleep(40);
  }
  report.snapshots = snapshots;
  report.form.task = (await page.locator('[data-testid=run-task]').textContent()).trim();

  // 3. A rollout's trajectory: its steps and its summary.
  report.phase = 'trajectory';
  const first = snapshots[snapshots.length - 1].rollouts[0];
  await page.locator(`[data-testid=rollout-row][data-rollout-id="${first.id}"]`).click();
  const traj = page.locator(`[data-testid=trajectory][data-rollout-id="${first.id}"]`);
  await page.waitForFunction((rid) => {
    const el = document.querySelector(`[data-testid=trajectory][data-rollout-id="${rid}"]`);
    return el && el.dataset.status !== 'loading' && Number(el.dataset.steps) > 0;
  }, first.id);
  await page.locator('[data-testid=summary]').waitFor();
  report.trajectory = {
    rolloutId: first.id,
    hash: await page.evaluate(() => location.hash),
    status: await traj.getAttribute('data-status'),
    steps: await traj.locator('[data-testid=step]').count(),
    toolCalls: await traj.locator('[data-testid=step-tool-call]').count(),
    toolResults: await traj.locator('[data-testid=step-tool-result]').count(),
    summaryAnswer: (await page.locator('[data-testid=summary-answer]').textContent()).trim(),
  };
  if (plan.screenshot) await page.screenshot({ path: plan.screenshot, fullPage: true });

  report.phase = 'polling';
  // 4. The list refreshes by itself: a run posted while it is open appears
  //    and reaches its end without any navigation.
  await page.locator('[data-testid=back]').click();
  await page.locator('[data-testid=runs-table]').waitFor();
  const posted = await postRun(page, plan.pollRun);
  report.polled = { postStatus: posted.status, runId: posted.info.run_id, statuses: [] };
  const polledRow = page.locator(`[data-testid=run-row][data-run-id="${posted.info.run_id}"]`);
  const pollDeadline = Date.now() + TIMEOUT;
  for (;;) {
    const status = (await polledRow.count()) ? await polledRow.getAttribute('data-status') : null;
    const seen = report.polled.statuses;
    if (seen[seen.length - 1] !== status) seen.push(status);
    if (TERMINAL.includes(status)) break;
    if (Date.now() > pollDeadline) throw new Error(`polled run never finished: ${seen}`);
    await sleep(100);
  }
  report.loads = loads;
  report.phase = 'done';
}

await finish('web_check', report, () => withPage(plan, report, drive));
