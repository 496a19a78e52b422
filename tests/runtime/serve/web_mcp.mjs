// Drives the daemon's web page in headless Chromium for
// tests/runtime/serve/test_web_mcp_browser.py: MCP questions in a run's view
// and the MCP authorizations panel, as a person would use them.
//
// Usage: node web_mcp.mjs '<json plan>'
// plan: {url, token, chromium, timeoutMs, screenshot (a path prefix: -form.png, -url.png, -end.png),
//        asker: {agent, task}, urler: {agent, link, refused},
//        answer: {name, integer, enum, toggle: [[field, value]...]}, guarded: {agent, task},
//        gated: {agent, task}}
//
// Like web_check.mjs it does not judge: it records what the page showed and
// what it sent, and prints one JSON report on stdout.  It exits non-zero
// only when it cannot drive the page (a state never came), with the reason
// and the report so far on stderr.

import { finish, withPage } from './web_page.mjs';

const plan = JSON.parse(process.argv[2]);
const report = { pageErrors: [], consoleErrors: [], failedRequests: [], badResponses: [], answers: [] };


// What one question of the run view shows (evaluated in the page).
function questionSnapshot(el) {
  const text = (sel) => {
    const found = el.querySelector(sel);
    return found ? found.textContent.trim() : null;
  };
  const link = el.querySelector('[data-testid=mcp-url]');
  return {
    id: el.dataset.questionId,
    mode: el.dataset.mode,
    state: el.dataset.state,
    server: text('[data-testid=mcp-server]'),
    message: text('[data-testid=mcp-message]'),
    outcome: text('[data-testid=mcp-outcome]'),
    elements: el.querySelectorAll('*').length,
    markup: el.querySelectorAll('img, b, script').length,
    link: link ? { href: link.getAttribute('href'), rel: link.getAttribute('rel'), target: link.getAttribute('target'), text: link.textContent } : null,
    refused: text('[data-testid=mcp-url-refused]'),
    arguments: text('[data-testid=mcp-arguments]'),
    buttons: [...el.querySelectorAll('button')].filter((b) => b.checkVisibility()).map((b) => b.textContent.trim()),
    formShown: [...el.querySelectorAll('input, select')].some((i) => i.checkVisibility()),
    fields: [...el.querySelectorAll('[data-testid=mcp-field]')].map((f) => {
      const inputs = [...f.querySelectorAll('input, select')];
      const first = inputs[0];
      return {
        name: f.dataset.name,
        kind: f.dataset.kind,
        tag: first ? first.tagName.toLowerCase() : null,
        type: first ? first.getAttribute('type') : null,
        required: first ? first.required : false,
        min: first ? first.getAttribute('min') : null,
        max: first ? first.getAttribute('max') : null,
        step: first ? first.getAttribute('step') : null,
        value: first && first.type !== 'checkbox' ? first.value : null,
        checked: inputs.filter((i) => i.type === 'checkbox' && i.checked).map((i) => i.value),
        options: first && first.tagName === 'SELECT' ? [...first.options].map((o) => [o.value, o.textContent]) : null,
      };
    }),
  };
}

