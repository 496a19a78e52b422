// The page's entry point: the hash router, the token bar, the MCP
// authorizations waiting for a person (mcpauth.js), the runs list
// (refreshed every few seconds) and the form that starts a run.
// Routes: #/ (runs), #/runs/<id> (one run), #/runs/<id>/rollouts/<rollout>.

import { api, onUnauthorized, setToken, getToken } from './api.js';
import { h, fill, badge, fmtCost, fmtAgo, clip } from './dom.js';
import { RunView } from './run.js';
import { AuthorizationsPanel } from './mcpauth.js';

const LIST_REFRESH_MS = 2000;
const PAGE_SIZE = 50;
const AGGREGATORS = ['majority', 'best_of_n', 'weighted', 'rtv', 'pdr', 'compressed', 'aggagent'];
const STATUSES = ['', 'pending', 'running', 'waiting', 'succeeded', 'failed', 'cancelled'];

const root = document.getElementById('view');
const authorizations = new AuthorizationsPanel(document.getElementById('mcp-auth'));

// ---------------------------------------------------------------- token bar

function showTokenBar(message) {
  const bar = document.getElementById('auth');
  const shown = bar.hidden ? null : bar.querySelector('form.auth');
  if (shown) {
    // Several calls can be refused at once: keep the form (and what is
    // being typed into it), only say why again.
    shown.querySelector('span').textContent = message;
    return;
  }
  const input = h('input', {
    type: 'password',
    placeholder: 'bearer token',
    autocomplete: 'off',
    testid: 'auth-token',
  });
  const save = (ev) => {
    ev.preventDefault();
    setToken(input.value.trim());
    bar.hidden = true;
    route();
  };
  fill(
    bar,
    h(
      'form',
      { class: 'auth', onsubmit: save },
      h('span', {}, message),
      input,
      h('button', { type: 'submit' }, 'Use token'),
    ),
  );
  bar.hidden = false;
}

onUnauthorized(() =>
  showTokenBar(getToken() ? 'The token was refused.' : 'This daemon needs a bearer token.'),
);

// ---------------------------------------------------------------- runs view

class RunsView {
  constructor(container) {
    this.container = container;
    this.timer = null;
    this.stopped = false;
    this.status = '';
    this.first = [];
    this.older = [];
    this.nextCursor = null;
    this.olderCursor = undefined;
  }

  mount() {
    this.table = h('tbody', {});
    this.updated = h('span', { class: 'muted', testid: 'runs-updated' });
    this.listError = h('div', { class: 'error', testid: 'runs-error', hidden: true });
    this.more = h(
      'button',
      { type: 'button', testid: 'runs-more', hidden: true, onclick: () => this.loadOlder() },
      'Older runs',
    );
    const filter = h(
      'select',
      {
        testid: 'runs-filter',
        onchange: (ev) => {
          this.status = ev.target.value;
          this.older = [];
          this.olderCursor = undefined;
          this.refresh();
        },
      },
      STATUSES.map((st) => h('option', { value: st }, st || 'all statuses')),
    );
    fill(
      this.container,
      h(
        'section',
        { testid: 'runs-view' },
        startForm(),
        h(
          'div',
          { class: 'panel' },
          h('div', { class: 'panel-head' }, h('h2', {}, 'Runs'), filter, this.updated),
          this.listError,
          h(
            'table',
            { class: 'runs', testid: 'runs-table' },
            h(
              'thead',
              {},
              h(
                'tr',
                {},
                ['Status', 'Agent', 'Task', 'Scaling', 'Cost', 'Started'].map((t) =>
                  h('th', {}, t),
                ),
              ),
            ),
            this.table,
          ),
          this.more,
        ),
      ),
    );
    this.refresh();
  }

  unmount() {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  query(cursor) {
    const params = new URLSearchParams({ limit: String(PAGE_SIZE) });
    if (this.status) params.set('status', this.status);
    if (cursor) params.set('cursor', cursor);
    return `/v1/runs?${params}`;
  }

  async refresh() {
    clearTimeout(this.timer);
    try {
      const page = await api(this.query(null));
      if (this.stopped) return;
      this.first = page.runs;
      this.nextCursor = page.next_cursor;
      this.listError.hidden = true;
      this.updated.textContent = `updated ${new Date().toLocaleTimeString()}`;
      this.render();
    } catch (err) {
      if (this.stopped) return;
      fill(this.listError, String(err.message || err));
      this.listError.hidden = false;
    }
    if (!this.stopped) this.timer = setTimeout(() => this.refresh(), LIST_REFRESH_MS);
  }

  async loadOlder() {
    const cursor = this.olderCursor === undefined ? this.nextCursor : this.olderCursor;
    if (!cursor) return;
    try {
      const page = await api(this.query(cursor));
      this.older = this.older.concat(page.runs);
      this.olderCursor = page.next_cursor || null;
      this.render();
    } catch (err) {
      fill(this.listError, String(err.message || err));
      this.listError.hidden = false;
    }
  }

  render() {
    const seen = new Set();
    const runs = [];
    for (const run of this.first.concat(this.older)) {
      if (seen.has(run.run_id)) continue;
      seen.add(run.run_id);
      runs.push(run);
    }
    fill(
      this.table,
      runs.length
        ? runs.map(runRow)
        : h('tr', {}, h('td', { colspan: 6, class: 'muted', testid: 'runs-empty' }, 'No runs yet.')),
    );
    const cursor = this.olderCursor === undefined ? this.nextCursor : this.olderCursor;
    this.more.hidden = !cursor;
  }
}

function runRow(run) {
  const open = () => {
    location.hash = `#/runs/${encodeURIComponent(run.run_id)}`;
  };
  return h(
    'tr',
    { testid: 'run-row', class: 'clickable', dataset: { runId: run.run_id, status: run.status }, onclick: open },
    h('td', {}, badge(run.status, 'run-row-status')),
    h('td', { testid: 'run-row-agent' }, run.agent),
    h(
      'td',
      { testid: 'run-row-task', title: run.task },
      h('a', { href: `#/runs/${encodeURIComponent(run.run_id)}` }, clip(run.task, 90)),
      run.answer ? h('div', { class: 'muted', testid: 'run-row-answer' }, `→ ${clip(run.answer, 90)}`) : null,
      !run.answer && run.error ? h('div', { class: 'error', testid: 'run-row-error', title: run.error }, `✗ ${clip(run.error, 140)}`) : null,
    ),
    h('td', { class: 'nowrap' }, `${run.rollouts} × ${run.aggregate}`),
    h('td', { class: 'nowrap', testid: 'run-row-cost' }, fmtCost(run.cost)),
    h('td', { class: 'nowrap', title: new Date(run.created_at * 1000).toLocaleString() }, fmtAgo(run.created_at)),
  );
}

// ---------------------------------------------------------------- start form

function numberOrNull(value, parse) {
  const text = value.trim();
  if (!text) return null;
  const n = parse(text);
  if (!Number.isFinite(n) || n < 0) throw new Error(`not a non-negative number: ${text}`);
  return n;
}

function startForm() {
  const task = h('textarea', { name: 'task', rows: 2, required: true, testid: 'start-task', placeholder: 'What should the agent do?' });
  const agent = h('select', { name: 'agent', testid: 'start-agent' }, h('option', { value: 'default' }, 'default'));
  const rollouts = h('input', { name: 'rollouts', type: 'number', min: 1, max: 256, value: '1', testid: 'start-rollouts' });
  const aggregate = h('select', { name: 'aggregate', testid: 'start-aggregate' }, AGGREGATORS.map((a) => h('option', { value: a }, a)));
  const options = h('input', { name: 'options', type: 'text', placeholder: '{"g": 2, "v": 4}', testid: 'start-options' });
  const maxUsd = h('input', { name: 'max_usd', type: 'number', min: 0, step: 'any', placeholder: 'no cap', testid: 'start-max-usd' });
  const maxTokens = h('input', { name: 'max_tokens', type: 'number', min: 0, step: 1, placeholder: 'no cap', testid: 'start-max-tokens' });
  const error = h('div', { class: 'error', testid: 'start-error', hidden: true });
  const submit = h('button', { type: 'submit', testid: 'start-submit' }, 'Start run');

  api('/v1/agents')
    .then((list) => {
      if (!list.agents.length) return;
      fill(
        agent,
        list.agents.map((a) =>
          h('option', { value: a.name, selected: a.default, title: a.description }, a.name),
        ),
      );
    })
    .catch(() => {
      // the list stays at "default"; the daemon reports a bad agent on submit
    });

  const onSubmit = async (ev) => {
    ev.preventDefault();
    error.hidden = true;
    let body;
    try {
      const opts = options.value.trim() ? JSON.parse(options.value) : {};
      if (typeof opts !== 'object' || Array.isArray(opts) || opts === null) {
        throw new Error('options must be a JSON object');
      }
      const budget = {};
      const usd = numberOrNull(maxUsd.value, Number.parseFloat);
      const tokens = numberOrNull(maxTokens.value, (t) => Number.parseInt(t, 10));
      if (usd !== null) budget.max_usd = usd;
      if (tokens !== null) budget.max_tokens = tokens;
      body = {
        task: task.value,
        agent: agent.value,
        scaling: {
          rollouts: Number.parseInt(rollouts.value || '1', 10),
          aggregate: aggregate.value,
          options: opts,
        },
        budget,
        // This page follows the run at once: stream from its first call.
        stream_tokens: true,
      };
    } catch (err) {
      fill(error, String(err.message || err));
      error.hidden = false;
      return;
    }
    submit.disabled = true;
    try {
      const info = await api('/v1/runs', { method: 'POST', body });
      location.hash = `#/runs/${encodeURIComponent(info.run_id)}`;
    } catch (err) {
      fill(error, String(err.message || err));
      error.hidden = false;
    } finally {
      submit.disabled = false;
    }
  };

  const field = (label, input) => h('label', {}, h('span', {}, label), input);
  return h(
    'form',
    { class: 'panel start', testid: 'start-form', onsubmit: onSubmit },
    h('h2', {}, 'Start a run'),
    field('Task', task),
    h(
      'div',
      { class: 'row' },
      field('Agent', agent),
      field('Rollouts', rollouts),
      field('Aggregate', aggregate),
      field('Options (JSON)', options),
      field('Max USD', maxUsd),
      field('Max tokens', maxTokens),
    ),
    error,
    submit,
  );
}

// ---------------------------------------------------------------- router

let current = null;

function parseHash() {
  const parts = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  if (parts[0] === 'runs' && parts[1]) {
    return { view: 'run', runId: parts[1], rolloutId: parts[2] === 'rollouts' ? parts[3] : null };
  }
  return { view: 'runs' };
}

function route() {
  authorizations.wake();
  const where = parseHash();
  if (where.view === 'run' && current instanceof RunView && current.runId === where.runId) {
    current.select(where.rolloutId);
    return;
  }
  if (current) current.unmount();
  if (where.view === 'run') {
    current = new RunView(root, where.runId);
    current.mount(where.rolloutId);
    document.title = `agentrt · ${where.runId}`;
  } else {
    current = new RunsView(root);
    current.mount();
    document.title = 'agentrt · runs';
  }
}

window.addEventListener('hashchange', route);
route();
authorizations.start();