async function startRun(page, agent, task) {
  await page.locator('[data-testid=brand]').click();
  await page.locator('[data-testid=start-task]').waitFor();
  await page.locator('[data-testid=start-task]').fill(task);
  await page.locator('[data-testid=start-agent]').selectOption(agent);
  await page.locator('[data-testid=start-submit]').click();
  await page.waitForFunction(() => /^#\/runs\/[^/]+$/.test(location.hash));
  await page.locator('[data-testid=run-view]').waitFor();
  return decodeURIComponent((await page.evaluate(() => location.hash)).replace('#/runs/', ''));
}

async function question(page, state) {
  const el = page.locator(`[data-testid=mcp-question][data-state="${state}"]`).first();
  await el.waitFor();
  return el;
}

async function snapshot(el) {
  return el.evaluate(questionSnapshot);
}

async function runEnd(page) {
  await page.waitForFunction(() => {
    const st = document.querySelector('[data-testid=run-status]');
    return st && ['succeeded', 'failed', 'cancelled'].includes(st.textContent.trim()) && document.querySelector('[data-testid=run-answer]');
  });
  return {
    status: (await page.locator('[data-testid=run-status]').textContent()).trim(),
    answer: (await page.locator('[data-testid=run-answer]').textContent()).trim(),
    waiting: await page.locator('[data-testid=mcp-waiting]').getAttribute('data-waiting'),
  };
}

// Before the token is typed, the browser logs the daemon's 401s: they do not count.
let tokenGiven = false;

async function drive(page) {
  const context = page.context();
  page.on('request', (req) => {
    if (req.method() === 'POST' && req.url().includes('/elicitations/')) {
      report.answers.push({ url: req.url(), body: JSON.parse(req.postData() || 'null'), auth: req.headers().authorization || null });
    }
  });

  // 1. The daemon wants a token: the page asks for it, then works.
  report.phase = 'token';
  await page.goto(`${plan.url}/`);
  await page.locator('[data-testid=auth-token]').waitFor();
  tokenGiven = true;
  await page.locator('[data-testid=auth-token]').fill(plan.token);
  await page.locator('[data-testid=auth-token]').press('Enter');

  // 2. An MCP server waits for approval: the panel links its authorization
  //    page; following the link approves (in a new tab) and the entry goes.
  report.phase = 'authorize';
  const entry = page.locator('[data-testid=mcp-authorization]').first();
  await entry.waitFor();
  if (plan.screenshot) await page.screenshot({ path: `${plan.screenshot}-auth.png` });
  const link = entry.locator('[data-testid=mcp-authorization-link]');
  report.authorization = {
    server: (await entry.locator('[data-testid=mcp-authorization-server]').textContent()).trim(),
    href: await link.getAttribute('href'),
    rel: await link.getAttribute('rel'),
    target: await link.getAttribute('target'),
    text: (await entry.textContent()).trim(),
  };
  const clickedAt = Date.now();
  const [tab] = await Promise.all([context.waitForEvent('page'), link.click()]);
  await page.locator('[data-testid=mcp-authorizations]').waitFor({ state: 'hidden' });
  report.authorization.goneAfterMs = Date.now() - clickedAt;
  await tab.waitForLoadState('load');
  report.authorization.tabUrl = tab.url();
  report.authorization.tabHasOpener = await tab.evaluate(() => window.opener !== null);
  await tab.close();

  // 3. A form question: shown with its fields and defaults; Accept with a
  //    required field empty sends nothing; filled in, the answer is sent.
  report.phase = 'form-accept';
  const acceptRun = await startRun(page, plan.asker.agent, plan.asker.task);
  let q = await question(page, 'waiting');
  report.form = { runId: acceptRun, shown: await snapshot(q) };
  if (plan.screenshot) await page.screenshot({ path: `${plan.screenshot}-form.png`, fullPage: true });
  await q.locator('[data-testid=mcp-accept]').click();
  await page.waitForTimeout(300);
  report.form.afterEmptyAccept = {
    state: await q.getAttribute('data-state'),
    answersSent: report.answers.length,
    nameInvalid: await q.locator('input[name=name]').evaluate((i) => !i.validity.valid),
  };
  await q.locator('input[name=name]').fill(plan.answer.name);
  await q.locator('input[name=check]').check();
  await q.locator('input[name=integer]').fill(String(plan.answer.integer));
  await q.locator('select[name=untitledSingleSelectEnum]').selectOption(plan.answer.enum);
  for (const [name, value] of plan.answer.toggle) {
    await q.locator(`input[name=${name}][value="${value}"]`).click();
  }
  await q.locator('[data-testid=mcp-accept]').click();
  await question(page, 'accept');
  report.form.end = await runEnd(page);
  report.form.settled = await snapshot(page.locator('[data-testid=mcp-question]').first());

  // 4. Declined: the server hears "decline".
  report.phase = 'form-decline';
  const declineRun = await startRun(page, plan.asker.agent, plan.asker.task);
  q = await question(page, 'waiting');
  report.decline = { runId: declineRun };
  await q.locator('[data-testid=mcp-decline]').click();
  await question(page, 'decline');
  report.decline.end = await runEnd(page);
  report.decline.settled = await snapshot(page.locator('[data-testid=mcp-question]').first());

  // 5. URL mode: a link to open (new tab, no opener), then "I've done it".
  report.phase = 'url';
  const urlRun = await startRun(page, plan.urler.agent, plan.urler.link);
  q = await question(page, 'waiting');
  report.url = { runId: urlRun, shown: await snapshot(q) };
  if (plan.screenshot) await page.screenshot({ path: `${plan.screenshot}-url.png` });
  await q.locator('[data-testid=mcp-accept]').click();
  await question(page, 'accept');
  report.url.end = await runEnd(page);

  // 6. URL mode with an address that is no web link: shown as text only.
  report.phase = 'url-refused';
  const refusedRun = await startRun(page, plan.urler.agent, plan.urler.refused);
  q = await question(page, 'waiting');
  report.refused = { runId: refusedRun, shown: await snapshot(q) };
  await q.locator('[data-testid=mcp-decline]').click();
  await question(page, 'decline');
  report.refused.end = await runEnd(page);

  // 7. Answered by another client meanwhile: the question stops waiting
  //    here too (its tool call ends), without a reload.
  report.phase = 'elsewhere';
  const elsewhereRun = await startRun(page, plan.asker.agent, plan.asker.task);
  q = await question(page, 'waiting');
  const qid = await q.getAttribute('data-question-id');
  report.elsewhere = { runId: elsewhereRun };
  report.elsewhere.post = await page.evaluate(
    async ({ runId, questionId, token }) => {
      const resp = await fetch(`/v1/runs/${encodeURIComponent(runId)}/elicitations/${encodeURIComponent(questionId)}`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
        body: JSON.stringify({ action: 'cancel' }),
      });
      return resp.status;
    },
    { runId: elsewhereRun, questionId: qid, token: plan.token },
  );
  await question(page, 'gone');
  report.elsewhere.end = await runEnd(page);
  report.elsewhere.settled = await snapshot(page.locator('[data-testid=mcp-question]').first());

  // 8. A destructive tool's call waits for approval: allowed, it runs.
  report.phase = 'approval';
  const approvalRun = await startRun(page, plan.guarded.agent, plan.guarded.task);
  q = await question(page, 'waiting');
  report.approval = { runId: approvalRun, shown: await snapshot(q) };
  await q.locator('[data-testid=mcp-accept]').click();
  await question(page, 'accept');
  report.approval.end = await runEnd(page);
  report.approval.settled = await snapshot(page.locator('[data-testid=mcp-question]').first());

  // 9. A tool under [approvals.TOOL] (agentrt's own approval): the run shows
  // waiting; denied, the tool does not run and the model hears why.
  report.phase = 'gated';
  const gatedRun = await startRun(page, plan.gated.agent, plan.gated.task);
  q = await question(page, 'waiting');
  await page.waitForFunction(() => document.querySelector('[data-testid=run-status]')?.textContent.trim() === 'waiting');
  report.gated = { runId: gatedRun, shown: await snapshot(q) };
  await q.locator('[data-testid=mcp-decline]').click();
  await question(page, 'decline');
  report.gated.end = await runEnd(page);
  if (plan.screenshot) await page.screenshot({ path: `${plan.screenshot}-end.png` });
  report.phase = 'done';
}

await finish('web_mcp', report, () =>
  withPage(plan, report, drive, { counts: () => tokenGiven }),
);
